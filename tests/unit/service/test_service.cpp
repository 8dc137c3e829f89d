// The service layer under both daemons: the pid lock's checks, a
// listener's budget and per-peer bound, peers told apart by namespace, and
// deadlines that input does not move.
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/service/event_loop.hpp"
#include "gpuinit/service/listener.hpp"
#include "gpuinit/service/peer.hpp"
#include "gpuinit/service/process.hpp"
#include "temp_dir.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <optional>
#include <poll.h>
#include <sched.h>
#include <sstream>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace gpuinit {

using testing::TempDir;

namespace {

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// A temporary root with its run/ directory.
struct Box {
    Box() {
        auto opened = Sysroot::open(dir.path());
        EXPECT_TRUE(opened);
        sysroot.emplace(std::move(opened.value()));
        auto made = SafeDir::open(*sysroot, "run", 0755);
        EXPECT_TRUE(made);
        run_dir.emplace(std::move(made.value()));
    }
    TempDir dir;
    std::optional<Sysroot> sysroot;
    std::optional<SafeDir> run_dir;
    const SafeDir& run() const { return *run_dir; }
};

// Whether the server closed `fd` (EOF within `wait`).
bool closed_by_server(int fd, std::chrono::milliseconds wait) {
    pollfd waiting{fd, POLLIN, 0};
    if (::poll(&waiting, 1, static_cast<int>(wait.count())) <= 0) {
        return false;
    }
    char byte = 0;
    return ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
}

UniqueFd proc_dir() {
    return UniqueFd(::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC));
}

} // namespace

TEST(PidLock, TakesAFreshFileAndWritesThePid) {
    Box box;
    auto lock = service::PidLock::acquire(box.run(), "d.pid", ::geteuid(), ::getegid());
    ASSERT_TRUE(lock) << lock.error().text();
    EXPECT_EQ(read_text(box.dir / "run/d.pid"), std::to_string(::getpid()) + "\n");
    auto second = service::PidLock::acquire(box.run(), "d.pid", ::geteuid(), ::getegid());
    ASSERT_FALSE(second);
    EXPECT_EQ(second.error().code, EWOULDBLOCK);
    EXPECT_NE(second.error().message.find(std::to_string(::getpid())), std::string::npos);
    lock->remove();
    EXPECT_NE(::access((box.dir / "run/d.pid").c_str(), F_OK), 0);
}

// Whoever may write the directory could link another file there: it is
// refused, and neither truncated nor chowned.
TEST(PidLock, RefusesAFileWithASecondLink) {
    Box box;
    std::string other = box.dir / "precious";
    { std::ofstream(other) << "keep me\n"; }
    ASSERT_EQ(::link(other.c_str(), (box.dir / "run/d.pid").c_str()), 0);
    auto lock = service::PidLock::acquire(box.run(), "d.pid", ::geteuid(), ::getegid());
    ASSERT_FALSE(lock);
    EXPECT_EQ(lock.error().code, EMLINK);
    EXPECT_NE(lock.error().message.find("2 links"), std::string::npos) << lock.error().message;
    EXPECT_EQ(read_text(other), "keep me\n");
}

TEST(PidLock, RefusesASymlinkAndAFifoWithoutBlocking) {
    Box box;
    std::string other = box.dir / "precious";
    { std::ofstream(other) << "keep me\n"; }
    ASSERT_EQ(::symlink(other.c_str(), (box.dir / "run/link.pid").c_str()), 0);
    EXPECT_FALSE(service::PidLock::acquire(box.run(), "link.pid", ::geteuid(), ::getegid()));
    EXPECT_EQ(read_text(other), "keep me\n");
    ASSERT_EQ(::mkfifo((box.dir / "run/fifo.pid").c_str(), 0644), 0);
    auto fifo = service::PidLock::acquire(box.run(), "fifo.pid", ::geteuid(), ::getegid());
    ASSERT_FALSE(fifo);
    EXPECT_NE(fifo.error().message.find("not a regular file"), std::string::npos);
}

TEST(PidLock, RefusesAFileSomeoneElseOwns) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root to give the file to another uid";
    }
    Box box;
    std::string path = box.dir / "run/d.pid";
    { std::ofstream(path) << "4242\n"; }
    ASSERT_EQ(::chown(path.c_str(), 4242, 4242), 0);
    // Neither root's nor the daemon's --user (1000): refused.
    auto lock = service::PidLock::acquire(box.run(), "d.pid", 1000, 1000);
    ASSERT_FALSE(lock);
    EXPECT_EQ(lock.error().code, EPERM);
    EXPECT_EQ(read_text(path), "4242\n");
    // Held by a daemon that runs as its --user: a second start, as root,
    // is told it runs, whoever owns the file.
    {
        UniqueFd held(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        ASSERT_EQ(::flock(held.get(), LOCK_EX), 0);
        auto running = service::PidLock::acquire(box.run(), "d.pid", 0, 0);
        ASSERT_FALSE(running);
        EXPECT_EQ(running.error().code, EWOULDBLOCK) << running.error().message;
    }
    // The daemon's own --user: taken, and kept that user's.
    auto owned = service::PidLock::acquire(box.run(), "d.pid", 4242, 4242);
    ASSERT_TRUE(owned) << owned.error().text();
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4242u);
}

TEST(Listener, BindsWithItsModeAndReplacesOnlyASocket) {
    Box box;
    service::ListenOptions options;
    options.mode = 0660;
    options.owner = ::geteuid();
    options.group = ::getegid();
    auto listener = service::Listener::bind_at(box.run(), "s", options);
    ASSERT_TRUE(listener) << listener.error().text();
    struct stat st {};
    ASSERT_EQ(::lstat((box.dir / "run/s").c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0660u);
    auto again = service::Listener::bind_at(box.run(), "s", options);
    EXPECT_TRUE(again) << again.error().text();
    { std::ofstream(box.dir / "run/plain") << "x"; }
    auto refused = service::Listener::bind_at(box.run(), "plain", options);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, EEXIST);
}

// A socket's budget is its own: past it, a connection is closed at once,
// and a released one makes room again.
TEST(Listener, KeepsToItsBudget) {
    Box box;
    service::ListenOptions options;
    options.owner = ::geteuid();
    options.group = ::getegid();
    options.budget = 2;
    auto listener = service::Listener::bind_at(box.run(), "s", options);
    ASSERT_TRUE(listener);
    UniqueFd proc = proc_dir();
    std::vector<UniqueFd> clients;
    for (int i = 0; i < 4; ++i) {
        auto client = service::connect_at(box.run(), "s", SOCK_STREAM, false);
        ASSERT_TRUE(client) << client.error().text();
        clients.push_back(std::move(*client));
    }
    std::vector<service::Admission> admitted;
    while (auto admission = listener->accept(proc.get())) {
        admitted.push_back(std::move(*admission));
    }
    EXPECT_EQ(admitted.size(), 2u);
    EXPECT_EQ(listener->refused(), 2u);
    EXPECT_FALSE(closed_by_server(clients[0].get(), std::chrono::milliseconds(50)));
    EXPECT_TRUE(closed_by_server(clients[2].get(), std::chrono::milliseconds(500)));
    EXPECT_TRUE(closed_by_server(clients[3].get(), std::chrono::milliseconds(500)));
    listener->release(admitted.back().peer);
    admitted.pop_back();
    auto client = service::connect_at(box.run(), "s", SOCK_STREAM, false);
    ASSERT_TRUE(client);
    EXPECT_TRUE(listener->accept(proc.get()));
}

TEST(Peer, TheHostsRootIsTheHostsRoot) {
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    UniqueFd a(pair[0]);
    UniqueFd b(pair[1]);
    UniqueFd proc = proc_dir();
    service::Peer peer = service::identify_peer(a.get(), proc.get());
    EXPECT_EQ(peer.credentials.pid, ::getpid());
    EXPECT_EQ(peer.credentials.uid, ::geteuid());
    EXPECT_TRUE(peer.host);
    EXPECT_NE(peer.pid_namespace, 0u);
    EXPECT_EQ(peer.host_root(), ::geteuid() == 0);
    // Without /proc nothing says where it is: not the host.
    EXPECT_FALSE(service::identify_peer(a.get(), -1).host);
}

// A daemon that dropped root may not follow root's ns links (ptrace
// access): it still knows the host's root, from what every user may read.
TEST(Peer, ADaemonThatDroppedRootStillKnowsTheHostsRoot) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root to drop to another user";
    }
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    UniqueFd a(pair[0]);
    UniqueFd b(pair[1]);
    int report[2];
    ASSERT_EQ(::pipe(report), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
        if (::setgid(65534) != 0 || ::setuid(65534) != 0) {
            ::_exit(2);
        }
        UniqueFd proc = proc_dir();
        service::Peer peer = service::identify_peer(a.get(), proc.get());
        char result = static_cast<char>((peer.host ? 1 : 0) | (peer.host_root() ? 2 : 0) |
                                        (peer.user_namespace == 0 ? 4 : 0));
        (void)::write(report[1], &result, 1);
        ::_exit(0);
    }
    ::close(report[1]);
    char result = 0;
    ASSERT_EQ(::read(report[0], &result, 1), 1);
    ::close(report[0]);
    ::waitpid(pid, nullptr, 0);
    EXPECT_EQ(result & 4, 4) << "the ns links were readable: this test checks nothing";
    EXPECT_EQ(result & 3, 3) << "the host's root not recognized by an unprivileged daemon";
}

namespace {

// A child in a pid namespace of its own (a rootful container without a
// user namespace connects as uid 0 from one) connects `count` times to
// `name` in `dir` and holds the connections until its pipe closes.
class ContainerRoot {
  public:
    // nested: that many pid namespaces the container makes inside its own,
    // each connecting `count` times (0: the container's own connects).
    ContainerRoot(const SafeDir& dir, const char* name, int count, uid_t uid = 0, int nested = 0) {
        int pipe[2];
        if (::pipe(pipe) != 0) {
            return;
        }
        pid_ = ::fork();
        if (pid_ == 0) {
            ::close(pipe[1]);
            if (::unshare(CLONE_NEWPID) != 0) {
                ::_exit(2);
            }
            pid_t inner = ::fork();
            if (inner == 0) {
                if (uid != 0 && ::setuid(uid) != 0) {
                    ::_exit(3);
                }
                std::vector<pid_t> inside;
                for (int i = 0; i < nested; ++i) {
                    pid_t maker = ::fork();
                    if (maker == 0) {
                        if (::unshare(CLONE_NEWPID) != 0) {
                            ::_exit(5);
                        }
                        pid_t deeper = ::fork();
                        if (deeper == 0) {
                            std::vector<UniqueFd> held;
                            for (int j = 0; j < count; ++j) {
                                if (auto fd = service::connect_at(dir, name, SOCK_STREAM, false)) {
                                    held.push_back(std::move(*fd));
                                }
                            }
                            char byte;
                            (void)::read(pipe[0], &byte, 1);
                            ::_exit(0);
                        }
                        ::waitpid(deeper, nullptr, 0);
                        ::_exit(0);
                    }
                    inside.push_back(maker);
                }
                if (nested != 0) {
                    for (pid_t maker : inside) {
                        ::waitpid(maker, nullptr, 0);
                    }
                    ::_exit(0);
                }
                std::vector<UniqueFd> held;
                for (int i = 0; i < count; ++i) {
                    auto fd = service::connect_at(dir, name, SOCK_STREAM, false);
                    if (fd) {
                        held.push_back(std::move(*fd));
                    }
                }
                char byte;
                (void)::read(pipe[0], &byte, 1);
                ::_exit(0);
            }
            int status = 0;
            ::waitpid(inner, &status, 0);
            ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 4);
        }
        ::close(pipe[0]);
        release_.reset(pipe[1]);
    }
    ~ContainerRoot() {
        release_.reset();
        if (pid_ > 0) {
            ::waitpid(pid_, nullptr, 0);
        }
    }

  private:
    pid_t pid_ = -1;
    UniqueFd release_;
};

std::vector<service::Admission> accept_for(service::Listener& listener, int proc_fd,
                                           size_t expected) {
    std::vector<service::Admission> admitted;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < until) {
        while (auto admission = listener.accept(proc_fd)) {
            admitted.push_back(std::move(*admission));
        }
        if (admitted.size() + listener.refused() >= expected) {
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return admitted;
}

} // namespace

// Two rootful containers both connect as uid 0: each is its own peer, so
// one using up its bound leaves the other its share, and the host's root
// has the room kept for it.
TEST(Listener, BoundsPerPeerNotPerUid) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root to make pid namespaces";
    }
    Box box;
    service::ListenOptions options;
    options.mode = 0666;
    options.budget = 16;
    options.per_peer = 3;
    options.reserved = 4;
    auto listener = service::Listener::bind_at(box.run(), "s", options);
    ASSERT_TRUE(listener);
    UniqueFd proc = proc_dir();
    ContainerRoot first(box.run(), "s", 8);
    auto from_first = accept_for(*listener, proc.get(), 8);
    ASSERT_EQ(from_first.size(), 3u);
    EXPECT_FALSE(from_first[0].peer.host);
    EXPECT_EQ(from_first[0].peer.credentials.uid, 0u);
    ContainerRoot second(box.run(), "s", 8);
    auto from_second = accept_for(*listener, proc.get(), 16);
    ASSERT_EQ(from_second.size(), 3u);
    EXPECT_NE(from_first[0].peer.key(), from_second[0].peer.key());
    // A user is one peer whatever namespace it is in.
    ContainerRoot user_a(box.run(), "s", 4, 65534);
    ContainerRoot user_b(box.run(), "s", 4, 65534);
    auto from_user = accept_for(*listener, proc.get(), 24);
    EXPECT_EQ(from_user.size(), 3u);
    EXPECT_EQ(listener->open_connections(), 9u);
    // 9 of the 12 others may have: the host's root still gets in past them.
    std::vector<UniqueFd> host;
    for (int i = 0; i < 6; ++i) {
        auto client = service::connect_at(box.run(), "s", SOCK_STREAM, false);
        ASSERT_TRUE(client);
        host.push_back(std::move(*client));
    }
    auto from_host = accept_for(*listener, proc.get(), 30);
    EXPECT_EQ(from_host.size(), 6u);
    for (const auto& admission : from_host) {
        EXPECT_TRUE(admission.peer.host_root());
    }
}

// A container's root may make pid namespaces inside its own (in a user
// namespace of its own it needs no capability for it): they are still the
// one container, bounded as one peer.
TEST(Listener, PidNamespacesMadeInsideAContainerAreThatContainer) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root to make pid namespaces";
    }
    Box box;
    service::ListenOptions options;
    options.mode = 0666;
    options.budget = 32;
    options.per_peer = 3;
    options.reserved = 4;
    auto listener = service::Listener::bind_at(box.run(), "s", options);
    ASSERT_TRUE(listener);
    UniqueFd proc = proc_dir();
    ContainerRoot nesting(box.run(), "s", 3, 0, 4);
    auto admitted = accept_for(*listener, proc.get(), 12);
    EXPECT_EQ(admitted.size(), 3u) << "one container held " << admitted.size()
                                   << " connections through pid namespaces of its own";
    EXPECT_EQ(listener->refused(), 9u);
}

// No daemon on this layer takes descriptors, and one a peer sends anyway
// would be closed in the daemon (its last close can block for as long as
// the peer likes): the kernel refuses the send.
TEST(Listener, RefusesDescriptors) {
    Box box;
    service::ListenOptions options;
    options.mode = 0666;
    auto listener = service::Listener::bind_at(box.run(), "s", options);
    ASSERT_TRUE(listener);
    auto client = service::connect_at(box.run(), "s", SOCK_STREAM, false);
    ASSERT_TRUE(client);
    int rights = 1;
    socklen_t size = sizeof rights;
    if (::getsockopt(client->get(), SOL_SOCKET, 83 /* SO_PASSRIGHTS */, &rights, &size) != 0) {
        GTEST_SKIP() << "this kernel has no SO_PASSRIGHTS (Linux 6.16)";
    }
    char byte = 'x';
    iovec vector{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr message{};
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    int sent = client->get();
    std::memcpy(CMSG_DATA(header), &sent, sizeof sent);
    errno = 0;
    EXPECT_EQ(::sendmsg(client->get(), &message, MSG_NOSIGNAL), -1);
    EXPECT_EQ(errno, EPERM);
    // Plain bytes still go.
    EXPECT_EQ(::send(client->get(), &byte, 1, MSG_NOSIGNAL), 1);
}

// A deadline set at connect is not moved by input: a client trickling a
// byte every 50 ms is dropped at its 300 ms.
TEST(EventLoop, ADeadlineSetAtConnectIsNotMovedByInput) {
    service::EventLoop loop;
    ASSERT_TRUE(loop.open({}, nullptr));
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair), 0);
    UniqueFd server(pair[0]);
    UniqueFd client(pair[1]);
    size_t received = 0;
    bool expired = false;
    auto start = service::Clock::now();
    ASSERT_TRUE(loop.watch(server.get(), EPOLLIN, [&](uint32_t) {
        char buffer[16];
        while (::recv(server.get(), buffer, sizeof buffer, 0) > 0) {
            ++received;
        }
    }));
    loop.set_deadline(7, start + std::chrono::milliseconds(300), [&] {
        expired = true;
        loop.forget(server.get());
    });
    auto stop = start + std::chrono::seconds(2);
    auto next_byte = start;
    while (!expired && service::Clock::now() < stop) {
        if (service::Clock::now() >= next_byte) {
            (void)::send(client.get(), "x", 1, MSG_NOSIGNAL);
            next_byte += std::chrono::milliseconds(50);
        }
        ASSERT_TRUE(loop.run_once(10));
    }
    auto took = service::Clock::now() - start;
    EXPECT_TRUE(expired);
    EXPECT_GE(received, 3u);
    EXPECT_GE(took, std::chrono::milliseconds(300));
    EXPECT_LT(took, std::chrono::milliseconds(600));
}

TEST(EventLoop, AClearedDeadlineDoesNotFireAndSignalsComeThroughTheLoop) {
    service::EventLoop loop;
    int signals = 0;
    ASSERT_TRUE(loop.open({SIGUSR1}, [&](const signalfd_siginfo& info) {
        signals += info.ssi_signo == SIGUSR1 ? 1 : 0;
    }));
    bool fired = false;
    loop.set_deadline(1, service::Clock::now() + std::chrono::milliseconds(20),
                      [&] { fired = true; });
    loop.clear_deadline(1);
    ::kill(::getpid(), SIGUSR1);
    auto stop = service::Clock::now() + std::chrono::milliseconds(200);
    while (service::Clock::now() < stop) {
        ASSERT_TRUE(loop.run_once(20));
    }
    EXPECT_FALSE(fired);
    EXPECT_EQ(signals, 1);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR1);
    ::sigprocmask(SIG_UNBLOCK, &mask, nullptr);
}

} // namespace gpuinit
