// `gpu-limit daemon`'s registration socket (daemon.hpp). Tool side.
#include "gpuinit/limit/daemon.hpp"
#include "gpuinit/limit/daemon_protocol.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace gpuinit::limit {

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
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    connections_.erase(fd); // closes it
}

void RegistrationServer::accept_some(uint64_t now_ns) {
    for (int i = 0; i < kAcceptsPerService; ++i) {
        UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd.valid()) {
            return; // EAGAIN, or an error of that one connection (ECONNABORTED, EMFILE)
        }
        if (connections_.size() >= kMaxConnections) {
            // Full: the client hears why at once instead of waiting.
            static constexpr char kBusy[] = "ERR busy\n";
            (void)::send(fd.get(), kBusy, sizeof kBusy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            continue;
        }
        epoll_event event{};
        event.events = EPOLLIN | EPOLLRDHUP;
        event.data.fd = fd.get();
        if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd.get(), &event) != 0) {
            continue;
        }
        int key = fd.get();
        connections_[key] = Connection{std::move(fd), now_ns};
    }
}

void RegistrationServer::answer(int fd, Handler handler, void* context) {
    // One byte more than the largest message we take, and no control
    // buffer: fds a client sends (SCM_RIGHTS) are discarded by the kernel,
    // never installed here.
    char buffer[kDaemonMaxMessage + 1];
    iovec vector{buffer, sizeof buffer};
    msghdr message{};
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    ssize_t got = ::recvmsg(fd, &message, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;
    }
    std::string reply;
    if (got > 0) {
        ucred credentials{};
        socklen_t length = sizeof credentials;
        if ((message.msg_flags & MSG_TRUNC) != 0 || static_cast<size_t>(got) >= kDaemonMaxMessage) {
            reply = "ERR request-too-long\n";
        } else if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
            reply = "ERR no-peer-credentials\n";
        } else {
            PeerCredentials peer{static_cast<int32_t>(credentials.pid), credentials.uid,
                                 credentials.gid};
            reply = handler(context, buffer, static_cast<size_t>(got), peer);
        }
        (void)::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    // One request per connection: answered, closed by the peer, or broken.
    drop(fd);
}

void RegistrationServer::service(uint64_t now_ns, Handler handler, void* context) {
    epoll_event events[64];
    int ready = ::epoll_wait(epoll_.get(), events, 64, 0);
    for (int i = 0; i < ready; ++i) {
        int fd = events[i].data.fd;
        if (fd == listener_.get()) {
            accept_some(now_ns);
        } else if (connections_.count(fd) != 0) {
            answer(fd, handler, context);
        }
    }
    // Connections that sent nothing within the timeout.
    for (auto it = connections_.begin(); it != connections_.end();) {
        if (now_ns - it->second.accepted_ns > kConnectionTimeoutNs) {
            ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->first, nullptr);
            it = connections_.erase(it);
        } else {
            ++it;
        }
    }
}

} // namespace gpuinit::limit
