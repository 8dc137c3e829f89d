// `gpu-limit daemon`'s registration socket (daemon.hpp). Tool side.
#include "gpuinit/limit/daemon.hpp"
#include "gpuinit/limit/daemon_protocol.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

namespace gpuinit::limit {

namespace {

// Descriptors that may wait to be closed at once. Past it, the daemon
// accepts and reads nothing more until the closing thread catches up: every
// message read may carry descriptors (up to SCM_MAX_FD), and one the daemon
// has no room for is closed by the kernel in recvmsg, on this thread.
constexpr size_t kMaxPendingCloses = 256;
// SCM_MAX_FD (include/net/scm.h): the most descriptors one message can
// carry. recvmsg's buffer holds them all, so the kernel never drops one
// (MSG_CTRUNC) and closes it in our recvmsg.
constexpr size_t kScmMaxFd = 253;

} // namespace

// The closing thread. A peer's descriptor can make its last close block for
// as long as the peer wants: a TCP socket with SO_LINGER and unsent data its
// receiver never reads, a file on a FUSE mount the peer serves (FLUSH waits
// for the server), a device whose release waits. So can the close of a
// connection with such descriptors still queued on it. Everything the
// server lets go of is closed here, never on the thread that runs the
// compute steps.
struct RegistrationServer::Closer {
    std::mutex mutex;
    std::condition_variable wake;
    std::vector<int> queue;
    std::atomic<size_t> pending{0};
    pthread_t thread{};
    bool started = false;

    static void* run(void* self) {
        auto* closer = static_cast<Closer*>(self);
        for (;;) {
            std::vector<int> batch;
            {
                std::unique_lock<std::mutex> lock(closer->mutex);
                closer->wake.wait(lock, [&] { return !closer->queue.empty(); });
                batch.swap(closer->queue);
            }
            for (int fd : batch) {
                // A socket's lingering close becomes an abort (RST): the
                // daemon owes its peers' peers no orderly shutdown.
                linger abort{1, 0};
                (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
                ::close(fd);
                closer->pending.fetch_sub(1, std::memory_order_relaxed);
            }
        }
        return nullptr;
    }
};

void RegistrationServer::CloserDeleter::operator()(Closer* closer) const {
    // The thread may be blocked in a close for good: it is left to the
    // process's exit, and so is what it owns.
    if (closer != nullptr && !closer->started) {
        delete closer;
    }
}

size_t RegistrationServer::closes_pending() const {
    return closer_ ? closer_->pending.load(std::memory_order_relaxed) : 0;
}

void RegistrationServer::close_later(UniqueFd fd) {
    if (!fd.valid()) {
        return;
    }
    if (!closer_) {
        closer_.reset(new Closer);
    }
    if (!closer_->started) {
        // Started at the first close, after any daemonizing fork.
        pthread_attr_t attributes;
        pthread_attr_init(&attributes);
        pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attributes, 64 << 10);
        closer_->started =
            ::pthread_create(&closer_->thread, &attributes, &Closer::run, closer_.get()) == 0;
        pthread_attr_destroy(&attributes);
        if (!closer_->started) {
            return; // no thread: closed here, as before (fd's destructor)
        }
    }
    closer_->pending.fetch_add(1, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lock(closer_->mutex);
        closer_->queue.push_back(fd.release());
    }
    closer_->wake.notify_one();
}

Result<RegistrationServer> RegistrationServer::listen(const std::string& path) {
    // Bound and made listening under a name of its own, then renamed into
    // place: a client that finds the path can connect at once (between
    // bind and listen it would be refused), and never finds it with the
    // mode bind gave it.
    const std::string fresh = path + ".new";
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.empty() || fresh.size() >= sizeof address.sun_path) {
        return error("socket path " + path + " is empty or too long for AF_UNIX (at most " +
                     std::to_string(sizeof address.sun_path - 1 - 4) + " bytes)");
    }
    std::memcpy(address.sun_path, fresh.c_str(), fresh.size() + 1);
    RegistrationServer server;
    server.path_ = path;
    server.listener_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!server.listener_.valid()) {
        return errno_error("socket(AF_UNIX, SOCK_SEQPACKET)");
    }
    // A socket left by a daemon that died: ours to replace (the caller holds
    // the pid lock). Anything else at either name is not ours to remove.
    for (const std::string& name : {path, fresh}) {
        struct stat status {};
        if (::lstat(name.c_str(), &status) == 0 && !S_ISSOCK(status.st_mode)) {
            return error(name + " exists and is not a socket: remove it or give another --socket");
        }
    }
    if (::unlink(fresh.c_str()) != 0 && errno != ENOENT) {
        return errno_error("unlink " + fresh);
    }
    if (::bind(server.listener_.get(), reinterpret_cast<const sockaddr*>(&address),
               sizeof address) != 0) {
        return errno_error("bind " + fresh);
    }
    // 0666: processes of any uid in any container connect; SO_PEERCRED and
    // the lock check say who they are. --socket may name a directory others
    // can write, where the name could be swapped for a link after bind():
    // the mode goes to the inode found at the name without following it,
    // and only if that is the socket just bound (ours, one link), through
    // /proc/self/fd (fchmod does not take an O_PATH fd).
    UniqueFd bound(::open(fresh.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    struct stat bound_status {};
    if (!bound.valid() || ::fstat(bound.get(), &bound_status) != 0 ||
        !S_ISSOCK(bound_status.st_mode) || bound_status.st_uid != ::geteuid() ||
        bound_status.st_nlink != 1) {
        return error(fresh + " is not the socket just bound there (replaced since): give a "
                             "--socket in a directory nobody else can write");
    }
    const std::string by_fd = "/proc/self/fd/" + std::to_string(bound.get());
    if (::chmod(by_fd.c_str(), 0666) != 0) {
        ::unlink(fresh.c_str());
        return errno_error("chmod 0666 " + fresh + " (through " + by_fd + ": is /proc mounted?)");
    }
    if (::listen(server.listener_.get(), 128) != 0) {
        ::unlink(fresh.c_str());
        return errno_error("listen " + fresh);
    }
    if (::rename(fresh.c_str(), path.c_str()) != 0) {
        ::unlink(fresh.c_str());
        return errno_error("rename " + fresh + " to " + path);
    }
    // The peers' namespaces are read at accept (service::identify_peer).
    server.proc_.reset(::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC));
    server.epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!server.epoll_.valid()) {
        return errno_error("epoll_create1");
    }
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = server.listener_.get();
    if (::epoll_ctl(server.epoll_.get(), EPOLL_CTL_ADD, server.listener_.get(), &event) != 0) {
        return errno_error("epoll_ctl");
    }
    return server;
}

RegistrationServer::~RegistrationServer() = default;

void RegistrationServer::unlink_socket() {
    if (!path_.empty() && listener_.valid()) {
        ::unlink(path_.c_str());
        path_.clear();
    }
}

void RegistrationServer::drop(int fd) {
    auto found = connections_.find(fd);
    if (found == connections_.end()) {
        return;
    }
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    auto count = open_by_peer_.find(found->second.peer);
    if (count != open_by_peer_.end() && --count->second == 0) {
        open_by_peer_.erase(count);
    }
    close_later(std::move(found->second.fd));
    connections_.erase(found);
}

bool RegistrationServer::take_request(const service::PeerKey& key, uint64_t now_ns) {
    auto found = buckets_.find(key);
    if (found == buckets_.end()) {
        if (buckets_.size() >= kMaxRememberedPeers) {
            // Forget the peer that waited longest: a full bucket then.
            auto oldest = std::min_element(buckets_.begin(), buckets_.end(),
                                           [](const auto& a, const auto& b) {
                                               return a.second.refilled_ns < b.second.refilled_ns;
                                           });
            buckets_.erase(oldest);
        }
        found = buckets_.emplace(key, Bucket{double(kRequestsPerSecond), now_ns}).first;
    }
    Bucket& bucket = found->second;
    if (now_ns > bucket.refilled_ns) {
        bucket.tokens = std::min<double>(
            kRequestsPerSecond, bucket.tokens + static_cast<double>(now_ns - bucket.refilled_ns) *
                                                    kRequestsPerSecond / 1e9);
        bucket.refilled_ns = now_ns;
    }
    if (bucket.tokens < 1) {
        return false;
    }
    bucket.tokens -= 1;
    return true;
}

void RegistrationServer::accept_some(uint64_t now_ns) {
    for (; accepts_left_ > 0 && closes_pending() < kMaxPendingCloses; --accepts_left_) {
        UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd.valid()) {
            return; // EAGAIN, or an error of that one connection (ECONNABORTED, EMFILE)
        }
        const service::Peer who = service::identify_peer(fd.get(), proc_.get());
        const service::PeerKey peer = who.key();
        const bool host_root = who.host_root();
        const size_t general = kMaxConnections - kRootReserve;
        auto count = open_by_peer_.find(peer);
        const size_t mine = count == open_by_peer_.end() ? 0 : count->second;
        const bool room = host_root ? connections_.size() < kMaxConnections
                                    : connections_.size() < general && mine < kPerPeer;
        // Root of the host is not rate-bounded: its requests are its own.
        if (!room || (!host_root && !take_request(peer, now_ns))) {
            // The client hears why at once instead of waiting.
            (void)::send(fd.get(), kReplyBusy, std::strlen(kReplyBusy),
                         MSG_NOSIGNAL | MSG_DONTWAIT);
            close_later(std::move(fd));
            continue;
        }
        epoll_event event{};
        event.events = EPOLLIN | EPOLLRDHUP;
        event.data.fd = fd.get();
        if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd.get(), &event) != 0) {
            close_later(std::move(fd));
            continue;
        }
        int key = fd.get();
        connections_[key] = Connection{std::move(fd), now_ns, peer, host_root,
                                       PeerCredentials{static_cast<int32_t>(who.credentials.pid),
                                                       static_cast<uint32_t>(who.credentials.uid),
                                                       static_cast<uint32_t>(who.credentials.gid)}};
        ++open_by_peer_[peer];
    }
}

void RegistrationServer::answer(int fd, uint64_t /*now_ns*/, Handler handler, void* context) {
    auto found = connections_.find(fd);
    if (found == connections_.end()) {
        return;
    }
    // One byte more than the largest message we take, and room for every
    // descriptor a message can carry: the first is the request's, the others
    // go to the closing thread.
    char buffer[kDaemonMaxMessage + 1];
    iovec vector{buffer, sizeof buffer};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kScmMaxFd)];
    msghdr message{};
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    ssize_t got = ::recvmsg(fd, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;
    }
    UniqueFd passed;
    if (got >= 0) {
        for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
             header = CMSG_NXTHDR(&message, header)) {
            if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) {
                continue;
            }
            size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < count; ++i) {
                int received = -1;
                std::memcpy(&received, CMSG_DATA(header) + i * sizeof(int), sizeof received);
                if (!passed.valid()) {
                    passed.reset(received);
                } else {
                    close_later(UniqueFd(received));
                }
            }
        }
    }
    if (got > 0) {
        std::string reply;
        if ((message.msg_flags & MSG_TRUNC) != 0 || static_cast<size_t>(got) >= kDaemonMaxMessage) {
            reply = "ERR request-too-long\n";
        } else {
            reply = handler(context, buffer, static_cast<size_t>(got), found->second.credentials,
                            passed.get());
        }
        (void)::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    close_later(std::move(passed));
    // One request per connection: answered, closed by the peer, or broken.
    drop(fd);
}

void RegistrationServer::service(uint64_t now_ns, Handler handler, void* context) {
    if (now_ns - window_start_ns_ >= kAcceptWindowNs) {
        window_start_ns_ = now_ns;
        accepts_left_ = kAcceptsPerWindow;
    }
    // The listener is polled only while this window has accepts left, and
    // the closing thread keeps up.
    const bool backed_up = closes_pending() >= kMaxPendingCloses;
    const bool listen = accepts_left_ > 0 && !backed_up;
    if (listen != listening_) {
        epoll_event event{};
        event.events = listen ? static_cast<uint32_t>(EPOLLIN) : 0U;
        event.data.fd = listener_.get();
        if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.get(), &event) == 0) {
            listening_ = listen;
        }
    }
    epoll_event events[64];
    int ready = ::epoll_wait(epoll_.get(), events, 64, 0);
    for (int i = 0; i < ready; ++i) {
        int fd = events[i].data.fd;
        if (fd == listener_.get()) {
            accept_some(now_ns);
            if (accepts_left_ == 0 && listening_) {
                epoll_event event{};
                event.data.fd = listener_.get();
                if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.get(), &event) == 0) {
                    listening_ = false;
                }
            }
        } else if (connections_.count(fd) != 0) {
            if (backed_up) {
                // Unread: what it carries is closed with it, on the
                // closing thread.
                drop(fd);
            } else {
                answer(fd, now_ns, handler, context);
            }
        }
    }
    // Connections that sent nothing within the timeout, counted from
    // connect.
    std::vector<int> late;
    for (const auto& [fd, connection] : connections_) {
        if (now_ns - connection.accepted_ns > kConnectionTimeoutNs) {
            late.push_back(fd);
        }
    }
    for (int fd : late) {
        drop(fd);
    }
}

} // namespace gpuinit::limit
