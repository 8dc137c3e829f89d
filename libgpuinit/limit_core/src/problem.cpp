#include "gpuinit/limit/problem.hpp"

#include <cstdarg>
#include <cstdio>

namespace gpuinit::limit {

bool fail(Problem& problem, int errnum, const char* format, ...) {
    problem.errnum = errnum;
    va_list arguments;
    va_start(arguments, format);
    std::vsnprintf(problem.text, sizeof problem.text, format, arguments);
    va_end(arguments);
    return false;
}

} // namespace gpuinit::limit
