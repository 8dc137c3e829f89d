// gpu-persist against local users and containers, as root runs it: root's
// control socket keeps its room while others fill the 0666 compatibility
// socket, that socket's connections are bounded per peer (each rootful
// container its own peer), every connection is dropped a fixed time after
// it connected, a container's root may not set the persistence mode, the
// pid file is refused when someone else's, and a --user shared with other
// processes is refused or warned about.
#include "gpuinit/persist/client.hpp"
#include "gpuinit/persist/control.hpp"
#include "gpuinit/persist/rpc.hpp"
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace gpuinit {

using testing::TempDir;

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// gpu-persist --root DIR --no-hotplug EXTRA..., stderr to DIR/stderr.log.
class Persist {
  public:
    Persist(const std::string& root, std::vector<std::string> extra = {}) : root_(root) {
        pid_ = ::fork();
        if (pid_ == 0) {
            int err = ::open((root + "/stderr.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            ::dup2(err, 2);
            int null = ::open("/dev/null", O_WRONLY);
            ::dup2(null, 1);
            std::vector<const char*> argv{"gpu-persist", "--root", root.c_str(), "--no-hotplug"};
            for (const std::string& arg : extra) {
                argv.push_back(arg.c_str());
            }
            argv.push_back(nullptr);
            ::execv(GPU_PERSIST_BIN, const_cast<char* const*>(argv.data()));
            ::_exit(127);
        }
    }
    ~Persist() { (void)stop(); }
    // Ready (its status file), or its exit status when it exited first.
    bool wait_ready() {
        for (int i = 0; i < 500; ++i) {
            if (::access((root_ + "/run/gpu-persist/status").c_str(), F_OK) == 0) {
                return true;
            }
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                pid_ = -1;
                return false;
            }
            std::this_thread::sleep_for(milliseconds(10));
        }
        return false;
    }
    int exit_status() const { return exit_; }
    std::string log() const { return read_text(root_ + "/stderr.log"); }
    int stop() {
        if (pid_ <= 0) {
            return exit_;
        }
        ::kill(pid_, SIGTERM);
        int status = 0;
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
        exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return exit_;
    }

  private:
    std::string root_;
    pid_t pid_ = -1;
    int exit_ = -1;
};

int connect_unix(const std::string& path) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// Whether the daemon closed `fd` within `wait`.
bool closed_within(int fd, milliseconds wait) {
    pollfd waiting{fd, POLLIN, 0};
    if (::poll(&waiting, 1, static_cast<int>(wait.count())) <= 0) {
        return false;
    }
    char byte = 0;
    return ::recv(fd, &byte, 1, MSG_DONTWAIT) <= 0;
}

// A process that connects `count` times to `path` as `uid`, in a pid
// namespace of its own when `own_namespace` (a rootful container without a
// user namespace: uid 0, another pid namespace), trickles one byte on each
// every 2 s, and reports how many connections the daemon kept open after
// `hold`. Ends when its report is read.
class Crowd {
  public:
    Crowd(const std::string& path, int count, uid_t uid, bool own_namespace, milliseconds hold) {
        int pipe[2];
        if (::pipe(pipe) != 0) {
            return;
        }
        pid_ = ::fork();
        if (pid_ == 0) {
            ::close(pipe[0]);
            if (own_namespace && ::unshare(CLONE_NEWPID) != 0) {
                ::_exit(2);
            }
            pid_t inner = ::fork();
            if (inner == 0) {
                if (uid != 0 && (::setgid(uid) != 0 || ::setuid(uid) != 0)) {
                    ::_exit(3);
                }
                std::vector<int> fds;
                for (int i = 0; i < count; ++i) {
                    fds.push_back(connect_unix(path));
                }
                auto start = Clock::now();
                auto next = start;
                while (Clock::now() - start < hold) {
                    if (Clock::now() >= next) {
                        for (int fd : fds) {
                            (void)::send(fd, "\x80", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                        }
                        next += std::chrono::seconds(2);
                    }
                    std::this_thread::sleep_for(milliseconds(20));
                }
                int open = 0;
                for (int fd : fds) {
                    open += fd >= 0 && !closed_within(fd, milliseconds(0)) ? 1 : 0;
                }
                (void)::write(pipe[1], &open, sizeof open);
                ::_exit(0);
            }
            int status = 0;
            ::waitpid(inner, &status, 0);
            ::_exit(0);
        }
        ::close(pipe[1]);
        report_ = pipe[0];
    }
    ~Crowd() { (void)kept(); }
    int kept() {
        if (report_ >= 0) {
            int open = -1;
            if (::read(report_, &open, sizeof open) == sizeof open) {
                kept_ = open;
            }
            ::close(report_);
            report_ = -1;
            ::waitpid(pid_, nullptr, 0);
        }
        return kept_;
    }

  private:
    pid_t pid_ = -1;
    int report_ = -1;
    int kept_ = -1;
};

// Users' clients reach the sockets by path: the root must be searchable.
std::string fixture(const TempDir& dir) {
    EXPECT_TRUE(testing::write_fixture(testing::workstation(2), dir.path()));
    EXPECT_EQ(::chmod(dir.path().c_str(), 0755), 0);
    return dir.path();
}

} // namespace

// F3: two rootful containers and a user fill the 0666 socket with
// connections that trickle a byte every 2 s: root's control requests still
// get in, at once, for as long as they last.
TEST(PersistHostile, RootsControlSocketKeepsItsRoom) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    std::string root = fixture(dir);
    Persist daemon(root);
    ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
    std::string compat = dir / "run/nvidia-persistenced/socket";
    Crowd first(compat, 64, 0, true, std::chrono::seconds(4));
    Crowd second(compat, 64, 0, true, std::chrono::seconds(4));
    Crowd user(compat, 64, 65534, false, std::chrono::seconds(4));
    std::this_thread::sleep_for(milliseconds(500));
    auto sysroot = Sysroot::open(root);
    ASSERT_TRUE(sysroot);
    for (int i = 0; i < 6; ++i) {
        auto reply = persist_request(*sysroot, ControlRequest{}, 2000);
        ASSERT_TRUE(reply) << "try " << i << ": " << reply.error().text();
        EXPECT_FALSE(reply->from_status_file);
        EXPECT_EQ(reply->reply.code, 0);
        std::this_thread::sleep_for(milliseconds(500));
    }
    // The crowd was there all along: each peer kept its bound of 4.
    EXPECT_EQ(first.kept(), 4);
    EXPECT_EQ(second.kept(), 4);
    EXPECT_EQ(user.kept(), 4);
}

// F3: each rootful container is its own peer on the compatibility socket,
// with its own bound; a user, whatever namespace it is in, is one.
TEST(PersistHostile, CompatConnectionsAreBoundedPerPeer) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    std::string root = fixture(dir);
    Persist daemon(root);
    ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
    std::string compat = dir / "run/nvidia-persistenced/socket";
    Crowd first(compat, 16, 0, true, milliseconds(1500));
    Crowd second(compat, 16, 0, true, milliseconds(1500));
    Crowd user_a(compat, 16, 65534, true, milliseconds(1500));
    Crowd user_b(compat, 16, 65534, true, milliseconds(1500));
    EXPECT_EQ(first.kept(), 4);
    EXPECT_EQ(second.kept(), 4);
    EXPECT_EQ(user_a.kept() + user_b.kept(), 4);
}

// F3: a connection's deadline counts from connect. A client that keeps
// calling (a get every second) is dropped 5 s after it connected, as one
// that idles is.
TEST(PersistHostile, ADeadlineCountsFromConnect) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    std::string root = fixture(dir);
    Persist daemon(root);
    ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
    int fd = connect_unix(dir / "run/nvidia-persistenced/socket");
    ASSERT_GE(fd, 0);
    auto device = parse_nv_pci_device("0000:17:00.0");
    ASSERT_TRUE(device);
    std::string call = frame_rpc_record(encode_get_mode_call(0x77, *device));
    auto start = Clock::now();
    bool closed = false;
    while (Clock::now() - start < std::chrono::seconds(9) && !closed) {
        if (::send(fd, call.data(), call.size(), MSG_NOSIGNAL) < 0) {
            closed = true;
            break;
        }
        auto until = Clock::now() + milliseconds(1000);
        while (Clock::now() < until) {
            pollfd waiting{fd, POLLIN, 0};
            if (::poll(&waiting, 1, 100) == 1) {
                char buffer[512];
                if (::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT) <= 0) {
                    closed = true;
                    break;
                }
            }
        }
    }
    auto took = Clock::now() - start;
    ::close(fd);
    EXPECT_TRUE(closed) << "a client calling every second was never dropped";
    EXPECT_LT(took, milliseconds(6500));
}

// F3: NVIDIA's toolkit mounts the persistenced socket into containers. A
// container's root is not the host's: its set is refused as a user's is.
TEST(PersistHostile, AContainersRootMayNotSet) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    std::string root = fixture(dir);
    Persist daemon(root);
    ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
    std::string compat = dir / "run/nvidia-persistenced/socket";
    int pipe[2];
    ASSERT_EQ(::pipe(pipe), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
        if (::unshare(CLONE_NEWPID) != 0) {
            ::_exit(2);
        }
        pid_t inner = ::fork();
        if (inner == 0) {
            auto device = parse_nv_pci_device("0000:17:00.0");
            int fd = connect_unix(compat);
            std::string call = frame_rpc_record(encode_set_mode_call(0x5e7, 1, *device, true));
            (void)::send(fd, call.data(), call.size(), MSG_NOSIGNAL);
            ::shutdown(fd, SHUT_WR);
            std::string reply;
            char buffer[512];
            ssize_t got = 0;
            while ((got = ::recv(fd, buffer, sizeof buffer, 0)) > 0) {
                reply.append(buffer, static_cast<size_t>(got));
            }
            RpcRecordReader reader;
            reader.feed(reply);
            int status = -1;
            if (reader.state() == RpcRecordReader::State::Record) {
                RpcReply decoded = decode_set_mode_reply(reader.take_record(), 0x5e7);
                status = static_cast<int>(decoded.status);
            }
            (void)::write(pipe[1], &status, sizeof status);
            ::_exit(0);
        }
        ::waitpid(inner, nullptr, 0);
        ::_exit(0);
    }
    ::close(pipe[1]);
    int status = -1;
    ASSERT_EQ(::read(pipe[0], &status, sizeof status), static_cast<ssize_t>(sizeof status));
    ::close(pipe[0]);
    ::waitpid(pid, nullptr, 0);
    EXPECT_EQ(status, static_cast<int>(NvPdStatus::Permissions))
        << nvpd_status_name(static_cast<NvPdStatus>(status));
}

// The pid file is opened by root in a directory --user may write: one
// made by another uid is refused, and left as it is.
TEST(PersistHostile, RefusesAPidFileSomeoneElseMade) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    std::string root = fixture(dir);
    ASSERT_EQ(::mkdir((dir / "run/gpu-persist").c_str(), 0755), 0);
    std::string pid_file = dir / "run/gpu-persist/gpu-persist.pid";
    { std::ofstream(pid_file) << "someone's\n"; }
    ASSERT_EQ(::chown(pid_file.c_str(), 4242, 4242), 0);
    Persist daemon(root);
    EXPECT_FALSE(daemon.wait_ready());
    EXPECT_EQ(daemon.exit_status(), 3) << daemon.log();
    EXPECT_NE(daemon.log().find("owned by uid 4242"), std::string::npos) << daemon.log();
    EXPECT_EQ(read_text(pid_file), "someone's\n");
}

// The account's processes can replace the sockets: a --user that runs other
// processes is said so at start, with who they are; nobody, which every
// unmapped uid of a user namespace shows as, is refused.
TEST(PersistHostile, SaysWhenItsUserRunsOtherProcesses) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    std::string root = fixture(dir);
    std::ofstream(dir / "etc/passwd", std::ios::app)
        << "gpupersist:x:990:990::/:/sbin/nologin\nnobody:x:65534:65534::/:/sbin/nologin\n";
    std::ofstream(dir / "etc/group", std::ios::app) << "gpupersist:x:990:\nnogroup:x:65534:\n";
    ASSERT_EQ(::mkdir((dir / "proc/4321").c_str(), 0755), 0);
    { std::ofstream(dir / "proc/4321/status") << "Name:\tcron\nUid:\t990\t990\t990\t990\n"; }
    { std::ofstream(dir / "proc/4321/comm") << "cron\n"; }
    {
        Persist shared(root, {"--user", "gpupersist", "--no-nvidia-smi-compat"});
        ASSERT_TRUE(shared.wait_ready()) << shared.log();
        EXPECT_EQ(shared.stop(), 0);
        std::string log = shared.log();
        EXPECT_NE(log.find("runs 1 other process(es) (4321 (cron))"), std::string::npos) << log;
    }
    Persist nobody(root, {"--user", "nobody", "--no-nvidia-smi-compat"});
    EXPECT_FALSE(nobody.wait_ready());
    EXPECT_EQ(nobody.exit_status(), 3) << nobody.log();
    EXPECT_NE(nobody.log().find("--user 'nobody'"), std::string::npos) << nobody.log();
}

} // namespace gpuinit
