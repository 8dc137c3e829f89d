// The stand-in nvidia-smi (tests/fixture/standin_nvidia_smi.c) against the
// output NVIDIA's MIG User Guide prints for the same commands, and the
// driver state it leaves behind (tests/fixture/mig_standin.h).
#include "mig_standin.h"
#include "temp_dir.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>

namespace {

struct Ran {
    int status = -1;
    std::string output;
};

class StandinSmi : public ::testing::Test {
  protected:
    void SetUp() override {
        setenv("GPUINIT_STANDIN_MIG", dir_.path().c_str(), 1);
        setenv("GPUINIT_STANDIN_GPUS", "2", 1);
        setenv("GPUINIT_STANDIN_CAPS", caps_.path().c_str(), 1);
    }
    void TearDown() override {
        unsetenv("GPUINIT_STANDIN_MIG");
        unsetenv("GPUINIT_STANDIN_GPUS");
        unsetenv("GPUINIT_STANDIN_CAPS");
    }

    Ran smi(const std::string& args) {
        Ran ran;
        FILE* pipe = popen((std::string(STANDIN_NVIDIA_SMI) + " " + args).c_str(), "r");
        if (pipe == nullptr) {
            return ran;
        }
        char buffer[512];
        for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) {
            ran.output.append(buffer, n);
        }
        int status = pclose(pipe);
        ran.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return ran;
    }

    standin_gpu gpu(unsigned index) {
        standin_gpu state;
        EXPECT_EQ(standin_load(&state, (dir_ / ("gpu" + std::to_string(index))).c_str()), 0);
        return state;
    }

    void mig_on(unsigned index) {
        standin_gpu state;
        standin_h100(&state, 1);
        ASSERT_EQ(standin_save(&state, (dir_ / ("gpu" + std::to_string(index))).c_str()), 0);
    }

    gpuinit::testing::TempDir dir_;
    gpuinit::testing::TempDir caps_;
};

} // namespace

// The guide's "Example 2" in the order it warns against: the last create
// fails, and what was made before it stays.
TEST_F(StandinSmi, CreatesGisAsTheGuideShowsAndStopsAtTheFirstThatDoesNotFit) {
    mig_on(1);
    Ran ran = smi("mig -i 1 -cgi 19,19,14,9");
    EXPECT_EQ(
        ran.output,
        "Successfully created GPU instance ID  9 on GPU  1 using profile MIG 1g.10gb (ID 19)\n"
        "Successfully created GPU instance ID  7 on GPU  1 using profile MIG 1g.10gb (ID 19)\n"
        "Successfully created GPU instance ID  5 on GPU  1 using profile MIG 2g.20gb (ID 14)\n"
        "Unable to create a GPU instance on GPU  1 using profile 9: Insufficient Resources\n"
        "Failed to create GPU instances: Insufficient Resources\n");
    EXPECT_NE(ran.status, 0);
    standin_gpu state = gpu(1);
    EXPECT_TRUE(state.gis[9].used && state.gis[7].used && state.gis[5].used);
    EXPECT_EQ(state.gis[5].start, 0u);
    EXPECT_EQ(gpu(0).mig, 0); // the other GPU untouched
}

TEST_F(StandinSmi, CreatesAtAPlacementWithDefaultCisAndDestroysThem) {
    mig_on(0);
    Ran ran = smi("mig -i 0 -cgi 3g.40gb:0,15 -C");
    EXPECT_EQ(ran.status, 0) << ran.output;
    EXPECT_EQ(
        ran.output,
        "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)\n"
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using "
        "profile MIG 3g.40gb (ID  2)\n"
        "Successfully created GPU instance ID  4 on GPU  0 using profile MIG 1g.20gb (ID 15)\n"
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  4 using "
        "profile MIG 1g.20gb (ID  0)\n");
    ran = smi("mig -i 0 -gi 2 -cci 0,0");
    EXPECT_EQ(ran.status, 255) << ran.output; // the 3g CI holds all three slices
    EXPECT_NE(ran.output.find("Insufficient Resources"), std::string::npos) << ran.output;

    ran = smi("mig -i 0 -dgi -gi 2");
    EXPECT_NE(ran.status, 0);
    EXPECT_NE(ran.output.find("In use by another client"), std::string::npos) << ran.output;
    struct stat st {};
    EXPECT_EQ(lstat((caps_ / "gpu0/mig/gi2/ci0/access").c_str(), &st), 0);
    EXPECT_EQ(lstat((caps_ / "gpu0/mig/gi4/access").c_str(), &st), 0);
    ran = smi("mig -i 0 -dci -gi 2");
    EXPECT_EQ(ran.output,
              "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  2\n");
    ran = smi("mig -i 0 -gi 2 -cci 0,0,0");
    EXPECT_EQ(ran.status, 0) << ran.output;
    EXPECT_NE(ran.output.find("ID  2 on GPU  0 GPU instance ID  2 using profile MIG 1c.3g.40gb "
                              "(ID  0)"),
              std::string::npos)
        << ran.output;
    ran = smi("mig -dci");
    EXPECT_EQ(ran.status, 3) << ran.output; // GPU 0 done, then GPU 1: MIG off, Not Supported
    ran = smi("mig -i 0 -dgi");
    EXPECT_EQ(ran.status, 0) << ran.output;
    EXPECT_EQ(ran.output, "Successfully destroyed GPU instance ID  2 from GPU  0\n"
                          "Successfully destroyed GPU instance ID  4 from GPU  0\n");
    for (const standin_gi& gi : gpu(0).gis) {
        EXPECT_FALSE(gi.used);
    }
    EXPECT_NE(lstat((caps_ / "gpu0/mig/gi2").c_str(), &st), 0);
    EXPECT_EQ(lstat((caps_ / "gpu0/mig").c_str(), &st), 0);
}

TEST_F(StandinSmi, AModeChangeWaitsForTheReset) {
    Ran ran = smi("mig -i 0 -cgi 19");
    EXPECT_EQ(ran.status, 3) << ran.output;
    EXPECT_NE(ran.output.find("using profile 19: Not Supported"), std::string::npos);
    ran = smi("-i 0 -mig 1");
    EXPECT_EQ(ran.status, 0);
    EXPECT_EQ(ran.output, "Enabled MIG Mode for GPU 00000000:17:00.0\nAll done.\n");
    EXPECT_EQ(gpu(0).mig, 0);
    EXPECT_EQ(gpu(0).mig_pending, 1);
    ran = smi("--gpu-reset -i 0");
    EXPECT_EQ(ran.output, "GPU 00000000:17:00.0 was successfully reset.\nAll done.\n");
    EXPECT_EQ(gpu(0).mig, 1);
    EXPECT_EQ(smi("mig -i 0 -cgi 19 -C").status, 0);
    EXPECT_EQ(smi("-i 5 -mig 1").status, 6); // no such GPU
    EXPECT_EQ(smi("mig -i 0 -cgi").status, 2);
}

TEST_F(StandinSmi, ListsPlacementsAsTheRealH100) {
    mig_on(0);
    std::ifstream in(std::string(GPUINIT_TESTS_DIR) +
                     "/fixture/captures/h100-580.159.04/mig-lgipp.txt");
    std::stringstream capture;
    capture << in.rdbuf();
    ASSERT_FALSE(capture.str().empty());
    Ran ran = smi("mig -lgipp"); // GPU 1 has MIG off: not listed
    EXPECT_EQ(ran.status, 0);
    EXPECT_EQ(ran.output, capture.str());
}
