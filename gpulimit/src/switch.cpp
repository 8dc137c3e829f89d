#include "switch.hpp"

#include <cstdlib>
#include <cstring>

namespace gpulimit::detail {

constinit std::atomic<int> g_switch{kSwitchUnread};

// Racing first callers read the same environment and store the same value.
// getenv only walks environ: no lock, no allocation, fine before main.
int read_switch() {
    const char* value = std::getenv(kSwitchVariable);
    const int state = value != nullptr && std::strcmp(value, "1") == 0 ? kSwitchOn : kSwitchOff;
    g_switch.store(state, std::memory_order_relaxed);
    return state;
}

} // namespace gpulimit::detail
