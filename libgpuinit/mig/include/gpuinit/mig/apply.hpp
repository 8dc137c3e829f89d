// gpu-mig apply's effects: the steps of a plan (apply_plan.hpp) carried out
// through a MigControl, the driver's side as a port (NVML where it loads,
// else nvidia-smi; a stand-in in the tests), GPU by GPU. A failed step
// stops its GPU (the later steps need it) and not the others: the next run
// clears that GPU and starts again, so a run that failed half way is
// repaired by the one after it.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/mig/apply_plan.hpp"

#include <optional>
#include <string_view>
#include <vector>

namespace gpuinit::mig {

class MigControl {
  public:
    virtual ~MigControl() = default;
    // Every GPU the driver lists, with its MIG mode, instances and the
    // processes on it.
    virtual Result<std::vector<MigGpuState>> gpus() = 0;
    virtual Status destroy_ci(const GpuIdentity& gpu, unsigned gi, unsigned ci) = 0;
    virtual Status destroy_gi(const GpuIdentity& gpu, unsigned gi) = 0;
    // The mode after the next reset.
    virtual Status set_mig_mode(const GpuIdentity& gpu, bool on) = 0;
    virtual Status reset(const GpuIdentity& gpu) = 0;
    // The GI id the driver gave. `start`: the placement; none: the driver's choice.
    virtual Result<unsigned> create_gi(const GpuIdentity& gpu, std::string_view profile,
                                       std::optional<unsigned> start) = 0;
    // The CI id the driver gave.
    virtual Result<unsigned> create_ci(const GpuIdentity& gpu, unsigned gi,
                                       std::string_view profile) = 0;
};

// Whoever holds a GPU open outside any job (gpu-persist) must let it go for
// a reset: the driver refuses to reset a GPU with a client on it.
class ResetHolder {
  public:
    virtual ~ResetHolder() = default;
    // true: it held the GPU and has let it go; false: it did not hold it.
    virtual Result<bool> release(const GpuIdentity& gpu) = 0;
    // Takes the GPU back after the reset.
    virtual Status hold(const GpuIdentity& gpu) = 0;
};

struct CreatedInstance {
    unsigned gi = 0;
    unsigned ci = 0;
    std::string profile; // the CI's
};

struct GpuApplyOutcome {
    GpuApplyPlan plan;
    size_t steps_done = 0;
    std::vector<CreatedInstance> created;
    std::optional<Diagnostic> failure; // the step that failed; the GPU's later steps not done
    std::vector<Diagnostic> warnings;  // a GPU not taken back after its reset
};

// Carries out each plan's steps in order. Plans other than Change do
// nothing. A failure names the GPU, the step and, for a create, the layout
// line it came from. A reset is bracketed by `holder`'s release and hold
// (nullptr: nobody holds GPUs).
std::vector<GpuApplyOutcome> execute_apply(const std::vector<GpuApplyPlan>& plans,
                                           MigControl& control, ResetHolder* holder = nullptr);

// "GPU 1 (0000:17:00.0)", as messages name a GPU.
std::string gpu_subject(const GpuIdentity& gpu);

} // namespace gpuinit::mig
