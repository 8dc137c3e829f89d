#include "gpuinit/service/peer.hpp"

#include "gpuinit/base/unique_fd.hpp"

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <poll.h>
#include <string>
#include <string_view>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

// Linux 6.5 (include/uapi/asm-generic/socket.h); the libc headers may lack it.
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

namespace gpuinit::service {

namespace {

uint64_t namespace_inode(int proc_fd, const char* rel) {
    struct stat st {};
    // ns/pid is a magic link to the nsfs inode: followed on purpose. Only
    // a process that may ptrace the peer may follow it: a daemon that
    // dropped root cannot for root's processes (read_small below is open
    // to all).
    if (::fstatat(proc_fd, rel, &st, 0) != 0) {
        return 0;
    }
    return st.st_ino;
}

// A small /proc file that every user may read (status, uid_map, cgroup).
std::string read_small(int proc_fd, const std::string& rel) {
    UniqueFd fd(::openat(proc_fd, rel.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    std::string text;
    if (!fd.valid()) {
        return text;
    }
    char buffer[4096];
    ssize_t got = 0;
    while (text.size() < 65536 && (got = ::read(fd.get(), buffer, sizeof buffer)) > 0) {
        text.append(buffer, static_cast<size_t>(got));
    }
    return text;
}

// How many pid namespaces, from the one of this /proc down, the process is
// in: its NSpid line has one pid per namespace. 0 when unknown.
size_t pid_namespace_depth(int proc_fd, const std::string& process) {
    std::string status = read_small(proc_fd, process + "/status");
    size_t at = status.find("\nNSpid:");
    if (at == std::string::npos) {
        return 0;
    }
    size_t end = status.find('\n', at + 1);
    std::string line = status.substr(at + 7, end == std::string::npos ? end : end - at - 7);
    size_t count = 0;
    bool in_word = false;
    for (char c : line) {
        bool space = c == ' ' || c == '\t';
        count += !space && !in_word ? 1 : 0;
        in_word = !space;
    }
    return count;
}

// FNV-1a: a peer's cgroup as a number, where its namespace cannot be read.
uint64_t hash_text(std::string_view text) {
    uint64_t hash = 14695981039346656037ULL;
    for (char c : text) {
        hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    }
    return hash == 0 ? 1 : hash;
}

// A pidfd for the peer: the one the kernel took at connect (SO_PEERPIDFD),
// else one opened now by pid (which a reused pid could fool).
UniqueFd peer_pidfd(int socket_fd, pid_t pid) {
    int pidfd = -1;
    socklen_t size = sizeof pidfd;
    if (::getsockopt(socket_fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &size) == 0 && pidfd >= 0) {
        return UniqueFd(pidfd);
    }
    return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
}

bool still_running(int pidfd) {
    pollfd waiting{pidfd, POLLIN, 0};
    // POLLIN on a pidfd: the process has exited.
    return ::poll(&waiting, 1, 0) == 0;
}

// The pid namespace of `process` that is a child of the daemon's own
// (`own`): the container's, however deep below it the process made others.
// 0 when the walk fails. Any process may make pid namespaces of its own
// (in a user namespace of its own: a rootful container's root needs no
// capability for it), so the peer's own one would let one container be as
// many peers as it likes.
uint64_t outermost_pid_namespace(int proc_fd, const std::string& process, uint64_t own) {
    UniqueFd current(::openat(proc_fd, (process + "/ns/pid").c_str(), O_RDONLY | O_CLOEXEC));
    // Nesting is at most 32 deep (MAX_PID_NS_LEVEL, kernel/pid_namespace.c).
    for (int level = 0; current.valid() && level < 40; ++level) {
        struct stat st {};
        if (::fstat(current.get(), &st) != 0) {
            return 0;
        }
        UniqueFd parent(::ioctl(current.get(), NS_GET_PARENT));
        if (!parent.valid()) {
            return 0; // EPERM: above ours, so this was ours all along
        }
        struct stat up {};
        if (::fstat(parent.get(), &up) != 0) {
            return 0;
        }
        if (up.st_ino == own) {
            return st.st_ino;
        }
        current = std::move(parent);
    }
    return 0;
}

} // namespace

PeerKey Peer::key() const {
    PeerKey key;
    key.uid = credentials.uid;
    if (credentials.uid == 0) {
        key.pid_namespace = pid_namespace;
    }
    return key;
}

Peer identify_peer(int socket_fd, int proc_fd) {
    Peer peer;
    PeerCredentials& credentials = peer.credentials;
    ucred cred{};
    socklen_t size = sizeof cred;
    if (::getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) == 0) {
        credentials.pid = cred.pid;
        credentials.uid = cred.uid;
        credentials.gid = cred.gid;
    } else {
        credentials.uid = static_cast<uid_t>(-1); // unknown: treated as nobody
        credentials.gid = static_cast<gid_t>(-1);
    }
#ifdef SO_PEERGROUPS
    // ERANGE says how much room the peer's groups need: ask again with it.
    std::vector<gid_t> groups(64);
    for (int attempt = 0; attempt < 2; ++attempt) {
        auto length = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
        if (::getsockopt(socket_fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &length) == 0) {
            groups.resize(length / sizeof(gid_t));
            credentials.groups = std::move(groups);
            break;
        }
        if (errno != ERANGE || length <= groups.size() * sizeof(gid_t)) {
            break;
        }
        groups.resize(length / sizeof(gid_t));
    }
#endif
    // pid 0: the peer is in no pid namespace the daemon can see (an outer one).
    if (proc_fd < 0 || credentials.pid <= 0) {
        return peer;
    }
    UniqueFd pidfd = peer_pidfd(socket_fd, credentials.pid);
    if (!pidfd.valid()) {
        return peer;
    }
    const std::string process = std::to_string(credentials.pid);
    uint64_t pid_inode = namespace_inode(proc_fd, (process + "/ns/pid").c_str());
    uint64_t user_inode = namespace_inode(proc_fd, (process + "/ns/user").c_str());
    size_t depth = pid_namespace_depth(proc_fd, process);
    std::string uid_map = read_small(proc_fd, process + "/uid_map");
    std::string cgroup = read_small(proc_fd, process + "/cgroup");
    // Read before the liveness check, like the rest.
    uint64_t outer_inode = 0;
    if (uint64_t own = namespace_inode(proc_fd, "self/ns/pid"); own != 0 && pid_inode != own) {
        outer_inode = outermost_pid_namespace(proc_fd, process, own);
    }
    if (!still_running(pidfd.get())) {
        return peer; // gone: its pid may name another process by now
    }
    uint64_t own_pid_inode = namespace_inode(proc_fd, "self/ns/pid");
    uint64_t own_user_inode = namespace_inode(proc_fd, "self/ns/user");
    bool same_pid;
    bool same_user;
    if (pid_inode != 0 && user_inode != 0 && own_pid_inode != 0 && own_user_inode != 0) {
        same_pid = pid_inode == own_pid_inode;
        same_user = user_inode == own_user_inode;
        peer.pid_namespace = outer_inode != 0 ? outer_inode : pid_inode;
        peer.user_namespace = user_inode;
    } else {
        // Without the namespaces' inodes: one pid in NSpid is the pid
        // namespace of this /proc (the daemon's), and the uid map as this
        // process sees it is its own only for its own user namespace (or
        // one that maps every uid to itself, which only root can make).
        same_pid = depth == 1 && pid_namespace_depth(proc_fd, "self") == 1;
        std::string own_map = read_small(proc_fd, "self/uid_map");
        same_user = !uid_map.empty() && uid_map == own_map;
        peer.pid_namespace = same_pid ? 1 : hash_text(cgroup);
    }
    peer.host = same_pid && same_user;
    return peer;
}

} // namespace gpuinit::service
