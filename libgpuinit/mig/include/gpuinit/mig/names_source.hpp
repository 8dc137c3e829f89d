// Where gpu-mig's commands take profiles and MIG UUIDs from, in one place:
// saved nvidia-smi output when the admin names it, else the names file of
// the last sync (job-side commands: a file read, no driver round trip),
// else the driver now (NVML in the dynamic build, else nvidia-smi).
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/mig/instances.hpp"

#include <string>
#include <vector>

namespace gpuinit {

enum class MigNamesFirst {
    File,   // the names file when it covers every instance (list, pick, gres, env)
    Driver, // NVML or nvidia-smi, never the file (sync, which writes the file)
};

struct MigNamesRequest {
    std::string smi_output; // --nvidia-smi-output DIR; "" none
    MigNamesFirst first = MigNamesFirst::File;
};

// Fills the instances' profile and uuid and returns where they came from
// ("" when no source answered). Fails only when `smi_output` was given and
// cannot be read (the admin asked for it); otherwise what stays unknown is
// a warning in `diagnostics` (apply_mig_names), never made up. With
// MigNamesFirst::File and the driver not answering, a names file that lacks
// some instances is still used for the others.
Result<std::string> name_mig_instances(const Sysroot& root, const MigNamesRequest& request,
                                       std::vector<MigInstance>& instances,
                                       Diagnostics& diagnostics);

} // namespace gpuinit
