// The registration protocol between libgpulimit.so and `gpu-limit daemon`:
// one datagram on an AF_UNIX SOCK_SEQPACKET socket,
//
//     GPULIMIT2 REGISTER <group> <slot>\n
//
// with exactly one file descriptor beside it (SCM_RIGHTS): the sender's open
// of the group's state file, the one whose description holds the slot's OFD
// lock. Answered with "OK\n" or "ERR <reason>\n". The daemon takes the
// sender's host pid from SO_PEERCRED, never from the message, and believes
// the slot only when the descriptor it was handed holds the slot's lock
// (daemon.hpp says how): one fcntl, whatever number of fds the sender has.
// Version 1 (no descriptor; the daemon read the sender's /proc fdinfo) is
// refused as "old-protocol".
//
// Freestanding (no heap, no exceptions): the library side formats, the
// daemon parses, with the same rules.
#pragma once

#include "gpuinit/limit/egpu.hpp"

#include <cstddef>

namespace gpuinit::limit {

// Where the daemon listens on the host, and where the container runtime
// integration mounts it in a container.
inline constexpr const char* kDaemonSocketPath = "/run/gpu-limit/daemon.sock";
inline constexpr const char* kDaemonStateDir = "/run/gpu-limit";
// Longer than any valid request ("GPULIMIT2 REGISTER " + 64 + " " + 4 + "\n"
// is 89 bytes): a datagram of this size or more is refused unread.
inline constexpr size_t kDaemonMaxMessage = 128;
inline constexpr const char* kReplyOk = "OK\n";
inline constexpr int kDaemonProtocolVersion = 2;
// Every refusal about a group, its slots or the descriptor is this one
// reason: a sender that cannot prove it owns the slot learns nothing about
// the group (whether it exists, which slots are live).
inline constexpr const char* kReplyRefused = "ERR refused\n";
// The daemon has no room for this sender now (its own share, or the whole
// table, is in use).
inline constexpr const char* kReplyBusy = "ERR busy\n";

struct RegisterRequest {
    char group[kGroupNameSize] = {};
    int slot = -1;
};

// [A-Za-z0-9._-]{1,64}, not "." or ".." (GroupState's rule for group names).
bool is_group_name(const char* name, size_t length);

// Parses exactly one request: the prefix, one space between fields, a group
// name, a decimal slot below kMaxSlots without leading zeros, and the final
// newline. Anything else is refused with `reason` (a static string without
// spaces' ambiguity: it goes into "ERR <reason>\n").
bool parse_register_request(const char* data, size_t size, RegisterRequest& request,
                            const char*& reason);

// Writes the request for (group, slot) into `buffer`; returns its length, 0
// when the group or slot is not valid or the buffer is too small.
size_t format_register_request(const char* group, int slot, char* buffer, size_t size);

} // namespace gpuinit::limit
