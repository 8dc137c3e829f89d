// gpu-mig's gres and env commands through the multi-call binary, on the
// 4xA100 fixture with nvidia-smi's saved output: what an admin and a Slurm
// TaskProlog run. (sync needs root for the cap nodes: tests/root.)
#include "gpuinit/base/text.hpp"
#include "machine_fixture.hpp"
#include "nvidia_smi_text.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

namespace gpuinit {

using testing::fake_mig_uuid;
using testing::fake_uuid;
using testing::oracle_ci_minor;
using testing::oracle_gi_minor;
using testing::run_process;
using testing::TempDir;

namespace {

constexpr const char* kMigType = "nvidia_a100_80gb_pcie_1g.10gb";

struct Box {
    TempDir root;
    TempDir smi;
};

void load(Box& box) {
    ASSERT_TRUE(testing::write_fixture(testing::a100_mig_box(), box.root.path()));
    auto gpus = testing::smi_a100_box([](unsigned minor) { return fake_uuid(minor); });
    std::ofstream(box.smi / "L.txt") << testing::smi_list(gpus);
    std::ofstream(box.smi / "q.xml") << testing::smi_query_xml(gpus);
    std::ofstream(box.smi / "mig-lgi.txt") << testing::smi_lgi(gpus);
    std::ofstream(box.smi / "mig-lci.txt") << testing::smi_lci(gpus);
}

// The multi-call binary's mig command, with the environment given and no
// nvidia-smi on PATH.
int gpu_mig(const Box& box, std::vector<std::string> args, std::string* output,
            std::vector<std::string> environment = {}) {
    std::vector<std::string> argv = {"/usr/bin/env", "-i", "PATH=/nonexistent"};
    argv.insert(argv.end(), environment.begin(), environment.end());
    argv.insert(argv.end(), {GPUINIT_BIN, "mig"});
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--root", box.root.path()});
    output->clear();
    return run_process(argv, output);
}

std::string mig_line(unsigned gpu, unsigned gi) {
    return format("Name=gpu Type=%s MultipleFiles=/dev/nvidia%u,/dev/nvidia-caps/nvidia-cap%u,"
                  "/dev/nvidia-caps/nvidia-cap%u  # MIG gpu%u/gi%u/ci0\n",
                  kMigType, gpu, oracle_gi_minor(gpu, gi), oracle_ci_minor(gpu, gi, 0), gpu, gi);
}

} // namespace

TEST(GpuMigTool, GresWritesEveryInstanceWithItsCapFiles) {
    Box box;
    load(box);
    std::string output;
    ASSERT_EQ(
        gpu_mig(box, {"gres", "--nvidia-smi-output", box.smi.path(), "--node", "gpu07"}, &output),
        0)
        << output;
    EXPECT_NE(output.find("NodeName=gpu07 Name=gpu Type=nvidia_a100_80gb_pcie File=/dev/nvidia0"
                          "  # GPU 0 (0000:17:00.0)\n"),
              std::string::npos)
        << output;
    EXPECT_NE(output.find("NodeName=gpu07 " + mig_line(1, 7)), std::string::npos) << output;
    EXPECT_NE(output.find("NodeName=gpu07 " + mig_line(3, 14)), std::string::npos) << output;
    EXPECT_EQ(output.find("gi12"), std::string::npos); // the gap
    EXPECT_NE(output.find("# slurm.conf: NodeName=gpu07 Gres=gpu:nvidia_a100_80gb_pcie:1,"
                          "gpu:nvidia_a100_80gb_pcie_1g.10gb:21\n"),
              std::string::npos)
        << output;
    // The fragment alone, for scripts.
    ASSERT_EQ(
        gpu_mig(box, {"gres", "--nvidia-smi-output", box.smi.path(), "--slurm-conf"}, &output), 0);
    EXPECT_EQ(output, "Gres=gpu:nvidia_a100_80gb_pcie:1,gpu:nvidia_a100_80gb_pcie_1g.10gb:21\n");
    // Short profile types, renamed by the site's map.
    std::ofstream(box.smi / "types") << "# ours\n1g.10gb a100-small\n";
    ASSERT_EQ(gpu_mig(box,
                      {"gres", "--nvidia-smi-output", box.smi.path(), "--type-style", "profile",
                       "--type-map", box.smi / "types", "--slurm-conf"},
                      &output),
              0);
    EXPECT_EQ(output, "Gres=gpu:a100-small:21,gpu:nvidia_a100_80gb_pcie:1\n");
}

TEST(GpuMigTool, GresWithoutProfilesSaysWhatToGive) {
    Box box;
    load(box);
    std::string output;
    EXPECT_EQ(gpu_mig(box, {"gres"}, &output), 3);
    EXPECT_NE(output.find("MIG gpu1/gi7/ci0 has no known profile"), std::string::npos) << output;
    EXPECT_NE(output.find("--nvidia-smi-output DIR"), std::string::npos) << output;
    EXPECT_EQ(output.find("Name=gpu"), std::string::npos) << output;
}

TEST(GpuMigTool, GresCheckPassesItsOwnOutputAndFindsAHandWrittenOne) {
    Box box;
    load(box);
    std::string conf;
    ASSERT_EQ(gpu_mig(box, {"gres", "--nvidia-smi-output", box.smi.path()}, &conf), 0);
    std::ofstream(box.smi / "gres.conf") << conf;
    // --check stats the files: the nodes gpu-mknod would make.
    std::filesystem::create_directories(box.root / "dev/nvidia-caps");
    for (size_t at = conf.find("/dev/"); at != std::string::npos; at = conf.find("/dev/", at)) {
        size_t end = conf.find_first_of(", \n", at);
        std::ofstream(box.root / conf.substr(at + 1, end - at - 1)) << "";
        at = end;
    }
    std::string output;
    EXPECT_EQ(
        gpu_mig(box,
                {"gres", "--nvidia-smi-output", box.smi.path(), "--check", box.smi / "gres.conf"},
                &output),
        0)
        << output;
    EXPECT_NE(output.find("matches the machine"), std::string::npos) << output;
    // By hand: nvidia-smi's index for GPU 1 (index 1, written as 2) and no
    // cap files for GPU 3.
    std::ofstream(box.smi / "hand.conf")
        << "Name=gpu Type=" << kMigType << " File=/dev/nvidia2\nName=gpu Type=" << kMigType
        << " File=/dev/nvidia3\n";
    EXPECT_EQ(gpu_mig(box,
                      {"gres", "--nvidia-smi-output", box.smi.path(), "--check",
                       box.smi / "hand.conf", "--json"},
                      &output),
              4)
        << output;
    EXPECT_NE(output.find("\"kind\":\"no-cap-files\""), std::string::npos) << output;
    EXPECT_NE(output.find("\"kind\":\"count-change\""), std::string::npos) << output;
    EXPECT_NE(output.find("\"kind\":\"not-listed\""), std::string::npos) << output;
    // -q, as gpu-mig.service runs it: one line for the journal.
    EXPECT_EQ(gpu_mig(box,
                      {"gres", "--nvidia-smi-output", box.smi.path(), "--check",
                       box.smi / "hand.conf", "-q"},
                      &output),
              4)
        << output;
    EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
    EXPECT_NE(
        output.find("gpu-mig: error: " + (box.smi / "hand.conf") + " differs from the machine in "),
        std::string::npos)
        << output;
}

TEST(GpuMigTool, EnvGivesTheJobItsInstancesUuids) {
    Box box;
    load(box);
    std::string conf;
    ASSERT_EQ(gpu_mig(box, {"gres", "--nvidia-smi-output", box.smi.path()}, &conf), 0);
    std::filesystem::create_directories(box.root / "etc/slurm");
    std::ofstream(box.root / "etc/slurm/gres.conf") << conf;
    std::string output;
    // Device 0 is GPU 0 (no MIG), 1 is gpu1/gi7, 8 is gpu2/gi7.
    ASSERT_EQ(gpu_mig(box, {"env", "--nvidia-smi-output", box.smi.path()}, &output,
                      {"SLURM_STEP_GPUS=8,1,0", "SLURM_JOB_GPUS=5"}),
              0)
        << output;
    EXPECT_EQ(output, "export CUDA_VISIBLE_DEVICES=" + fake_mig_uuid(2, 7, 0) + "," +
                          fake_mig_uuid(1, 7, 0) + "," + fake_uuid(0) + "\n");
    // The batch step has only the job's.
    ASSERT_EQ(
        gpu_mig(box, {"env", "--nvidia-smi-output", box.smi.path()}, &output, {"SLURM_JOB_GPUS=2"}),
        0);
    EXPECT_EQ(output, "export CUDA_VISIBLE_DEVICES=" + fake_mig_uuid(1, 8, 0) + "\n");
    // gres.conf beside $SLURM_CONF wins over /etc/slurm.
    std::filesystem::create_directories(box.root / "opt/slurm/etc");
    std::ofstream(box.root / "opt/slurm/etc/gres.conf") << "Name=gpu File=/dev/nvidia0\n";
    ASSERT_EQ(gpu_mig(box, {"env"}, &output,
                      {"SLURM_STEP_GPUS=0", "SLURM_CONF=/opt/slurm/etc/slurm.conf"}),
              0)
        << output;
    EXPECT_EQ(output, "export CUDA_VISIBLE_DEVICES=" + fake_uuid(0) + "\n");
    // No GPUs: nothing printed, nothing changed.
    ASSERT_EQ(gpu_mig(box, {"env"}, &output), 0);
    EXPECT_EQ(output, "");
    // A device gres.conf does not have: nothing on stdout but the error.
    EXPECT_EQ(gpu_mig(box, {"env", "--nvidia-smi-output", box.smi.path()}, &output,
                      {"SLURM_STEP_GPUS=22"}),
              3);
    EXPECT_EQ(output.find("export"), std::string::npos);
    EXPECT_NE(output.find("print gpu-mig env: SLURM_STEP_GPUS names device 22, but"),
              std::string::npos)
        << output;
    // Without names the UUIDs are unknown: an error, never a made-up id.
    EXPECT_EQ(gpu_mig(box, {"env"}, &output, {"SLURM_STEP_GPUS=1"}), 3);
    EXPECT_NE(output.find("MIG gpu1/gi7/ci0 has no known MIG UUID"), std::string::npos) << output;
}

TEST(GpuMigTool, OptionsGoWithTheirCommand) {
    Box box;
    load(box);
    std::string output;
    EXPECT_EQ(gpu_mig(box, {"env", "--node", "x"}, &output), 1);
    EXPECT_EQ(gpu_mig(box, {"gres", "--gres-conf", "x"}, &output), 1);
    EXPECT_EQ(gpu_mig(box, {"list", "--check", "x"}, &output), 1);
    EXPECT_EQ(gpu_mig(box, {"gres", "--type-style", "short"}, &output), 1);
    EXPECT_EQ(gpu_mig(box, {"gres", "--slurm-conf", "--json"}, &output), 1);
    EXPECT_EQ(gpu_mig(box, {"gres", "--node", "a b"}, &output), 1);
}

TEST(GpuMigTool, ApplysOptionsGoWithApplyAndCheckTakesNoFile) {
    Box box;
    load(box);
    std::string output;
    EXPECT_EQ(gpu_mig(box, {"apply", "--check", "x"}, &output), 1) << output;
    EXPECT_NE(output.find("apply --check takes no FILE"), std::string::npos) << output;
    EXPECT_EQ(gpu_mig(box, {"apply", "--check", "--dry-run"}, &output), 1) << output;
    EXPECT_EQ(gpu_mig(box, {"sync", "--force"}, &output), 1) << output;
    EXPECT_EQ(gpu_mig(box, {"gres", "--reset-if-needed"}, &output), 1) << output;
    EXPECT_EQ(gpu_mig(box, {"gres", "--if-exists"}, &output), 1) << output;
    EXPECT_EQ(gpu_mig(box, {"gres", "--check"}, &output), 1) << output;
    EXPECT_EQ(gpu_mig(box, {"apply", "--if-exists"}, &output), 1) << output;
}

TEST(GpuMigTool, ApplyWithoutALayoutChangesNothing) {
    Box box;
    load(box);
    std::string output;
    // No nvidia-smi and no NVML here: without a layout neither is needed.
    EXPECT_EQ(gpu_mig(box, {"apply"}, &output), 0) << output;
    EXPECT_NE(output.find("gpu-mig-layout.conf: no MIG layout declared; nothing changed"),
              std::string::npos)
        << output;
    EXPECT_EQ(gpu_mig(box, {"apply", "--check", "--json"}, &output), 0) << output;
    EXPECT_NE(output.find("\"declared\":false"), std::string::npos) << output;
}

TEST(GpuMigTool, ApplyWithABadLayoutNamesItsLine) {
    Box box;
    load(box);
    std::filesystem::create_directories(box.root / "etc");
    std::ofstream(box.root / "etc/gpu-mig-layout.conf") << "gpu=* mig=on gi=1g.10gb\ngpu=1 mig\n";
    std::string output;
    EXPECT_EQ(gpu_mig(box, {"apply", "--dry-run"}, &output), 3) << output;
    EXPECT_NE(output.find("etc/gpu-mig-layout.conf:2"), std::string::npos) << output;
}

TEST(GpuMigTool, ApplyWithNoWayToReadTheGpusSaysSo) {
    Box box;
    load(box);
    std::filesystem::create_directories(box.root / "etc");
    std::ofstream(box.root / "etc/gpu-mig-layout.conf") << "gpu=* mig=on gi=1g.10gb\n";
    std::string output;
    EXPECT_EQ(gpu_mig(box, {"apply", "--check"}, &output), 3) << output;
    EXPECT_NE(output.find("nvidia-smi"), std::string::npos) << output;
}

TEST(GpuMigTool, GresCheckIfExistsPassesAMissingFile) {
    Box box;
    load(box);
    std::string output;
    EXPECT_EQ(gpu_mig(box,
                      {"gres", "--check", box.smi / "absent.conf", "--if-exists",
                       "--nvidia-smi-output", box.smi.path()},
                      &output),
              0)
        << output;
    EXPECT_NE(output.find("absent.conf is not there; nothing to check"), std::string::npos)
        << output;
    EXPECT_EQ(gpu_mig(box, {"gres", "--check", "", "--if-exists"}, &output), 0) << output;
    EXPECT_EQ(
        gpu_mig(box,
                {"gres", "--check", box.smi / "absent.conf", "--nvidia-smi-output", box.smi.path()},
                &output),
        3)
        << output;
}

} // namespace gpuinit
