#include "gpuinit/service/peer.hpp"

#include "gpuinit/base/unique_fd.hpp"

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <poll.h>
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
    // ns/pid is a magic link to the nsfs inode: followed on purpose.
    if (::fstatat(proc_fd, rel, &st, 0) != 0) {
        return 0;
    }
    return st.st_ino;
}

struct Namespaces {
    uint64_t pid = 0;
    uint64_t user = 0;
};

Namespaces namespaces_of(int proc_fd, const char* process) {
    char pid_rel[64];
    char user_rel[64];
    std::snprintf(pid_rel, sizeof pid_rel, "%s/ns/pid", process);
    std::snprintf(user_rel, sizeof user_rel, "%s/ns/user", process);
    return {namespace_inode(proc_fd, pid_rel), namespace_inode(proc_fd, user_rel)};
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
    char process[24];
    std::snprintf(process, sizeof process, "%d", static_cast<int>(credentials.pid));
    Namespaces theirs = namespaces_of(proc_fd, process);
    if (!still_running(pidfd.get())) {
        return peer; // gone: its pid may name another process by now
    }
    peer.pid_namespace = theirs.pid;
    peer.user_namespace = theirs.user;
    Namespaces ours = namespaces_of(proc_fd, "self");
    peer.host =
        theirs.pid != 0 && theirs.user != 0 && theirs.pid == ours.pid && theirs.user == ours.user;
    return peer;
}

} // namespace gpuinit::service
