// gpu-modload --check: what the loaded driver actually uses for the nodes it
// (through nvidia-modprobe) creates and repairs, against the access policy.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace gpuinit {

struct DriverCheck {
    bool driver_loaded = false;
    uint64_t uid = 0;
    uint64_t gid = 0;
    uint64_t mode = 0666;
    uint64_t modify_device_files = 1;
    std::vector<std::string> not_in_params; // counted with the driver's default
    std::string policy_source;
    // Each a full explanation with the fix; empty when the params are safe.
    std::vector<std::string> dangers;
};

// Fails only on a malformed params or policy file.
Result<DriverCheck> check_driver(const Sysroot& root);

} // namespace gpuinit
