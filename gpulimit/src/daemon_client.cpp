// Registration with `gpu-limit daemon` (daemon_client.hpp). Freestanding, as
// the whole library: no heap, no exceptions, GLIBC_2.17 symbols only
// (socket, connect, sendmsg, recv and poll are all older than that).
#include "daemon_client.hpp"

#include "gpuinit/limit/daemon_protocol.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace gpulimit {

namespace limit = gpuinit::limit;

namespace {

void set_reason(char* reason, size_t size, const char* text, size_t length) {
    if (reason == nullptr || size == 0) {
        return;
    }
    size_t n = length < size - 1 ? length : size - 1;
    std::memcpy(reason, text, n);
    reason[n] = '\0';
}

void set_reason(char* reason, size_t size, const char* text) {
    set_reason(reason, size, text, std::strlen(text));
}

int64_t monotonic_ms() {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

// Waits for `events` on fd until the deadline; false on timeout or error.
bool wait_for(int fd, short events, int64_t deadline) {
    for (;;) {
        int64_t left = deadline - monotonic_ms();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return false;
        }
        pollfd entry{fd, events, 0};
        int ready = poll(&entry, 1, static_cast<int>(left));
        if (ready > 0) {
            return true;
        }
        if (ready < 0 && errno != EINTR) {
            return false;
        }
    }
}

class Socket {
  public:
    Socket() : fd_(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) {}
    ~Socket() {
        if (fd_ >= 0) {
            close(fd_);
        }
    }
    Socket(const Socket&) = delete;
    Socket& operator=(const Socket&) = delete;
    int fd() const { return fd_; }

  private:
    int fd_;
};

} // namespace

bool register_with_daemon_at(const char* socket_path, const char* group, int slot, int slot_fd,
                             char* reason, size_t reason_size) {
    set_reason(reason, reason_size, "");
    char request[limit::kDaemonMaxMessage];
    size_t length = limit::format_register_request(group, slot, request, sizeof request);
    if (length == 0 || slot_fd < 0) {
        set_reason(reason, reason_size, "invalid group or slot");
        return false;
    }
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    size_t path_length = socket_path == nullptr ? 0 : std::strlen(socket_path);
    if (path_length == 0 || path_length >= sizeof address.sun_path || socket_path[0] != '/') {
        set_reason(reason, reason_size, "invalid socket path");
        return false;
    }
    std::memcpy(address.sun_path, socket_path, path_length + 1);

    const int64_t deadline = monotonic_ms() + kRegisterTimeoutMs;
    Socket socket_fd;
    if (socket_fd.fd() < 0) {
        set_reason(reason, reason_size, std::strerror(errno));
        return false;
    }
    if (connect(socket_fd.fd(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
        // A non-blocking AF_UNIX connect completes at once or fails with
        // EAGAIN when the backlog is full: wait for room once.
        if (errno != EAGAIN && errno != EINPROGRESS) {
            set_reason(reason, reason_size, std::strerror(errno));
            return false;
        }
        if (!wait_for(socket_fd.fd(), POLLOUT, deadline) ||
            connect(socket_fd.fd(), reinterpret_cast<const sockaddr*>(&address), sizeof address) !=
                0) {
            set_reason(reason, reason_size, std::strerror(errno));
            return false;
        }
    }
    // The request and, beside it, the descriptor whose description holds
    // the slot's lock: the daemon checks that very lock (one fcntl) instead
    // of searching this process's fds.
    iovec vector{request, length};
    union {
        char bytes[CMSG_SPACE(sizeof(int))];
        cmsghdr align;
    } control{};
    msghdr message{};
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    message.msg_control = control.bytes;
    message.msg_controllen = sizeof control.bytes;
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &slot_fd, sizeof slot_fd);
    if (sendmsg(socket_fd.fd(), &message, MSG_NOSIGNAL) != static_cast<ssize_t>(length)) {
        set_reason(reason, reason_size, std::strerror(errno));
        return false;
    }
    char reply[256];
    ssize_t got = -1;
    for (;;) {
        got = recv(socket_fd.fd(), reply, sizeof reply - 1, 0);
        if (got >= 0 || (errno != EAGAIN && errno != EINTR)) {
            break;
        }
        if (!wait_for(socket_fd.fd(), POLLIN, deadline)) {
            set_reason(reason, reason_size, "no answer from the daemon in time");
            return false;
        }
    }
    if (got <= 0) {
        set_reason(reason, reason_size,
                   got == 0 ? "the daemon closed the connection" : std::strerror(errno));
        return false;
    }
    if (static_cast<size_t>(got) == std::strlen(limit::kReplyOk) &&
        std::memcmp(reply, limit::kReplyOk, static_cast<size_t>(got)) == 0) {
        return true;
    }
    // "ERR <reason>\n": keep the reason, printable bytes only.
    size_t start = got > 4 && std::memcmp(reply, "ERR ", 4) == 0 ? 4 : 0;
    size_t end = start;
    while (end < static_cast<size_t>(got) && reply[end] >= 0x20 && reply[end] < 0x7f) {
        ++end;
    }
    set_reason(reason, reason_size, reply + start, end - start);
    return false;
}

const char* daemon_socket_path(const char* variable_value) {
    return variable_value != nullptr && variable_value[0] != '\0' ? variable_value
                                                                  : limit::kDaemonSocketPath;
}

bool register_with_daemon(const char* group, int slot, int slot_fd) {
    return register_with_daemon_at(daemon_socket_path(secure_getenv(kDaemonSocketVariable)), group,
                                   slot, slot_fd, nullptr, 0);
}

} // namespace gpulimit
