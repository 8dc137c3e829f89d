// /proc/<pid>/stat as the gpu-limit daemon reads it for a process's start
// time (field 22): the comm field is the process's own choice (any bytes
// but NUL, parentheses and spaces included, 15 at most in a real kernel,
// here any length). parse_start_time never crashes, and what it answers
// depends only on what follows the last ')'.
#include "fuzz_check.hpp"
#include "gpuinit/limit/daemon.hpp"

#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace gpuinit;
    const std::string_view text = fuzz::as_text(data, size);
    const auto start = limit::parse_start_time(text);
    const size_t close = text.rfind(')');
    if (close == std::string_view::npos) {
        FUZZ_CHECK(!start);
        return 0;
    }
    // Another pid and comm before the last ')': the same answer.
    const std::string other = "1 (x" + std::string(text.substr(close));
    FUZZ_CHECK(limit::parse_start_time(other) == start);
    return 0;
}
