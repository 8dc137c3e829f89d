// gpu-modload --check: what the loaded driver uses for the nodes it
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
};

// Every setting that undoes or widens the policy, for the GPUs and for the
// control nodes, is an error in `diagnostics` with reason
// ModuleFailure::CheckDanger, saying the fix. Fails closed: anything it
// must judge and cannot read (params, /proc/devices, the GPUs, the policy,
// the accounts) is an error, never "safe".
Result<DriverCheck> check_driver(const Sysroot& root, Diagnostics& diagnostics);

} // namespace gpuinit
