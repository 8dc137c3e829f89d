// gpu-mig's commands other than sync (sync.hpp), each one call from the
// tool: what to read, in which order, and when the names (which may take an
// NVML or nvidia-smi call) are worth getting. Rendering is the tool's.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/mig/gres.hpp"
#include "gpuinit/mig/pick.hpp"
#include "gpuinit/mig/slurm_env.hpp"
#include "gpuinit/mig/sync.hpp"

#include <optional>
#include <string>
#include <vector>

namespace gpuinit::mig {

// pick: instances named only when the ids, the profile or a MIG UUID in the
// visible-devices variables need it (keys alone need no names).
struct PickCommand {
    PickRequest request;    // its variables as the caller's environment has them
    std::string smi_output; // --nvidia-smi-output DIR; "" none
};
Result<Pick> pick(const Sysroot& root, const PickCommand& command, Diagnostics& diagnostics);

// list: every instance, named, with its leases and holders.
Result<InstanceUses> list(const Sysroot& root, const std::string& smi_output,
                          Diagnostics& diagnostics);

// release KEY (root): the lease of one instance replaced.
Result<LeaseRelease> release(const Sysroot& root, std::string_view key, Diagnostics& diagnostics);

// gres: the plan for this node, and with `check` the findings of that file
// against it. Files named here (type map, check) are taken as given, not
// under the root.
struct GresCommand {
    GresTypeStyle style = GresTypeStyle::Autodetect;
    std::string type_map;         // "" none
    std::string check;            // "" none
    bool check_if_exists = false; // a `check` file that is not there is not checked
    std::string node;             // NodeName, for --check's records
    std::string smi_output;
};
struct GresOutcome {
    GresPlan plan;
    std::optional<std::vector<GresFinding>> findings; // with `check`
    bool check_skipped = false;                       // check_if_exists, and the file is not there
};
Result<GresOutcome> gres(const Sysroot& root, const GresCommand& command, Diagnostics& diagnostics);

// env (a Slurm TaskProlog): the CUDA ids of the job's devices. The
// variables are the job's environment as the caller read it.
struct SlurmEnvCommand {
    std::optional<std::string> step_gpus;  // SLURM_STEP_GPUS
    std::optional<std::string> job_gpus;   // SLURM_JOB_GPUS
    std::optional<std::string> slurm_conf; // SLURM_CONF: gres.conf is beside it
    std::string node_name;                 // SLURMD_NODENAME
    std::string gres_conf;                 // --gres-conf, taken as given; "" beside slurm_conf
    std::string smi_output;
};
struct SlurmEnv {
    SlurmGpuAllocation allocation; // variable "" when the job has no GPUs
    std::vector<std::string> ids;
};
Result<SlurmEnv> slurm_env(const Sysroot& root, const SlurmEnvCommand& command,
                           Diagnostics& diagnostics);

} // namespace gpuinit::mig
