// What an admin reads from gpu-mig sync and list on the 4xA100 box (21
// instances): sync speaks as gpu-mig in one summary line (every detail with
// -v), each warning once and short; list says when a lease's holder is not
// to be seen. sync makes cap nodes: root.
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace gpuinit {

using testing::run_process;
using testing::TempDir;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        lines.push_back(line);
    }
    return lines;
}

// gpuinit mig --root DIR ARGS with stdout and stderr apart, no NVML and no
// nvidia-smi (PATH leads nowhere, LD_LIBRARY_PATH is not set).
int gpu_mig(const std::string& root, const std::vector<std::string>& args, std::string* out,
            std::string* err) {
    TempDir files;
    std::string command = "exec /usr/bin/env -i PATH=/nonexistent '" + std::string(GPUINIT_BIN) +
                          "' mig --root '" + root + "'";
    for (const std::string& arg : args) {
        command += " '" + arg + "'";
    }
    command += " >'" + (files / "out") + "' 2>'" + (files / "err") + "'";
    int rc = run_process({"/bin/sh", "-c", command});
    out->clear();
    err->clear();
    run_process({"/bin/cat", files / "out"}, out);
    run_process({"/bin/cat", files / "err"}, err);
    return rc;
}

} // namespace

TEST(MigToolRoot, SyncSaysInOneLineAsGpuMigWhatItDid) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    // DeviceFileModify: 1, as the driver's default: sync (through the node
    // layer) would write 0 to 44 access files, which are no procfs here.
    ASSERT_TRUE(testing::write_fixture(testing::a100_mig_box(), dir.path()));
    std::string out;
    std::string err;
    ASSERT_EQ(gpu_mig(dir.path(), {"sync"}, &out, &err), 0) << out << err;
    EXPECT_EQ(lines_of(out).size(), 1u) << out;
    EXPECT_TRUE(out.starts_with("gpu-mig: sync: 21 MIG instances, 0 named; cap nodes: ")) << out;
    EXPECT_NE(out.find(" 21 created, 0 repaired, 0 removed, 0 kept"), std::string::npos) << out;
    std::vector<std::string> warnings = lines_of(err);
    EXPECT_EQ(warnings.size(), 2u) << err; // the access files, the names
    for (const std::string& line : warnings) {
        EXPECT_TRUE(line.starts_with("gpu-mig: warning: ")) << line;
        EXPECT_LE(line.size(), 260u) << line;
    }
    EXPECT_EQ((out + err).find("gpu-mknod"), std::string::npos) << out << err;
    EXPECT_NE(err.find("44 files like "), std::string::npos) << err;
    EXPECT_NE(err.find("21 MIG instances have no profile name or MIG UUID"), std::string::npos)
        << err;

    // -v: every node and lease, still as gpu-mig.
    ASSERT_EQ(gpu_mig(dir.path(), {"sync", "-v"}, &out, &err), 0) << out << err;
    EXPECT_GT(lines_of(out).size(), 21u) << out;
    EXPECT_EQ((out + err).find("gpu-mknod"), std::string::npos) << out << err;
    EXPECT_NE(out.find("gpu-mig: nothing to do: 4 GPU(s)"), std::string::npos) << out;
}

// A lease held by a process the caller cannot see (here: not in the copy's
// /proc) is "leased by ?", and a note says why, instead of a bare "leased".
TEST(MigToolRoot, ListSaysWhenALeasesHolderCannotBeSeen) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    testing::FakeMachine machine = testing::a100_mig_box();
    machine.cap_modify = false;
    ASSERT_TRUE(testing::write_fixture(machine, dir.path()));
    std::string out;
    std::string err;
    ASSERT_EQ(gpu_mig(dir.path(), {"sync"}, &out, &err), 0) << out << err;
    int gate[2];
    ASSERT_EQ(::pipe(gate), 0);
    pid_t holder = ::fork();
    ASSERT_GE(holder, 0);
    if (holder == 0) {
        ::close(gate[0]);
        ::dup2(gate[1], STDOUT_FILENO);
        ::execl(GPUINIT_BIN, GPUINIT_BIN, "mig", "pick", "--root", dir.path().c_str(), "--format",
                "key", "--hold", "--", "/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES; exec sleep 30",
                static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::close(gate[1]);
    char picked[64] = {};
    ssize_t got = ::read(gate[0], picked, sizeof picked - 1);
    ::close(gate[0]);
    ASSERT_GT(got, 0);
    EXPECT_EQ(std::string(picked), "gpu1/gi7/ci0\n");
    int rc = gpu_mig(dir.path(), {"list"}, &out, &err);
    ::kill(holder, SIGKILL);
    ::waitpid(holder, nullptr, 0);
    EXPECT_EQ(rc, 0) << out << err;
    auto lines = lines_of(out);
    ASSERT_GE(lines.size(), 2u) << out;
    EXPECT_TRUE(lines[1].ends_with(" leased by ?")) << out;
    EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                            [](const std::string& l) { return l.ends_with(" free"); }),
              20)
        << out;
    EXPECT_NE(err.find("gpu-mig: note: 1 leases (by ?) are held by processes this /proc does "
                       "not show"),
              std::string::npos)
        << err;
}

// gpuinit-make-fixture --mig: the 4xA100 box and its saved nvidia-smi
// output, tried as gpu-mig(8) says (TRYING IT WITHOUT A GPU): gpu-mknod
// makes the GPU nodes, sync names the 21 instances,
// list shows them, gres writes a gres.conf that gres --check then passes.
TEST(MigToolRoot, TheMigSampleMachineRunsWhatTheManPageSays) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    std::string root = dir / "mig";
    std::string log;
    ASSERT_EQ(run_process({GPUINIT_MAKE_FIXTURE_BIN, "--mig", root}, &log), 0) << log;
    // The GPU nodes are gpu-mknod's, the cap nodes sync's: gres --check
    // looks for both.
    ASSERT_EQ(run_process({GPUINIT_BIN, "mknod", "--root", root}, &log), 0) << log;
    std::string saved = root + "/nvidia-smi-output";
    std::string out;
    std::string err;
    ASSERT_EQ(gpu_mig(root, {"sync", "--nvidia-smi-output", saved}, &out, &err), 0) << out << err;
    EXPECT_NE(out.find("21 MIG instances, 21 named from nvidia-smi output"), std::string::npos)
        << out;
    ASSERT_EQ(gpu_mig(root, {"list"}, &out, &err), 0) << out << err;
    auto lines = lines_of(out);
    ASSERT_EQ(lines.size(), 22u) << out;
    EXPECT_NE(lines[1].find(" 1g.10gb "), std::string::npos) << out;
    EXPECT_NE(lines[1].find(" MIG-"), std::string::npos) << out;
    ASSERT_EQ(gpu_mig(root, {"gres"}, &out, &err), 0) << out << err;
    // Two comments, GPU 0, the 21 instances, the slurm.conf fragment.
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 25) << out;
    std::string conf = dir / "gres.conf";
    std::ofstream(conf) << out;
    EXPECT_EQ(gpu_mig(root, {"gres", "--check", conf}, &out, &err), 0) << out << err;
    EXPECT_NE(out.find("matches the machine"), std::string::npos) << out;
    EXPECT_EQ(gpu_mig(root, {"pick", "--format", "key", "--hold", "--", "/bin/true"}, &out, &err),
              0)
        << out << err;
}

} // namespace gpuinit
