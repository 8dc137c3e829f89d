#include "gpuinit/mig/apply_run.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/mig/apply_smi.hpp"
#include "gpuinit/mig/names.hpp"

#include <cerrno>

namespace gpuinit::mig {

namespace {

bool differs(GpuApplyPlan::Verdict verdict) {
    return verdict != GpuApplyPlan::Verdict::NotDeclared &&
           verdict != GpuApplyPlan::Verdict::AsDeclared;
}

// A line that names a GPU the driver does not list is most often a typo or a
// GPU gone: said, since nothing else would show it.
void warn_unmatched_lines(const MigLayout& layout, const std::vector<MigGpuState>& gpus,
                          Diagnostics& diagnostics) {
    for (const MigLayout::Entry& entry : layout.entries()) {
        if (entry.subject == MigLayout::Subject::AnyGpu) {
            continue;
        }
        bool named = false;
        for (const MigGpuState& state : gpus) {
            named = named || (entry.gpu ? entry.gpu->matches(state.gpu)
                                        : layout_model_matches(entry.model, state.model));
        }
        if (!named) {
            Diagnostic warning =
                error(entry.layout.origin + ": names no GPU the driver lists (nvidia-smi -L lists "
                                            "them): the line does nothing");
            warning.severity = Severity::Warning;
            diagnostics.add(std::move(warning));
        }
    }
}

// By UUID where both have one, else by PCI address, else by minor.
bool same_gpu(const GpuIdentity& a, const GpuIdentity& b) {
    if (!a.uuid.empty() && !b.uuid.empty()) {
        return same_uuid(a.uuid, b.uuid);
    }
    if (!a.bdf.empty() && !b.bdf.empty()) {
        return a.bdf == b.bdf;
    }
    return a.minor == b.minor;
}

// The GPUs changed, read again: what the driver reports now is what counts.
void verify_changes(MigControl& control, std::vector<GpuApplyOutcome>& outcomes,
                    Diagnostics& diagnostics) {
    bool changed = false;
    for (const GpuApplyOutcome& outcome : outcomes) {
        changed =
            changed || (outcome.steps_done > 0 && !outcome.failure && !outcome.plan.reset_pending);
    }
    if (!changed) {
        return;
    }
    auto now = control.gpus();
    if (!now) {
        Diagnostic failure = now.error();
        failure.message = "reading the GPUs again after the changes: " + failure.message;
        diagnostics.add(std::move(failure));
        return;
    }
    for (GpuApplyOutcome& outcome : outcomes) {
        if (outcome.steps_done == 0 || outcome.failure || outcome.plan.reset_pending ||
            outcome.plan.layout == nullptr) {
            continue;
        }
        const MigGpuState* state = nullptr;
        for (const MigGpuState& candidate : *now) {
            if (same_gpu(candidate.gpu, outcome.plan.gpu)) {
                state = &candidate;
            }
        }
        if (state == nullptr) {
            outcome.failure = error(gpu_subject(outcome.plan.gpu) +
                                        ": no longer listed after the changes (nvidia-smi -L)",
                                    ENODEV);
        } else if (!state->mig || !matches_layout(*state, *outcome.plan.layout)) {
            outcome.failure =
                error(gpu_subject(outcome.plan.gpu) + ": after the changes it still differs from " +
                          outcome.plan.layout->origin +
                          " (nvidia-smi mig -lgi and -lci show what it has)",
                      EIO);
        }
    }
}

} // namespace

bool outcome_as_declared(const GpuApplyOutcome& outcome) {
    if (outcome.failure) {
        return false;
    }
    switch (outcome.plan.verdict) {
    case GpuApplyPlan::Verdict::NotDeclared:
    case GpuApplyPlan::Verdict::AsDeclared:
        return true;
    case GpuApplyPlan::Verdict::Change:
        return !outcome.plan.reset_pending && outcome.steps_done == outcome.plan.steps.size();
    default:
        return false;
    }
}

Result<std::unique_ptr<MigControl>> open_mig_control(const ApplyRequest& request,
                                                     Diagnostics& diagnostics, std::string& name) {
    (void)diagnostics;
    std::string program = request.nvidia_smi;
    if (program.empty()) {
        auto found = find_nvidia_smi();
        if (!found) {
            Diagnostic failure = found.error();
            failure.message = "no way to change MIG instances: " + failure.message;
            return failure;
        }
        program = *found;
    }
    name = "nvidia-smi (" + program + ")";
    return std::unique_ptr<MigControl>(
        std::make_unique<SmiMigControl>(program, std::vector<GpuIdentity>{}));
}

Result<ApplyReport> run_apply(const Sysroot& root, const ApplyRequest& request, MigControl* control,
                              ResetHolder* holder) {
    ApplyReport report;
    report.layout_source = root.display(kLayoutPath);
    auto loaded = MigLayout::load(root);
    if (!loaded) {
        return loaded.error();
    }
    if (!*loaded) {
        report.status = ApplyReport::Status::NoLayout;
        return report;
    }
    report.layout = std::make_shared<const MigLayout>(std::move(**loaded));
    std::unique_ptr<MigControl> owned;
    if (control == nullptr) {
        auto opened = open_mig_control(request, report.diagnostics, report.control);
        if (!opened) {
            return opened.error();
        }
        owned = std::move(*opened);
        control = owned.get();
    }
    auto gpus = control->gpus();
    if (!gpus) {
        Diagnostic failure = gpus.error();
        failure.message = "reading the GPUs' MIG state: " + failure.message;
        return failure;
    }
    warn_unmatched_lines(*report.layout, *gpus, report.diagnostics);
    std::vector<GpuApplyPlan> plans = plan_apply(*gpus, *report.layout, request.options);

    if (request.mode != ApplyRequest::Mode::Apply) {
        bool any = false;
        for (GpuApplyPlan& plan : plans) {
            any = any || differs(plan.verdict);
            report.gpus.push_back(GpuApplyOutcome{std::move(plan), 0, {}, {}, {}});
        }
        report.status = any ? ApplyReport::Status::Differs : ApplyReport::Status::AsDeclared;
        return report;
    }

    report.gpus = execute_apply(plans, *control, holder);
    verify_changes(*control, report.gpus, report.diagnostics);
    bool all = !report.diagnostics.has_errors();
    for (const GpuApplyOutcome& outcome : report.gpus) {
        all = all && outcome_as_declared(outcome);
    }
    report.status = all ? ApplyReport::Status::AsDeclared : ApplyReport::Status::Partial;
    // The cap nodes, leases and names follow the instances, changed or not:
    // at boot /run is new, and a second run must find nothing to do.
    report.sync = sync(root, SyncOptions{request.smi_output});
    return report;
}

} // namespace gpuinit::mig
