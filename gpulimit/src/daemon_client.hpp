// The library side of `gpu-limit daemon`'s registration (AMP_USE_HOST_DAEMON=1):
// one datagram on the daemon's socket tells it which slot of which group this
// process owns; the daemon learns the host pid from SO_PEERCRED and checks the
// slot's lock (libgpuinit/limit_core/include/gpuinit/limit/daemon_protocol.hpp).
#pragma once

#include <cstddef>

namespace gpulimit {

// How long a registration may take in all: the daemon answers at once; a
// stopped or wedged one must not hold the application's cuInit.
inline constexpr int kRegisterTimeoutMs = 500;

// Where the daemon listens: GPU_LIMIT_DAEMON_SOCKET when it is set and not
// empty (an absolute path; anything else is refused when registering, with
// the reason), else limit::kDaemonSocketPath.
inline constexpr const char* kDaemonSocketVariable = "GPU_LIMIT_DAEMON_SOCKET";
const char* daemon_socket_path(const char* variable_value);

// Registers with the daemon at daemon_socket_path(getenv(...)). True on "OK";
// false when there is no daemon, it refused (the reason is in `reason` when
// given, NUL-terminated, for the one line the caller prints), or it did not
// answer in time. `slot_fd` is the descriptor whose open description holds
// the slot's lock (GroupState::lock_fd()): it goes to the daemon beside the
// request (SCM_RIGHTS). No heap, no exceptions; safe to call from any thread.
bool register_with_daemon(const char* group, int slot, int slot_fd);
bool register_with_daemon_at(const char* socket_path, const char* group, int slot, int slot_fd,
                             char* reason, size_t reason_size);

} // namespace gpulimit
