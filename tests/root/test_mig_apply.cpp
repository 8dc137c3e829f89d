// gpu-mig apply as root, the whole command through the multi-call binary:
// the stand-in nvidia-smi (tests/fixture/standin_nvidia_smi.c) changes the
// stand-in driver's instances and writes their cap files into the
// fixture's /proc, as the driver does, and apply's sync then makes their
// cap nodes and leases. What an admin runs at boot, and again after.
#include "gpuinit/base/text.hpp"
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <csignal>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuinit {

using testing::run_process;
using testing::TempDir;

namespace {

struct ApplyBox {
    TempDir root;
    TempDir state; // the stand-in driver's MIG state, one file per GPU
    explicit ApplyBox(const std::string& layout) {
        testing::FakeMachine machine = testing::workstation(2);
        machine.mig_caps = true;
        machine.cap_modify = false;
        EXPECT_TRUE(testing::write_fixture(machine, root.path()));
        std::filesystem::create_directories(root / "etc");
        std::ofstream(root / "etc/gpu-mig-layout.conf") << layout;
    }
    // gpu-mig apply (or another command) with the stand-in's environment
    // and no nvidia-smi on PATH but the one given.
    int gpu_mig(std::vector<std::string> args, std::string* output,
                const std::string& pids = "") const {
        std::vector<std::string> argv = {"/usr/bin/env",
                                         "-i",
                                         "PATH=/nonexistent",
                                         "GPUINIT_STANDIN_GPUS=2",
                                         "GPUINIT_STANDIN_MIG=" + state.path(),
                                         "GPUINIT_STANDIN_CAPS=" +
                                             (root / "proc/driver/nvidia/capabilities"),
                                         "GPUINIT_STANDIN_CAPS_MODIFY=0",
                                         "GPUINIT_STANDIN_PIDS=" + pids,
                                         GPUINIT_BIN,
                                         "mig"};
        argv.insert(argv.end(), args.begin(), args.end());
        argv.insert(argv.end(), {"--root", root.path(), "--nvidia-smi", STANDIN_NVIDIA_SMI});
        output->clear();
        return run_process(argv, output);
    }
    size_t cap_nodes() const {
        size_t count = 0;
        std::error_code ignored;
        for (const auto& entry :
             std::filesystem::directory_iterator(root / "dev/nvidia-caps", ignored)) {
            count += entry.is_character_file() ? 1 : 0;
        }
        return count;
    }
};

size_t count_of(const std::string& text, const std::string& what) {
    size_t count = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
        ++count;
    }
    return count;
}

} // namespace

TEST(MigApplyRoot, ALayoutConvergesInOneRunWithItsNodesAndASecondRunDoesNothing) {
    GPUINIT_REQUIRE_ROOT();
    ApplyBox box("gpu=0 mig=on gi=1g.10gb*7\ngpu=1 mig=on gi=3g.40gb/1c.3g.40gb*2 gi=4g.40gb\n");
    std::string output;
    // The stand-in's GPUs start as a real H100 does: MIG off.
    ASSERT_EQ(box.gpu_mig({"apply", "--dry-run", "--reset-if-needed"}, &output), 0) << output;
    EXPECT_NE(output.find("GPU 0 (0000:17:00.0): would change in 16 steps"), std::string::npos)
        << output;
    EXPECT_NE(output.find("  1. enable MIG mode\n  2. reset the GPU\n  3. create a 1g.10gb GPU "
                          "instance\n  4. create a 1g.10gb compute instance in new GPU instance 1"),
              std::string::npos)
        << output;
    EXPECT_EQ(box.cap_nodes(), 0u) << "--dry-run made nodes";
    EXPECT_EQ(box.gpu_mig({"apply", "--check"}, &output), 4) << output;

    ASSERT_EQ(box.gpu_mig({"apply", "--reset-if-needed"}, &output), 0) << output;
    EXPECT_NE(output.find("GPU 0 (0000:17:00.0): changed in 16 steps"), std::string::npos)
        << output;
    EXPECT_NE(output.find("GPU 1 (0000:27:00.0): changed in 7 steps"), std::string::npos) << output;
    // 7 + 2 GIs and 7 + 3 CIs, each with its cap node, and the config and
    // monitor nodes; one lease per CI.
    EXPECT_EQ(box.cap_nodes(), 21u);
    EXPECT_NE(output.find("10 created, 0 repaired, 0 removed, 0 kept"), std::string::npos)
        << output;

    ASSERT_EQ(box.gpu_mig({"apply", "--json"}, &output), 0) << output;
    EXPECT_EQ(count_of(output, "\"verdict\":\"as-declared\""), 2u) << output;
    EXPECT_EQ(count_of(output, "\"steps_done\":0"), 2u) << output;
    EXPECT_NE(output.find("\"created\":[],\"repaired\":[],\"removed\":[],\"kept\":10"),
              std::string::npos)
        << output;
    EXPECT_EQ(box.gpu_mig({"apply", "--check"}, &output), 0) << output;

    // A changed layout: GPU 1 becomes seven 1g.10gb too, in one run, each
    // GI at a placement from nvidia-smi mig -lgipp.
    std::ofstream(box.root / "etc/gpu-mig-layout.conf") << "gpu=* mig=on gi=1g.10gb*7\n";
    ASSERT_EQ(box.gpu_mig({"apply", "-v"}, &output), 0) << output;
    EXPECT_NE(output.find("GPU 0 (0000:17:00.0): as declared"), std::string::npos) << output;
    EXPECT_NE(output.find("GPU 1 (0000:27:00.0): changed in 19 steps"), std::string::npos)
        << output;
    EXPECT_NE(output.find("create a 1g.10gb GPU instance at placement 6"), std::string::npos)
        << output;
    EXPECT_EQ(box.cap_nodes(), 30u);
    EXPECT_EQ(box.gpu_mig({"apply", "--check"}, &output), 0) << output;
}

TEST(MigApplyRoot, AGpuWithAProcessIsNotChangedAndTheLineNamesIt) {
    GPUINIT_REQUIRE_ROOT();
    ApplyBox box("gpu=* mig=on gi=1g.10gb*7\n");
    std::string output;
    ASSERT_EQ(box.gpu_mig({"apply", "--reset-if-needed"}, &output), 0) << output;
    std::ofstream(box.root / "etc/gpu-mig-layout.conf") << "gpu=* mig=on gi=3g.40gb\n";
    ASSERT_EQ(box.gpu_mig({"apply"}, &output, "1:4242"), 2) << output;
    EXPECT_NE(output.find("GPU 1 (0000:27:00.0): not changed: processes 4242 use it"),
              std::string::npos)
        << output;
    EXPECT_NE(output.find("GPU 0 (0000:17:00.0): changed"), std::string::npos) << output;
    // --force tries, and the driver refuses to destroy the instance the
    // process uses (NVML_ERROR_IN_USE): that is tried first, so the idle
    // ones are still there after the refusal.
    size_t nodes = box.cap_nodes();
    ASSERT_EQ(box.gpu_mig({"apply", "--force"}, &output, "1:4242"), 2) << output;
    EXPECT_NE(output.find("In use by another client"), std::string::npos) << output;
    EXPECT_EQ(box.cap_nodes(), nodes);
    // With the process gone, the change is made.
    ASSERT_EQ(box.gpu_mig({"apply"}, &output), 0) << output;
    EXPECT_NE(output.find("GPU 1 (0000:27:00.0): changed"), std::string::npos) << output;
    EXPECT_EQ(box.gpu_mig({"apply", "--check"}, &output), 0) << output;
}

TEST(MigApplyRoot, AnInstanceWhoseLeaseIsHeldMakesItsGpuBusy) {
    GPUINIT_REQUIRE_ROOT();
    ApplyBox box("gpu=0 mig=on gi=1g.10gb*7\n");
    std::string output;
    ASSERT_EQ(box.gpu_mig({"apply", "--reset-if-needed"}, &output), 0) << output;
    // A job took an instance (gpu-mig pick, as its prolog would) and has
    // not started CUDA: the driver lists no process, the lease says busy.
    pid_t job = ::fork();
    if (job == 0) {
        ::execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
        _exit(127);
    }
    ASSERT_GT(job, 0);
    ASSERT_EQ(run_process({GPUINIT_BIN, "mig", "pick", "--root", box.root.path(), "--format", "key",
                           "--until", std::to_string(job)},
                          &output),
              0)
        << output;
    std::ofstream(box.root / "etc/gpu-mig-layout.conf") << "gpu=0 mig=on gi=7g.80gb\n";
    EXPECT_EQ(box.gpu_mig({"apply"}, &output), 2) << output;
    // Under --root the holder is a process of the real /proc, which the
    // fixture's does not list: the lease alone says busy.
    EXPECT_NE(output.find("GPU 0 (0000:17:00.0): not changed: the leases of gpu0/gi"),
              std::string::npos)
        << output;
    EXPECT_EQ(box.cap_nodes(), 16u) << "an instance was destroyed under its lease";
    ::kill(job, SIGKILL);
    ::waitpid(job, nullptr, 0);
    // The keeper lets the lease go when the job is gone.
    int status = 2;
    for (int tries = 0; tries < 50 && status != 0; ++tries) {
        ::usleep(100 * 1000);
        status = box.gpu_mig({"apply"}, &output);
    }
    EXPECT_EQ(status, 0) << output;
}

TEST(MigApplyRoot, AModeChangeWaitsForAResetUnlessOneIsAllowed) {
    GPUINIT_REQUIRE_ROOT();
    ApplyBox box("gpu=0 mig=on gi=7g.80gb\n");
    std::string output;
    ASSERT_EQ(box.gpu_mig({"apply"}, &output), 2) << output;
    EXPECT_NE(output.find("changed in 1 steps; MIG mode changes at its next reset "
                          "(--reset-if-needed)"),
              std::string::npos)
        << output;
    ASSERT_EQ(box.gpu_mig({"apply"}, &output), 2) << output;
    EXPECT_NE(output.find("its MIG mode changes at its next reset"), std::string::npos) << output;
    ASSERT_EQ(box.gpu_mig({"apply", "--reset-if-needed"}, &output), 0) << output;
    // The mode was set by the first run: a reset, a GI and its CI.
    EXPECT_NE(output.find("GPU 0 (0000:17:00.0): changed in 3 steps"), std::string::npos) << output;
    EXPECT_EQ(box.gpu_mig({"apply", "--check"}, &output), 0) << output;
}

} // namespace gpuinit
