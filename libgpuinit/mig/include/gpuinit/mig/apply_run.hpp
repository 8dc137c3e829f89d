// `gpu-mig apply`: the declared layout (layout.hpp) read, each GPU's state
// read through a MigControl, the plan (apply_plan.hpp) made and carried out
// (apply.hpp), then what `gpu-mig sync` does, so the cap nodes, leases and
// names follow the instances just made. --dry-run and --check stop after
// the plan.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/mig/apply.hpp"
#include "gpuinit/mig/layout.hpp"
#include "gpuinit/mig/sync.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpuinit::mig {

struct ApplyRequest {
    enum class Mode { Apply, DryRun, Check };
    Mode mode = Mode::Apply;
    ApplyOptions options;
    std::string nvidia_smi;   // its path; "" PATH's
    std::string nvml_library; // "" the driver's libnvidia-ml.so.1
    bool use_nvml = true;     // false: nvidia-smi only
    std::string smi_output;   // sync's names from saved output (--nvidia-smi-output)
};

struct ApplyReport {
    enum class Status {
        NoLayout,   // no layout file: nothing read, nothing changed
        AsDeclared, // every GPU the layout names matches it (after this run's changes)
        Differs,    // --check or --dry-run: some GPU would change
        Partial,    // some GPU failed, is busy, waits for a reset or does not fit
    };
    Status status = Status::NoLayout;
    std::string layout_source;
    std::shared_ptr<const MigLayout> layout; // the plans point into it
    std::string control;                     // "NVML", "nvidia-smi (/usr/bin/nvidia-smi)"
    std::vector<GpuApplyOutcome> gpus;
    std::optional<SyncOutcome> sync; // Apply mode, after the instances
    Diagnostics diagnostics;
};

// The control `request` asks for: NVML where it loads (never in the static
// build), else nvidia-smi. Which one, in words, goes to `name`.
Result<std::unique_ptr<MigControl>> open_mig_control(const ApplyRequest& request,
                                                     Diagnostics& diagnostics, std::string& name);

// The whole command. `control`: nullptr opens one (open_mig_control);
// `holder`: nullptr when no daemon holds GPUs. Fails (nothing changed)
// when the layout cannot be read or no GPU state can be.
Result<ApplyReport> run_apply(const Sysroot& root, const ApplyRequest& request, MigControl* control,
                              ResetHolder* holder);

// Whether a GPU's plan leaves it as declared (nothing to do, or done).
bool outcome_as_declared(const GpuApplyOutcome& outcome);

} // namespace gpuinit::mig
