// The MIG instances that exist, from the driver's capability files:
// /proc/driver/nvidia/capabilities/mig/{config,monitor} and, per GPU minor,
// gpu<N>/mig/gi<G>/access and gpu<N>/mig/gi<G>/ci<C>/access ("DeviceFileMinor:
// 337", "DeviceFileMode: 292" (decimal), "DeviceFileModify: 1"). The table
// /proc/driver/nvidia-caps/mig-minors lists every possible cap, existing or
// not: each access file's minor is checked against it, never computed.
// Profile names and MIG UUIDs are not in /proc.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

inline constexpr std::string_view kMigCapabilitiesPath = "proc/driver/nvidia/capabilities";
inline constexpr std::string_view kMigMinorsPath = "proc/driver/nvidia-caps/mig-minors";

struct MigCap {
    enum class Kind { Config, Monitor, GpuInstance, ComputeInstance };
    Kind kind = Kind::Config;
    unsigned gpu_minor = 0; // the N of /dev/nvidiaN (GpuInstance, ComputeInstance)
    unsigned gi = 0;        // GPU-instance id (GpuInstance, ComputeInstance)
    unsigned ci = 0;        // compute-instance id (ComputeInstance)
    unsigned minor = 0;     // of the nvidia-caps major
    unsigned mode = 0;      // permission bits the driver gives the node
    bool modify = false;    // DeviceFileModify: nvidia-modprobe resets the node
    std::string access;     // the access file, relative to the root

    // "gpu1/gi7/ci0": the name mig-minors uses, without "/access".
    std::string key() const;
    // "MIG 1/7/0 (gpu1/gi7/ci0)", "mig config", for messages.
    std::string subject() const;
};

struct MigTopology {
    // config and monitor first, then by GPU minor, GI and CI.
    std::vector<MigCap> caps;
    // GPU minors with a gpu<N>/mig directory. It exists with MIG on or
    // off, so it says only that the driver could have instances there.
    std::vector<unsigned> gpus_with_mig_dir;

    bool has_instances() const;
};

// mig-minors: "config 1", "monitor 2", "gpu0/gi0/access 3",
// "gpu0/gi0/ci0/access 4"... as name (without "/access") -> minor. Every
// line is checked; a name or minor given twice is an error.
Result<std::map<std::string, unsigned>> parse_mig_minors(std::string_view text,
                                                         std::string_view source);

// One access file: minor, mode (at most 0777) and modify (0 or 1).
Result<MigCap> parse_mig_access(std::string_view text, std::string_view source);

// Reads what exists. No capabilities directory (a driver without MIG
// support, or none loaded): an empty topology. A broken access file, a
// minor that disagrees with mig-minors, or a cap mig-minors does not list
// is an error in `diagnostics` and that cap is left out (no guessing). Fails
// only when mig-minors or the directory exists but cannot be read.
Result<MigTopology> read_mig_topology(const Sysroot& root, Diagnostics& diagnostics);

} // namespace gpuinit
