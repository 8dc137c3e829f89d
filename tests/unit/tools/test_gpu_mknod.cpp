// gpu-mknod as a process on fixture roots: exit codes, --policy and
// --explain. Dry runs only, so any user can run these.
#include "json_check.hpp"
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>

namespace gpuinit {

using testing::FakeMachine;
using testing::run_process;
using testing::TempDir;
using testing::workstation;
using testing::write_fixture;

namespace {

size_t count_of(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
        ++n;
    }
    return n;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// The report line of one node ("<root>/dev/nvidia0  root:nvidia0 0660 ...").
std::string line_of(const std::string& output, const std::string& path) {
    size_t at = output.find(path + " ");
    if (at == std::string::npos) {
        return {};
    }
    return output.substr(at, output.find('\n', at) - at);
}

} // namespace

// --device for a GPU that is not there was "error: no NVIDIA GPU 9", then
// "nothing to do", and exit 2: now the error alone, and exit 3.
TEST(GpuMknodTool, AnUnknownDeviceIsOneErrorAndExitThree) {
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(2), dir.path()));
    std::string output;
    EXPECT_EQ(
        run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--device", "9", "--dry-run"}, &output),
        3)
        << output;
    EXPECT_EQ(count_of(output, "no NVIDIA GPU 9"), 1u) << output;
    EXPECT_EQ(count_of(output, "error"), 1u) << output;
    EXPECT_EQ(output.find("nothing to do"), std::string::npos) << output;
    // A GPU that is there still works.
    output.clear();
    EXPECT_EQ(
        run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--device", "1", "--dry-run"}, &output),
        0)
        << output;
}

TEST(GpuMknodTool, HelpListsTheExitCodesOfTheTable) {
    std::string output;
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--help"}, &output), 0);
    std::string last = output.substr(output.rfind('\n', output.size() - 2) + 1);
    EXPECT_EQ(last, "Exit status: 0 ok, 1 usage, 2 partial, 3 nothing could be done, 4 --check "
                    "found differences, 5 not permitted, 6 busy (gpuinit(8)).\n");
}

// A candidate policy is checked against this machine, its errors name the
// file as given with the line, and the root's own policy is not read.
TEST(GpuMknodTool, PolicyChecksACandidateFile) {
    TempDir dir;
    TempDir elsewhere;
    FakeMachine machine = workstation(2);
    machine.policy = "gpu=0 group=nvidia0 mode=0888\n"; // the live one is broken
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    std::string live = read_text(dir / "etc/gpu-restriction.conf");
    std::string candidate = elsewhere / "candidate.conf";

    std::ofstream(candidate) << "gpu=0 group=nvidia0\n\ngpu=1 group=nvidia1 mode=0999\n";
    std::string output;
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--policy", candidate, "--check"},
                          &output),
              3)
        << output;
    EXPECT_NE(output.find(candidate + ":3: mode=0999 is not an octal mode"), std::string::npos)
        << output;
    EXPECT_EQ(output.find("0888"), std::string::npos) << output;

    // A good candidate naming a group that does not exist: a difference.
    std::ofstream(candidate) << "gpu=* group=ml{minor} mode=0660\n";
    output.clear();
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--policy", candidate, "--check"},
                          &output),
              4)
        << output;
    EXPECT_NE(output.find("group ml0 does not exist"), std::string::npos) << output;
    EXPECT_NE(output.find("rule from " + candidate + ":1"), std::string::npos) << output;
    output.clear();
    EXPECT_EQ(
        run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--policy", candidate, "--dry-run", "-q"},
                    &output),
        2)
        << output;

    // Applying a candidate is what installing it is for.
    output.clear();
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--policy", candidate}, &output), 1)
        << output;
    EXPECT_NE(output.find("add --check or --dry-run"), std::string::npos) << output;
    output.clear();
    EXPECT_EQ(run_process(
                  {GPU_MKNOD_BIN, "--root", dir.path(), "--policy", elsewhere / "none", "--check"},
                  &output),
              3)
        << output;
    EXPECT_NE(output.find("cannot open the policy " + (elsewhere / "none")), std::string::npos)
        << output;
    EXPECT_EQ(read_text(dir / "etc/gpu-restriction.conf"), live);
    EXPECT_FALSE(std::filesystem::exists(dir / "dev/nvidia0"));
}

TEST(GpuMknodTool, ExplainSaysWhoCanOpenEachNodeAndWhichLineDecides) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.groups.push_back("ml");
    machine.policy = "# lab\ngpu=1 group=ml mode=0640\ncontrol=nvidia-uvm group=4242 mode=0660\n";
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    std::string conf = dir / "etc/gpu-restriction.conf";
    std::string output;
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--explain"}, &output), 0)
        << output;
    EXPECT_NE(line_of(output, dir / "dev/nvidia1")
                  .find("root:ml 0640  owner rw, group r, others -  (" + conf + ":2)"),
              std::string::npos)
        << output;
    EXPECT_NE(line_of(output, dir / "dev/nvidia0")
                  .find("root:nvidia0 0660  owner rw, group rw, others -  (default)"),
              std::string::npos)
        << output;
    EXPECT_NE(line_of(output, dir / "dev/nvidiactl").find("root:root 0666"), std::string::npos)
        << output;
    // A gid the files do not hold (a directory service's group) is taken as is.
    EXPECT_NE(line_of(output, dir / "dev/nvidia-uvm").find("root:4242 0660"), std::string::npos)
        << output;
    // Nothing exists yet in the fixture's /dev: each node says so.
    EXPECT_NE(output.find("now: would create"), std::string::npos) << output;
    EXPECT_FALSE(std::filesystem::exists(dir / "dev/nvidia0"));

    // One GPU: its node and the control nodes it needs, not the other GPU's.
    output.clear();
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--explain", "1"}, &output), 0)
        << output;
    EXPECT_FALSE(line_of(output, dir / "dev/nvidia1").empty()) << output;
    EXPECT_FALSE(line_of(output, dir / "dev/nvidiactl").empty()) << output;
    EXPECT_TRUE(line_of(output, dir / "dev/nvidia0").empty()) << output;

    output.clear();
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--explain", "7"}, &output), 3)
        << output;
    EXPECT_NE(output.find("no NVIDIA GPU 7"), std::string::npos) << output;
    EXPECT_EQ(output.find("/dev/nvidiactl"), std::string::npos) << output;

    output.clear();
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--explain", "--json"}, &output),
              0);
    std::string why;
    EXPECT_TRUE(testing::valid_json(output, &why)) << why << "\n" << output;
    EXPECT_NE(output.find("\"decided_by\":\"" + conf + ":2\""), std::string::npos) << output;
    EXPECT_NE(output.find("\"group_access\":\"r\""), std::string::npos) << output;
}

// --explain with a candidate: what the nodes would be under it.
TEST(GpuMknodTool, ExplainTakesACandidatePolicy) {
    TempDir dir;
    TempDir elsewhere;
    FakeMachine machine = workstation(1);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    std::string candidate = elsewhere / "slurm.conf";
    std::ofstream(candidate) << "gpu=* group=root mode=0666\n";
    std::string output;
    EXPECT_EQ(
        run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--policy", candidate, "--explain", "0"},
                    &output),
        0)
        << output;
    EXPECT_NE(line_of(output, dir / "dev/nvidia0")
                  .find("root:root 0666  owner rw, group rw, others rw  (" + candidate + ":1)"),
              std::string::npos)
        << output;
}

// A MIG rule for a GPU without MIG instances: one warning line, exit 0.
TEST(GpuMknodTool, AMigRuleForAGpuWithoutMigWarns) {
    TempDir dir;
    FakeMachine machine = testing::a100_mig_box(); // GPU 0 has no instances
    machine.groups.push_back("vision");
    machine.policy = "gpu=0 gi=7 group=vision\ngpu=1 gi=7 group=vision\n";
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    std::string output;
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--dry-run", "-q"}, &output), 0)
        << output;
    output.clear();
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--dry-run"}, &output), 0)
        << output;
    EXPECT_EQ(count_of(output, "MIG rule: no MIG instance on GPU 0"), 1u) << output;
    EXPECT_EQ(count_of(output, "warning"), 1u) << output;
    EXPECT_NE(output.find("gpu-restriction.conf:1: MIG rule"), std::string::npos) << output;
}

} // namespace gpuinit
