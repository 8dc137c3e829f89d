// gpu-persist --daemon as an init script runs it: its stdout and stderr are
// a pipe the caller reads to EOF (`$(...)`, startpar). Once started, no
// process of the daemon, its privileged helper included, may hold it.
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <poll.h>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace gpuinit {

using testing::TempDir;
using testing::workstation;
using testing::write_fixture;

namespace {

// Reads `fd` until EOF; false when `limit` passes first.
bool read_to_eof(int fd, std::chrono::milliseconds limit, std::string& text) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        pollfd waiting{fd, POLLIN, 0};
        if (::poll(&waiting, 1, 100) <= 0) {
            continue;
        }
        char buffer[512];
        ssize_t got = ::read(fd, buffer, sizeof(buffer));
        if (got == 0) {
            return true;
        }
        if (got > 0) {
            text.append(buffer, static_cast<size_t>(got));
        } else if (errno != EINTR) {
            return true;
        }
    }
    return false;
}

} // namespace

TEST(PersistDaemonize, LetsGoOfTheCallersOutputOnceStarted) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(2), dir.path()));
    // The daemon reads the driver's view after it dropped to its user.
    ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
    std::ofstream(dir / "etc/passwd", std::ios::app) << "gpupersist:x:990:990::/:/sbin/nologin\n";
    std::ofstream(dir / "etc/group", std::ios::app) << "gpupersist:x:990:\n";
    int out[2];
    ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::dup2(out[1], 1);
        ::dup2(out[1], 2);
        ::execl(GPU_PERSIST_BIN, "gpu-persist", "--daemon", "--root", dir.path().c_str(), "--user",
                "gpupersist", "--no-hotplug", "--no-nvidia-smi-compat",
                static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::close(out[1]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    std::string text;
    bool eof = read_to_eof(out[0], std::chrono::seconds(5), text);
    ::close(out[0]);

    // Started (the fixture's GPUs have no nodes yet: they wait for them).
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << ": " << text;
    std::ifstream pidfile(dir / "run/gpu-persist/gpu-persist.pid");
    pid_t daemon = 0;
    ASSERT_TRUE(pidfile >> daemon) << "no pidfile; output: " << text;
    EXPECT_TRUE(eof) << "a process of the daemon still holds the caller's stdout or stderr";

    ASSERT_EQ(::kill(daemon, SIGTERM), 0);
    for (int i = 0; i < 500 && ::kill(daemon, 0) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_NE(::kill(daemon, 0), 0) << "the daemon did not stop on SIGTERM";
}

} // namespace gpuinit
