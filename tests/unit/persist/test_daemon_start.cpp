// gpu-persist at start and as `status` sees it: what counts as
// nvidia-persistenced (F5), and the exit status of `gpu-persist status`
// while a GPU it should hold is not held.
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/persist/client.hpp"
#include "gpuinit/persist/control.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace gpuinit {

namespace {

using std::chrono::milliseconds;

class Started {
  public:
    explicit Started(const std::string& root) : root_(root) {
        pid_ = ::fork();
        if (pid_ == 0) {
            int null = ::open("/dev/null", O_WRONLY);
            ::dup2(null, 1);
            ::dup2(null, 2);
            ::execl(GPU_PERSIST_BIN, "gpu-persist", "--root", root.c_str(), "--no-hotplug",
                    static_cast<char*>(nullptr));
            ::_exit(127);
        }
    }
    ~Started() {
        ::kill(pid_, SIGTERM);
        ::waitpid(pid_, nullptr, 0);
    }
    bool ready() const {
        for (int i = 0; i < 500; ++i) {
            if (::access((root_ + "/run/gpu-persist/status").c_str(), F_OK) == 0) {
                return true;
            }
            std::this_thread::sleep_for(milliseconds(10));
        }
        return false;
    }

  private:
    std::string root_;
    pid_t pid_ = -1;
};

// `gpu-persist ARGS... --root ROOT`'s exit status.
int client(const std::string& root, std::initializer_list<const char*> args) {
    pid_t pid = ::fork();
    if (pid == 0) {
        int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 1);
        ::dup2(null, 2);
        std::vector<const char*> argv{"gpu-persist", "--root", root.c_str()};
        argv.insert(argv.end(), args);
        argv.push_back(nullptr);
        ::execv(GPU_PERSIST_BIN, const_cast<char* const*>(argv.data()));
        ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A listener on <root>/run/nvidia-persistenced/socket: "something answers".
int listen_on_compat(const testing::TempDir& dir) {
    ::mkdir((dir / "run").c_str(), 0755);
    ::mkdir((dir / "run/nvidia-persistenced").c_str(), 0755);
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::string path = dir / "run/nvidia-persistenced/socket";
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    ::unlink(path.c_str());
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::listen(fd, 4), 0);
    return fd;
}

// A process 4242 named nvidia-persistenced, of `uid`, running `exe`.
void fake_process(const testing::TempDir& dir, unsigned uid, const std::string& exe) {
    ASSERT_EQ(::mkdir((dir / "proc/4242").c_str(), 0755), 0);
    { std::ofstream(dir / "proc/4242/comm") << "nvidia-persiste\n"; }
    {
        std::ofstream(dir / "proc/4242/status") << "Name:\tnvidia-persiste\nUid:\t" << uid << "\t"
                                                << uid << "\t" << uid << "\t" << uid << "\n";
    }
    ASSERT_EQ(::symlink(exe.c_str(), (dir / "proc/4242/exe").c_str()), 0);
}

std::string compat_state(const std::string& root) {
    auto sysroot = Sysroot::open(root);
    if (!sysroot) {
        return "no root";
    }
    auto reply = persist_request(*sysroot, ControlRequest{}, 5000);
    return reply ? reply->reply.daemon.compat : reply.error().message;
}

} // namespace

// F5: a user names a process nvidia-persistenced (a link of that name to a
// root-owned program gives the name too) while something listens on the
// socket: root did not start it, so it does not count.
TEST(PersistDaemonStart, AUsersProcessNamedNvidiaPersistencedDoesNotCount) {
    testing::TempDir dir;
    ASSERT_TRUE(testing::write_fixture(testing::workstation(2), dir.path()));
    fake_process(dir, 1000, "/bin/sh");
    int listener = listen_on_compat(dir);
    {
        Started daemon(dir.path());
        ASSERT_TRUE(daemon.ready());
        EXPECT_EQ(compat_state(dir.path()), "on");
    }
    ::close(listener);
}

// F5: root's process whose program is not a root-owned file (a copy in a
// user's directory) does not count either.
TEST(PersistDaemonStart, AProgramSomeoneElseOwnsDoesNotCount) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root to give the program to another user";
    }
    testing::TempDir dir;
    ASSERT_TRUE(testing::write_fixture(testing::workstation(2), dir.path()));
    std::string program = dir / "nvidia-persistenced";
    { std::ofstream(program) << "#!/bin/sh\n"; }
    ASSERT_EQ(::chown(program.c_str(), 1000, 1000), 0);
    fake_process(dir, 0, program);
    int listener = listen_on_compat(dir);
    {
        Started daemon(dir.path());
        ASSERT_TRUE(daemon.ready());
        EXPECT_EQ(compat_state(dir.path()), "on");
    }
    ::close(listener);
}

// nvidia-persistenced --user drops root before it writes its pid file:
// the process is that user's, and so are the directory root made for it
// and the pid file there that names it. That counts.
TEST(PersistDaemonStart, NvidiaPersistencedUnderItsUserCounts) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root to give files to another user";
    }
    testing::TempDir dir;
    ASSERT_TRUE(testing::write_fixture(testing::workstation(2), dir.path()));
    fake_process(dir, 1000, "/bin/sh");
    int listener = listen_on_compat(dir);
    std::string pid_file = dir / "run/nvidia-persistenced/nvidia-persistenced.pid";
    { std::ofstream(pid_file) << "4242\n"; }
    ASSERT_EQ(::chown(pid_file.c_str(), 1000, 1000), 0);
    ASSERT_EQ(::chown((dir / "run/nvidia-persistenced").c_str(), 1000, 1000), 0);
    {
        Started daemon(dir.path());
        ASSERT_TRUE(daemon.ready());
        EXPECT_EQ(compat_state(dir.path()), "off (nvidia-persistenced runs as pid 4242)");
    }
    ::close(listener);
}

// `gpu-persist status` (and `service gpu-restriction status`, which
// trusts it) says when a GPU it should hold is not held: the fixture's
// GPUs have no node, so none is. Exit 2, as a --daemon start that could
// not hold every GPU.
TEST(PersistDaemonStart, StatusExitsTwoWhileAGpuIsNotHeld) {
    testing::TempDir dir;
    ASSERT_TRUE(testing::write_fixture(testing::workstation(2), dir.path()));
    Started daemon(dir.path());
    ASSERT_TRUE(daemon.ready());
    EXPECT_EQ(client(dir.path(), {"status"}), 2);
    EXPECT_EQ(client(dir.path(), {"status", "--json"}), 2);
    // Disabled by the admin: not wanted, so not missing.
    if (::geteuid() == 0) {
        EXPECT_EQ(client(dir.path(), {"disable", "all"}), 0);
        EXPECT_EQ(client(dir.path(), {"status"}), 0);
    }
}

} // namespace gpuinit
