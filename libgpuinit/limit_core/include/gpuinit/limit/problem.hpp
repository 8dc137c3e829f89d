// The limit layer's error type. This layer is linked into libgpulimit.so,
// which loads into foreign processes: no heap, no exceptions, no libstdc++
// runtime (header-only parts of the standard library only), so the message
// lives in a fixed buffer instead of a Diagnostic.
#pragma once

#include <cstddef>

namespace gpuinit::limit {

struct Problem {
    int errnum = 0;      // errno of the failed call, 0 for a bad value
    char text[384] = {}; // one line, no newline: what failed, where, the fix

    bool set() const { return text[0] != '\0'; }
};

// printf-style, truncating; always returns false so that callers can write
// `return fail(problem, ...);`.
bool fail(Problem& problem, int errnum, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

} // namespace gpuinit::limit
