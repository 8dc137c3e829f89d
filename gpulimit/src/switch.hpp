// The master switch of libgpulimit.so: AMP_VGPU_ENABLE, exactly "1".
//
// Anything else (unset, empty, "0", "true", " 1") leaves the library inert:
// every hook, dlsym and cuGetProcAddress passes straight through to the real
// driver. Read once, on the first call, from the environment the process
// started with (a later setenv does not switch it); a relaxed atomic after
// that, so the check costs a load and a compare on every hooked call.
//
// In a secure-execution process (getauxval(AT_SECURE): set-user-ID or
// set-group-ID, file capabilities, an LSM transition) the switch is off
// before any variable is read: /etc/ld.so.preload puts the library into
// such programs too, and their environment is their caller's.
#pragma once

#include <atomic>

namespace gpulimit {
namespace detail {

enum : int { kSwitchUnread = 0, kSwitchOff = 1, kSwitchOn = 2 };
extern constinit std::atomic<int> g_switch;
int read_switch();

} // namespace detail

// Whether the process runs in secure-execution mode (AT_SECURE): then the
// library only passes calls through, reads no variable and runs no script.
bool secure_execution();

inline bool limiter_enabled() {
    int state = detail::g_switch.load(std::memory_order_relaxed);
    if (state == detail::kSwitchUnread) [[unlikely]] {
        state = detail::read_switch();
    }
    return state == detail::kSwitchOn;
}

inline constexpr const char* kSwitchVariable = "AMP_VGPU_ENABLE";

} // namespace gpulimit
