// Running another program and waiting for it, without a shell in between.
#pragma once

#include "gpuinit/base/result.hpp"

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace gpuinit {

struct SpawnRequest {
    std::vector<std::string> argv;      // argv[0] is a path; no PATH search
    std::vector<std::string> extra_env; // "NAME=value", added to this process's environment
                                        // (replacing an inherited NAME)
    std::string* output = nullptr;      // when set, receives stdout and stderr
    // Bounds, both off by default. With either set, the program runs in a
    // process group of its own, and the whole group is killed (SIGKILL) and
    // the program reaped when a bound is hit.
    size_t output_limit = 0;              // captured bytes allowed; 0: no limit (EFBIG past it)
    std::chrono::milliseconds timeout{0}; // from the start to the exit; 0: none (ETIMEDOUT)
};

// The program's exit status; a program killed by signal N gives 128 + N.
// Fails when it cannot be started or waited for, when its output would pass
// output_limit (EFBIG; what fits is kept in *output) and when it has not
// finished, its output included, within timeout (ETIMEDOUT).
Result<int> run_program(const SpawnRequest& request);

// Replaces this process with argv[0] (searched in PATH, as a shell would),
// after flushing stdio so nothing buffered is lost. Returns only when it
// cannot: the error names the command, with errno ENOENT when it was not
// found.
Diagnostic exec_command(char* const argv[]);

} // namespace gpuinit
