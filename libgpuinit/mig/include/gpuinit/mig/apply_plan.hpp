// gpu-mig apply's plan, pure: what each GPU has now (its MIG mode, its GPU
// and compute instances, the processes on it) and the declared layout
// (layout.hpp) in, the steps that make the GPU match out. Nothing here
// reads the machine or changes it; the effects take this plan.
//
// A GPU whose instances differ from its layout in any way is planned
// whole: every compute and GPU instance destroyed, then the declared ones
// created, largest first. Keeping the instances that happen to match could
// leave them where the driver's placements need room for a larger one, and
// what a GPU ends with would then depend on what it had. NVIDIA's
// nvidia-mig-parted does the same (it clears a GPU before applying a
// config that differs).
//
// Where the GPU's placements are known (nvidia-smi mig -lgipp, NVML's
// possible placements), the plan gives every GI its placement, found by
// trying them all: the driver's own choice for a create without one can
// leave no room for a later GI of a layout that fits (on an H100, a
// 3g.40gb taken at 0 leaves 2g.20gb + 1g.10gb*2 no room; at 4 they fit).
// nvidia-mig-parted tries the orders of creation until one works instead.
// A layout that fits no way is refused before anything is destroyed.
#pragma once

#include "gpuinit/host/gpu_selector.hpp"
#include "gpuinit/mig/layout.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpuinit::mig {

struct CiState {
    unsigned id = 0;
    std::string profile; // "1c.3g.40gb"
};
struct GiState {
    unsigned id = 0;
    std::string profile; // "3g.40gb"
    std::vector<CiState> cis;
};

// A GPU-instance profile's placements on one GPU: the memory slices it
// takes from each start.
struct GiPlacements {
    std::string profile; // "3g.40gb"
    unsigned size = 0;
    std::vector<unsigned> starts;
};

// One GPU as the driver reports it.
struct MigGpuState {
    GpuIdentity gpu;
    std::string model;             // "NVIDIA H100 80GB HBM3"
    bool mig_capable = true;       // false: the GPU has no MIG (mig is false)
    std::optional<bool> mig;       // current MIG mode; nullopt: not known
    std::optional<bool> mig_after; // the mode after the next reset (NVML's pending)
    std::vector<GiState> gis;      // with mig
    std::vector<unsigned> pids;    // processes using the GPU or its instances
    // Instances whose gpu-mig lease is held ("gpu1/gi7/ci0"): a job has
    // them, whether or not it has started CUDA.
    std::vector<std::string> leased;
    // The (GI, CI) each process on a MIG instance uses, where the listing
    // says: the driver refuses to destroy those, so they go first.
    std::vector<std::pair<unsigned, unsigned>> used;
    std::vector<GiPlacements> placements; // its profiles; empty: not known
};

struct ApplyOptions {
    bool force = false;           // change a GPU with processes on it
    bool reset_if_needed = false; // reset a GPU whose MIG mode change waits for one
};

struct ApplyStep {
    enum class Kind { DestroyCi, DestroyGi, SetMigMode, ResetGpu, CreateGi, CreateCi };
    Kind kind = Kind::CreateGi;
    unsigned gi = 0;               // DestroyCi, DestroyGi; CreateCi: the index into the GIs created
    unsigned ci = 0;               // DestroyCi
    std::string profile;           // CreateGi, CreateCi
    bool mig = false;              // SetMigMode
    std::optional<unsigned> start; // CreateGi: its placement; none: the driver's choice
    friend bool operator==(const ApplyStep&, const ApplyStep&) = default;
};

struct GpuApplyPlan {
    enum class Verdict {
        NotDeclared,  // no line names it: left as it is
        AsDeclared,   // nothing to do
        Change,       // `steps` make it match
        Busy,         // it differs, and processes use it: `pids`; nothing done
        ResetPending, // the mode is set for the next reset, which was not allowed
        Unknown,      // its MIG mode could not be read: nothing done
        DoesNotFit,   // its placements admit the layout no way (`problem`): nothing done
    };
    GpuIdentity gpu;
    std::string model;
    Verdict verdict = Verdict::NotDeclared;
    const GpuLayout* layout = nullptr; // in the MigLayout planned from
    std::vector<ApplyStep> steps;
    std::vector<unsigned> pids;      // with Busy (and with a forced Change)
    std::vector<std::string> leased; // likewise: the held leases
    // After `steps`, a reset is still needed (mode set, reset not allowed):
    // the instances are created by the run after the reset.
    bool reset_pending = false;
    std::string problem; // with DoesNotFit: why, in words
};

// Placement starts for `gis` (in their order) such that no two overlap,
// from the GPU's `placements`; nullopt when there are none, or a profile
// is not among them.
std::optional<std::vector<unsigned>> place_gis(const std::vector<LayoutGi>& gis,
                                               const std::vector<GiPlacements>& placements);

const char* verdict_name(GpuApplyPlan::Verdict verdict);
const char* step_name(ApplyStep::Kind kind);

// Whether `state` has exactly the instances `layout` declares (profiles
// only: ids and placements are the driver's).
bool matches_layout(const MigGpuState& state, const GpuLayout& layout);

// One plan per GPU of `gpus`, in their order. `layout` must outlive it.
std::vector<GpuApplyPlan> plan_apply(const std::vector<MigGpuState>& gpus, const MigLayout& layout,
                                     const ApplyOptions& options);

} // namespace gpuinit::mig
