// The stand-in nvidia-smi (tests/fixture/standin_nvidia_smi.c) against the
// output NVIDIA's MIG User Guide prints for the same commands, and the
// driver state it leaves behind (tests/fixture/mig_standin.h).
#include "machine_fixture.hpp"
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

namespace {

std::string capture(const std::string& name) {
    std::ifstream in(std::string(GPUINIT_TESTS_DIR) + "/fixture/captures/" + name);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// The first `count` lines of `text`.
std::string head(const std::string& text, size_t count) {
    size_t at = 0;
    for (size_t i = 0; i < count && at != std::string::npos; ++i) {
        at = text.find('\n', at);
        at = at == std::string::npos ? at : at + 1;
    }
    return text.substr(0, at);
}

} // namespace

// The real H100 of the capture, MIG off: -lgip and -lgipp list it anyway,
// -lgi and -lci say there is no MIG device and exit 0, -L lists the GPU.
TEST_F(StandinSmi, ListsAsTheRealH100WithMigOff) {
    setenv("GPUINIT_STANDIN_GPUS", "1", 1);
    std::string lgip = capture("h100-580.159.04/mig-lgip.txt");
    std::string lgipp = capture("h100-580.159.04/mig-lgipp.txt");
    ASSERT_FALSE(lgip.empty());
    ASSERT_FALSE(lgipp.empty());
    Ran ran = smi("mig -lgip");
    EXPECT_EQ(ran.status, 0);
    EXPECT_EQ(ran.output, lgip);
    ran = smi("mig -lgipp");
    EXPECT_EQ(ran.status, 0);
    EXPECT_EQ(ran.output, lgipp);
    for (const char* list : {"-lgi", "-lci"}) {
        ran = smi(std::string("mig ") + list);
        EXPECT_EQ(ran.status, 0);
        EXPECT_EQ(ran.output, capture(std::string("h100-580.159.04/mig") + list + ".txt"));
    }
    ran = smi("-L");
    EXPECT_EQ(ran.status, 0);
    EXPECT_EQ(ran.output,
              "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + gpuinit::testing::fake_uuid(0) + ")\n");
}

// Free counts what still fits; -lgipp lists every GPU, MIG on or off.
TEST_F(StandinSmi, ListsProfilesOfEveryGpuWithWhatStillFits) {
    mig_on(0);
    ASSERT_EQ(smi("mig -i 0 -cgi 3g.40gb:4,1g.10gb+me").status, 0);
    Ran ran = smi("mig -lgip");
    EXPECT_EQ(ran.status, 0);
    EXPECT_NE(ran.output.find("|   0  MIG 1g.10gb         19     3/7        9.75 "),
              std::string::npos)
        << ran.output;
    EXPECT_NE(ran.output.find("|   0  MIG 1g.10gb+me      20     0/1 "), std::string::npos)
        << ran.output;
    EXPECT_NE(ran.output.find("|   0  MIG 3g.40gb          9     0/2 "), std::string::npos)
        << ran.output;
    EXPECT_NE(ran.output.find("|   1  MIG 3g.40gb          9     2/2 "), std::string::npos)
        << ran.output;
    // GPU 1 follows GPU 0, the same lines.
    std::string second = capture("h100-580.159.04/mig-lgipp.txt");
    for (size_t at = 0; (at = second.find("GPU  0", at)) != std::string::npos;) {
        second.replace(at, 6, "GPU  1");
    }
    ran = smi("mig -lgipp");
    EXPECT_EQ(ran.output, capture("h100-580.159.04/mig-lgipp.txt") + second);
}

// The tables of -lgi and -lci are the RTX PRO 6000 capture's (610.43.02),
// in its order (by profile as -lgip lists them, then GI id), each CI named
// as nvidia-smi names it; with MIG on and nothing made, "Not Found".
TEST_F(StandinSmi, ListsInstancesInTheRealTables) {
    mig_on(0);
    Ran ran = smi("mig -lgi");
    EXPECT_EQ(ran.output, "No GPU instances found: Not Found\n");
    EXPECT_EQ(ran.status, 6);
    ASSERT_EQ(smi("mig -i 0 -cgi 3g.40gb:4,1g.10gb+me:0,1g.10gb:1 -C").status, 0);
    ASSERT_EQ(smi("mig -i 0 -gi 1 -dci").status, 0);
    ASSERT_EQ(smi("mig -i 0 -gi 1 -cci 0,1").status, 0);
    ran = smi("mig -lgi");
    EXPECT_EQ(ran.status, 0);
    std::string lgi = capture("rtx-pro-6000-blackwell-610.43.02/mig-lgi.txt");
    EXPECT_EQ(head(ran.output, 5), head(lgi, 5));
    EXPECT_EQ(
        ran.output.substr(head(ran.output, 5).size()),
        "|   0  MIG 1g.10gb           19       12          1:1     |\n" + lgi.substr(0, 60) +
            "|   0  MIG 1g.10gb+me        20       11          0:1     |\n" + lgi.substr(0, 60) +
            "|   0  MIG 3g.40gb            9        1          4:4     |\n" + lgi.substr(0, 60));
    ran = smi("mig -lci");
    EXPECT_EQ(ran.status, 0);
    std::string lci = capture("rtx-pro-6000-blackwell-610.43.02/mig-lci.txt");
    std::string rule = lci.substr(0, 71);
    EXPECT_EQ(head(ran.output, 6), head(lci, 6));
    EXPECT_EQ(
        ran.output.substr(head(ran.output, 6).size()),
        "|   0     12       MIG 1g.10gb          0         0          0:1     |\n" + rule +
            "|   0     11       MIG 1g.10gb          0         0          0:1     |\n" + rule +
            "|   0      1       MIG 1c.3g.40gb       0         0          0:1     |\n" + rule +
            "|   0      1       MIG 2c.3g.40gb       1         1          1:2     |\n" + rule);
    ran = smi("-L");
    EXPECT_EQ(ran.status, 0);
    EXPECT_NE(ran.output.find("\n  MIG 1c.3g.40gb  Device  0: (UUID: MIG-"), std::string::npos)
        << ran.output;
    EXPECT_NE(ran.output.find("\n  MIG 1g.10gb+me  Device  2: (UUID: MIG-"), std::string::npos)
        << ran.output;
}

// -q -x: the identity, MIG modes, MIG devices and the processes of
// $GPUINIT_STANDIN_PIDS; a malformed value fails.
TEST_F(StandinSmi, QueriesAsXmlWithTheProcessesGiven) {
    mig_on(1);
    ASSERT_EQ(smi("mig -i 1 -cgi 19 -C").status, 0);
    setenv("GPUINIT_STANDIN_PIDS", "1:4242,0:77", 1);
    Ran ran = smi("-q -x");
    unsetenv("GPUINIT_STANDIN_PIDS");
    EXPECT_EQ(ran.status, 0);
    EXPECT_TRUE(ran.output.starts_with(head(capture("h100-580.159.04/q.xml"), 3))) << ran.output;
    for (const char* part :
         {"\t<attached_gpus>2</attached_gpus>\n\t<gpu id=\"00000000:17:00.0\">\n",
          "\t<gpu id=\"00000000:27:00.0\">\n", "\t\t\t<current_mig>Enabled</current_mig>\n",
          "\t\t\t<pci_bus_id>00000000:27:00.0</pci_bus_id>\n",
          "\t\t\t\t<gpu_instance_id>9</gpu_instance_id>\n\t\t\t\t<compute_instance_id>0</"
          "compute_instance_id>\n\t\t\t\t<pid>4242</pid>\n",
          "\t\t\t\t<gpu_instance_id>N/A</gpu_instance_id>\n\t\t\t\t<compute_instance_id>N/"
          "A</compute_instance_id>\n\t\t\t\t<pid>77</pid>\n",
          "\t\t<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>\n"}) {
        EXPECT_NE(ran.output.find(part), std::string::npos) << part << "\nin\n" << ran.output;
    }
    setenv("GPUINIT_STANDIN_PIDS", "1-4242", 1);
    ran = smi("-q -x");
    unsetenv("GPUINIT_STANDIN_PIDS");
    EXPECT_EQ(ran.status, 2) << ran.output;
}
