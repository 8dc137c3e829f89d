#include "switch.hpp"

#include <cstdlib>
#include <cstring>
#include <sys/auxv.h>

namespace gpulimit::detail {

constinit std::atomic<int> g_switch{kSwitchUnread};

// Racing first callers read the same environment and store the same value.
// secure_getenv only walks environ: no lock, no allocation, fine before main.
// A secure-execution program (AT_SECURE) reads nothing and is not limited:
// /etc/ld.so.preload loads the library into it too, and its environment is
// its caller's, which must not choose the script it runs as another user
// (ALIYUN_COM_GPU_OOM_SCRIPT) or the files it writes. secure_getenv would
// answer nothing there as well; the check says so rather than leaning on it.
int read_switch() {
    if (secure_execution()) {
        g_switch.store(kSwitchOff, std::memory_order_relaxed);
        return kSwitchOff;
    }
    const char* value = secure_getenv(kSwitchVariable);
    const int state = value != nullptr && std::strcmp(value, "1") == 0 ? kSwitchOn : kSwitchOff;
    g_switch.store(state, std::memory_order_relaxed);
    return state;
}

} // namespace gpulimit::detail

namespace gpulimit {

bool secure_execution() {
    return getauxval(AT_SECURE) != 0;
}

} // namespace gpulimit
