// Running another program and waiting for it, without a shell in between.
#pragma once

#include "gpuinit/base/result.hpp"

#include <string>
#include <vector>

namespace gpuinit {

struct SpawnRequest {
    std::vector<std::string> argv;      // argv[0] is a path; no PATH search
    std::vector<std::string> extra_env; // "NAME=value", added to this process's environment
    std::string* output = nullptr;      // when set, receives stdout and stderr
};

// The program's exit status; a program killed by signal N gives 128 + N.
// Fails only when it cannot be started or waited for.
Result<int> run_program(const SpawnRequest& request);

} // namespace gpuinit
