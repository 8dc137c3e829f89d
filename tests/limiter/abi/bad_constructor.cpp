// Negative test of check-abi.sh: a global with a dynamic initializer runs at
// load time, in every process the library is preloaded into.
#include <cstdlib>

namespace {
const char* const g_home = std::getenv("HOME");
}

__attribute__((visibility("hidden"))) const char* gpulimit_abi_bad_home() {
    return g_home;
}
