// gpu-mig's output: instance ids for CUDA_VISIBLE_DEVICES, the instance
// table of `list`, and what `sync` did, for people and for scripts.
#pragma once

#include "common/report.hpp"
#include "gpuinit/mig/leases.hpp"
#include "gpuinit/mig/pick.hpp"

#include <string>
#include <vector>

namespace gpuinit::tools {

// "MIG-a,MIG-b" (uuid) or "gpu1/gi7/ci0,gpu2/gi7/ci0" (key).
std::string mig_ids(const std::vector<MigInstance>& instances, bool uuid);

Rendered render_mig_list_text(const InstanceUses& uses, const Diagnostics& diagnostics,
                              int verbosity);
std::string render_mig_list_json(const InstanceUses& uses, const Diagnostics& diagnostics,
                                 int exit_code);

Rendered render_mig_sync_text(const LeaseSync& sync, const std::string& lease_dir,
                              const Diagnostics& diagnostics, int verbosity);
std::string render_mig_sync_json(const LeaseSync& sync, const std::string& lease_dir,
                                 const Diagnostics& diagnostics, int exit_code);

} // namespace gpuinit::tools
