// Shared by the fuzz targets: invariant checks that stop the run with a
// crash (libFuzzer then saves the input) and the checks every diagnostic
// must pass, whatever the input.
#pragma once

#include "gpuinit/base/diag.hpp"
#include "gpuinit/base/text.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

// On violation: say which invariant, then trap (a crash libFuzzer reports
// and saves the input of).
#define FUZZ_CHECK(condition)                                                                      \
    do {                                                                                           \
        if (!(condition)) {                                                                        \
            std::fprintf(stderr, "fuzz invariant violated: %s (%s:%d)\n", #condition, __FILE__,    \
                         __LINE__);                                                                \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

namespace gpuinit::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

// The input cut at every NUL byte: several texts from one input (passwd and
// group, option layers). Seeds join their parts with one NUL.
inline std::vector<std::string_view> split_at_nul(std::string_view text) {
    std::vector<std::string_view> parts;
    for (;;) {
        size_t nul = text.find('\0');
        parts.push_back(text.substr(0, nul));
        if (nul == std::string_view::npos) {
            return parts;
        }
        text.remove_prefix(nul + 1);
    }
}

// Safe for one line of a terminal or a log: no C0 control, DEL or C1
// control (U+0080..U+009F), and valid UTF-8.
inline bool one_safe_line(std::string_view text) {
    for (size_t i = 0; i < text.size(); ++i) {
        auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c == 0x7f) {
            return false;
        }
        if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
            return false;
        }
    }
    return valid_utf8(text) == text;
}

// Whatever the input, a diagnostic is one safe line with text to show, and
// one that names a file names a line in it (parsers report "file:line:").
inline void check_diagnostic(const Diagnostic& diagnostic, bool needs_line = true) {
    FUZZ_CHECK(!diagnostic.message.empty());
    FUZZ_CHECK(one_safe_line(diagnostic.message));
    FUZZ_CHECK(one_safe_line(diagnostic.text()));
    if (needs_line && !diagnostic.where.file.empty()) {
        FUZZ_CHECK(diagnostic.where.line >= 1);
    }
}

inline size_t line_count(std::string_view text) {
    return split_lines(text).size();
}

} // namespace gpuinit::fuzz
