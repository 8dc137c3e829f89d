// `gpu-mig env`: CUDA_VISIBLE_DEVICES with MIG UUIDs for a Slurm job whose
// gres.conf was written by hand (or by gpu-mig gres), without NVML
// autodetect. Slurm then exports device indices: SLURM_STEP_GPUS /
// SLURM_JOB_GPUS hold the positions of the job's devices among the node's
// Name=gpu records (gres_common.c: one index per File= path, one per
// MultipleFiles= line, in file order), and CUDA_VISIBLE_DEVICES plain
// numbers, which CUDA cannot map to MIG instances. A TaskProlog prints
// "export CUDA_VISIBLE_DEVICES=MIG-..." to replace them.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/mig/gres.hpp"
#include "gpuinit/mig/instances.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

// What Slurm told the job: `indices` is the variable's value ("0,3"),
// `variable` its name, for messages.
struct SlurmGpuAllocation {
    std::string variable;
    std::string indices;
};

// The CUDA ids of the allocated devices, in the order Slurm lists them: a
// MIG record's instance UUID ("MIG-..."), a whole GPU's UUID ("GPU-...").
// A record is matched to the machine by its files: /dev/nvidia<minor> and
// the GI and CI cap nodes. Fails, naming the index, the gres.conf line and
// the fix, when an index has no record, a record matches no GPU or
// instance, or its UUID is unknown.
Result<std::vector<std::string>> cuda_ids_for_slurm(const SlurmGpuAllocation& allocation,
                                                    const std::vector<GresConfRecord>& records,
                                                    std::string_view conf_source,
                                                    const Machine& machine,
                                                    const std::vector<MigInstance>& instances);

} // namespace gpuinit
