// Who is on the other end of a unix socket: SO_PEERCRED (and
// SO_PEERGROUPS), the peer's pid and user namespaces, and from them the key
// that per-peer bounds count by.
#pragma once

#include <compare>
#include <cstdint>
#include <sys/types.h>
#include <vector>

namespace gpuinit {

// Who is asking, from SO_PEERCRED (and SO_PEERGROUPS where the kernel has it).
struct PeerCredentials {
    pid_t pid = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;
};

namespace service {

// What bounds count by. A uid other than 0 is one peer whatever namespaces
// it is in: any user makes as many user and pid namespaces as it likes,
// and SO_PEERCRED maps its uid back to the same one. uid 0 is the host's
// root or the root of a rootful container without a user namespace, which
// all connect as uid 0: those are told apart by pid namespace.
struct PeerKey {
    uid_t uid = 0;
    uint64_t pid_namespace = 0; // with uid 0 only; 0 when unknown
    // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy flags the defaulted operator's 0
    auto operator<=>(const PeerKey&) const = default;
};

struct Peer {
    PeerCredentials credentials;
    // The nsfs inodes. pid_namespace is the outermost one below the
    // daemon's (the container's), not one the peer nested inside it. A
    // daemon that dropped root may not read those of root's processes: then
    // user_namespace is 0, and pid_namespace says the daemon's own (1) or
    // stands for the peer's cgroup.
    uint64_t pid_namespace = 0;
    uint64_t user_namespace = 0;
    // In the daemon's own user and pid namespaces (the host's initial ones
    // when the daemon runs on the host). False when that cannot be told.
    bool host = false;
    // Root of the host: uid 0 in the host's namespaces. A container's root
    // (NVIDIA's toolkit mounts nvidia-persistenced's socket into containers)
    // is not.
    bool host_root() const { return host && credentials.uid == 0; }
    PeerKey key() const;
};

// The peer of a connected unix socket. `proc_fd`: a directory fd on the
// kernel's /proc (the real one: peers are processes whatever --root says);
// -1 leaves the namespaces unknown. Where the namespaces' links cannot be
// followed (ptrace access), the host is told from /proc/PID/status's NSpid
// (one pid: the pid namespace of this /proc) and /proc/PID/uid_map (the
// daemon's own map), which every user may read. The peer's pid is read through a pidfd
// (SO_PEERPIDFD, Linux 6.5; pidfd_open before) that is checked to be alive
// after /proc was read, so a pid reused since the connect is not read as
// the peer's.
Peer identify_peer(int socket_fd, int proc_fd);

} // namespace service
} // namespace gpuinit
