// Not a parser: proves that leak detection works where the fuzz tests run.
// LeakSanitizer stops the world with ptrace; under a tracer (strace, gdb, a
// sandbox that traces its children) it cannot, and a fuzz run that leaks
// would not be caught. The fuzz.leak_canary test feeds this target an input
// it leaks on and passes only on LeakSanitizer's report.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

void* volatile sink = nullptr;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size >= 4 && std::memcmp(data, "LEAK", 4) == 0) {
        sink = std::malloc(64);
        sink = nullptr; // the only pointer to the block is gone
    }
    return 0;
}
