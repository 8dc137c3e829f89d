// gpu-mig pick as processes, on a fixture root: many picks started at the
// same moment never share an instance, a killed holder frees its instance,
// and the keeper form holds a lease until the given process exits.
#include "gpuinit/mig/leases.hpp"
#include "gpuinit/mig/pick.hpp"
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <csignal>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <set>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace gpuinit {

using testing::a100_mig_box;
using testing::fake_uuid;
using testing::run_process;
using testing::TempDir;
using testing::write_fixture;

namespace {

struct Child {
    pid_t pid = -1;
    int out = -1; // stdout and stderr
};

// Forks `argv` with `env` added; it waits on `gate` (a pipe: read end,
// write end) until the parent closes the write end, so all start at once.
Child spawn(const std::vector<std::string>& argv, const int* gate,
            const std::vector<std::string>& env = {}) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
        return {};
    }
    pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(pipe_fds[1], 1);
        ::dup2(pipe_fds[1], 2);
        if (gate != nullptr) {
            ::close(gate[1]);
            char byte = 0;
            while (::read(gate[0], &byte, 1) > 0) {
            }
        }
        for (const std::string& entry : env) {
            ::putenv(const_cast<char*>(entry.c_str()));
        }
        std::vector<char*> args;
        args.reserve(argv.size() + 1);
        for (const std::string& arg : argv) {
            args.push_back(const_cast<char*>(arg.c_str()));
        }
        args.push_back(nullptr);
        ::execv(args[0], args.data());
        _exit(126);
    }
    ::close(pipe_fds[1]);
    return {pid, pipe_fds[0]};
}

// Reads everything, waits; the exit status, or 128+signal.
int finish(const Child& child, std::string& output) {
    char buffer[4096];
    ssize_t n = 0;
    while ((n = ::read(child.out, buffer, sizeof buffer)) > 0) {
        output.append(buffer, static_cast<size_t>(n));
    }
    ::close(child.out);
    int status = 0;
    ::waitpid(child.pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Reads one line from the child (the id it printed).
std::string read_line(const Child& child) {
    std::string line;
    char c = 0;
    while (::read(child.out, &c, 1) == 1 && c != '\n') {
        line += c;
    }
    return line;
}

struct ToolBox {
    TempDir dir;
    ToolBox() {
        EXPECT_TRUE(write_fixture(a100_mig_box(), dir.path()));
        // The leases as sync makes them; the tool's sync also makes the cap
        // nodes, which needs root (tests/root runs it).
        auto root = Sysroot::open(dir.path());
        Diagnostics diagnostics;
        auto machine = discover_machine(*root, diagnostics);
        auto topology = read_mig_topology(*root, diagnostics);
        EXPECT_TRUE(machine && topology);
        EXPECT_TRUE(sync_leases(*root, join_mig_instances(*machine, *topology, diagnostics), {},
                                true, diagnostics));
        EXPECT_TRUE(diagnostics.empty());
    }
    std::vector<std::string> pick(std::vector<std::string> tail) const {
        std::vector<std::string> argv = {GPUINIT_BIN, "mig",      "pick", "--root",
                                         dir.path(),  "--format", "key"};
        argv.insert(argv.end(), tail.begin(), tail.end());
        return argv;
    }
};

} // namespace

// 32 picks started together on 14 free instances (GPU 1's seven are leased
// by this test): 14 distinct successes, 18 clean "none free".
TEST(MigPickProcess, ThirtyTwoConcurrentPicksOnFourteenFreeInstances) {
    ToolBox box;
    auto root = Sysroot::open(box.dir.path());
    Diagnostics diagnostics;
    auto machine = discover_machine(*root, diagnostics);
    auto topology = read_mig_topology(*root, diagnostics);
    ASSERT_TRUE(machine && topology);
    std::vector<MigInstance> instances = join_mig_instances(*machine, *topology, diagnostics);
    PickRequest gpu1;
    gpu1.need_uuid = false;
    gpu1.count = 7;
    gpu1.cuda_visible_devices = fake_uuid(1);
    auto held = pick_instances(*root, *machine, instances, gpu1, diagnostics);
    ASSERT_TRUE(held) << held.error().text();

    int gate[2];
    ASSERT_EQ(::pipe2(gate, O_CLOEXEC), 0);
    std::vector<Child> children;
    for (int i = 0; i < 32; ++i) {
        children.push_back(spawn(box.pick({"--hold", "--", "/bin/sh", "-c",
                                           "echo \"picked $CUDA_VISIBLE_DEVICES\"; sleep 2"}),
                                 gate));
        ASSERT_GT(children.back().pid, 0);
    }
    ::close(gate[0]);
    ::close(gate[1]); // go
    std::set<std::string> picked;
    int successes = 0;
    int none_free = 0;
    std::string unexpected;
    for (const Child& child : children) {
        std::string output;
        int rc = finish(child, output);
        if (rc == 0 && output.starts_with("picked gpu")) {
            ++successes;
            picked.insert(output.substr(7, output.find('\n') - 7));
        } else if (rc == 6 && output.find("no 1 free MIG instance among the 21 visible to this "
                                          "job") != std::string::npos) {
            ++none_free;
        } else {
            unexpected += "exit " + std::to_string(rc) + ": " + output + "\n";
        }
    }
    EXPECT_EQ(successes, 14) << unexpected;
    EXPECT_EQ(none_free, 18) << unexpected;
    EXPECT_EQ(picked.size(), 14u); // all distinct
    for (const std::string& key : picked) {
        EXPECT_FALSE(key.starts_with("gpu1/")) << key;
    }
    std::printf("concurrency: %d successes (%zu distinct), %d none-free, %zu unexpected\n",
                successes, picked.size(), none_free, unexpected.size());
}

TEST(MigPickProcess, AHolderKilledWithSigkillFreesItsInstance) {
    ToolBox box;
    std::vector<std::string> only_gpu2 = {"CUDA_VISIBLE_DEVICES=" + fake_uuid(2)};
    Child holder = spawn(box.pick({"--count", "7", "--hold", "--", "/bin/sh", "-c",
                                   "echo \"$CUDA_VISIBLE_DEVICES\"; exec sleep 60"}),
                         nullptr, only_gpu2);
    std::string ids = read_line(holder);
    ASSERT_EQ(std::count(ids.begin(), ids.end(), ','), 6) << ids;
    std::string output;
    EXPECT_EQ(run_process({"/usr/bin/env", only_gpu2[0], GPUINIT_BIN, "mig", "pick", "--root",
                           box.dir.path(), "--format", "key", "--hold", "--", "/bin/true"},
                          &output),
              6)
        << output;
    ASSERT_EQ(::kill(holder.pid, SIGKILL), 0);
    std::string rest;
    EXPECT_EQ(finish(holder, rest), 128 + SIGKILL);
    output.clear();
    EXPECT_EQ(run_process({"/usr/bin/env", only_gpu2[0], GPUINIT_BIN, "mig", "pick", "--root",
                           box.dir.path(), "--format", "key", "--hold", "--", "/bin/sh", "-c",
                           "echo $CUDA_VISIBLE_DEVICES"},
                          &output),
              0)
        << output;
    EXPECT_EQ(output, "gpu2/gi7/ci0\n");
}

// Without --hold: a keeper holds the lease until --until's process exits,
// and the command substitution that reads the id does not wait for it.
TEST(MigPickProcess, TheKeeperHoldsTheLeaseUntilTheProcessExits) {
    ToolBox box;
    std::string script = "id=$(env CUDA_VISIBLE_DEVICES=" + fake_uuid(3) +
                         " '" GPUINIT_BIN "' mig pick --root '" + box.dir.path() +
                         "' --format key --until $$) || exit 9; echo \"$id\"; exec sleep 60";
    Child shell = spawn({"/bin/sh", "-c", script}, nullptr);
    std::string id = read_line(shell);
    EXPECT_EQ(id, "gpu3/gi7/ci0");
    std::string output;
    EXPECT_EQ(run_process({GPUINIT_BIN, "mig", "list", "--root", box.dir.path()}, &output), 0);
    EXPECT_NE(output.find("0000:47:00.0  7   0   unknown"), std::string::npos) << output;
    EXPECT_NE(output.find("leased"), std::string::npos) << output;
    // Still held: the next pick on GPU 3 gets gi8.
    output.clear();
    EXPECT_EQ(run_process({"/usr/bin/env", "CUDA_VISIBLE_DEVICES=" + fake_uuid(3), GPUINIT_BIN,
                           "mig", "pick", "--root", box.dir.path(), "--format", "key", "--hold",
                           "--", "/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES"},
                          &output),
              0);
    EXPECT_EQ(output, "gpu3/gi8/ci0\n");
    ASSERT_EQ(::kill(shell.pid, SIGKILL), 0);
    std::string rest;
    finish(shell, rest);
    // The keeper sees the shell go and lets go (asynchronously).
    auto root = Sysroot::open(box.dir.path());
    auto dir = LeaseDir::open(*root);
    ASSERT_TRUE(dir);
    MigInstance gpu3;
    gpu3.gpu_minor = 3;
    gpu3.gi = 7;
    bool released = false;
    for (int i = 0; i < 100 && !released; ++i) {
        released = !*dir->held(gpu3);
        if (!released) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
    EXPECT_TRUE(released);
}

TEST(MigPickProcess, UsageAndFormatErrors) {
    ToolBox box;
    std::string output;
    EXPECT_EQ(
        run_process({GPUINIT_BIN, "mig", "pick", "--root", box.dir.path(), "--hold"}, &output), 1);
    output.clear();
    // UUIDs are unknown without NVML or nvidia-smi output: the default
    // format cannot be given.
    EXPECT_EQ(run_process({GPUINIT_BIN, "mig", "pick", "--root", box.dir.path()}, &output), 3);
    EXPECT_NE(output.find("use --format key"), std::string::npos) << output;
    output.clear();
    EXPECT_EQ(run_process({GPUINIT_BIN, "mig", "pick", "--root", box.dir.path(), "--format", "key",
                           "--hold", "--", "/nonexistent/cmd"},
                          &output),
              127)
        << output;
    output.clear();
    EXPECT_EQ(
        run_process({GPUINIT_BIN, "mig", "list", "--root", box.dir.path(), "--json"}, &output), 0);
    EXPECT_NE(output.find("\"key\":\"gpu1/gi7/ci0\""), std::string::npos) << output;
    EXPECT_NE(output.find("\"state\":\"free\""), std::string::npos) << output;
}

} // namespace gpuinit
