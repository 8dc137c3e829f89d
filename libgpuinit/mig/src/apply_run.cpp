#include "gpuinit/mig/apply_run.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/mig/apply_nvml.hpp"
#include "gpuinit/mig/apply_smi.hpp"
#include "gpuinit/mig/names.hpp"
#include "gpuinit/mig/pick.hpp"

#include <algorithm>
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

// A mode set for "the next reset" may have taken effect at once: NVML's
// nvmlDeviceSetMigMode "may unbind or reset the device to activate the
// requested mode" when the GPU is idle (nvml.h), as Hopper's drivers do.
// Such a GPU is read again and, with its mode now as declared, planned and
// changed again in this run, so that its instances are made now and no
// reset is reported that is not needed.
void finish_activated_modes(MigControl& control, const MigLayout& layout,
                            const ApplyOptions& options, std::vector<GpuApplyOutcome>& outcomes,
                            Diagnostics& diagnostics) {
    bool any = false;
    for (const GpuApplyOutcome& outcome : outcomes) {
        any = any || (outcome.plan.reset_pending && !outcome.failure && outcome.steps_done > 0);
    }
    if (!any) {
        return;
    }
    auto now = control.gpus();
    if (!now) {
        Diagnostic failure = now.error();
        failure.message = "reading the GPUs again after setting their MIG mode: " + failure.message;
        diagnostics.add(std::move(failure));
        return;
    }
    for (GpuApplyOutcome& outcome : outcomes) {
        if (!outcome.plan.reset_pending || outcome.failure || outcome.steps_done == 0 ||
            outcome.plan.layout == nullptr) {
            continue;
        }
        for (const MigGpuState& state : *now) {
            if (!same_gpu(state.gpu, outcome.plan.gpu) || state.mig != outcome.plan.layout->mig) {
                continue;
            }
            std::vector<GpuApplyPlan> again = plan_apply({state}, layout, options);
            std::vector<GpuApplyOutcome> done = execute_apply(again, control);
            if (done.size() == 1) {
                for (Diagnostic& warning : outcome.warnings) {
                    done[0].warnings.push_back(std::move(warning));
                }
                outcome = std::move(done[0]);
            }
            break;
        }
    }
}

// Who uses an instance before the driver lists a process on it: a job
// holding its lease (gpu-mig pick, the TaskProlog's instance) or a process
// holding its CI cap node before CUDA starts. Their GPUs count as busy.
void add_instance_users(const Sysroot& root, std::vector<MigGpuState>& gpus,
                        Diagnostics& diagnostics) {
    bool instances = false;
    for (const MigGpuState& state : gpus) {
        instances = instances || !state.gis.empty();
    }
    if (!instances) {
        return;
    }
    Diagnostics ignored; // sync reports the instances' own problems
    auto view = read_mig_view(root, ignored);
    auto uses = view ? instance_uses(root, view->machine, view->instances, ignored)
                     : Result<InstanceUses>(view.error());
    if (!uses) {
        Diagnostic warning = uses.error();
        warning.severity = Severity::Warning;
        warning.message = "who holds the instances' leases and cap nodes is not known (" +
                          warning.message + "): only the driver's processes count as busy";
        diagnostics.add(std::move(warning));
        return;
    }
    for (const InstanceUse& use : uses->uses) {
        std::vector<unsigned> users(use.pids.begin(), use.pids.end());
        if (use.leased.value_or(false)) {
            for (const LeaseHolder& holder : use.holders) {
                users.push_back(static_cast<unsigned>(holder.pid));
            }
        }
        for (MigGpuState& state : gpus) {
            bool same = !state.gpu.uuid.empty() && !use.instance.gpu_uuid.empty()
                            ? same_uuid(state.gpu.uuid, use.instance.gpu_uuid)
                            : state.gpu.minor == use.instance.gpu_minor;
            bool leased = use.leased.value_or(false);
            if (!same || (users.empty() && !leased)) {
                continue;
            }
            if (leased) {
                state.leased.push_back(use.instance.key());
            }
            for (unsigned pid : users) {
                if (std::find(state.pids.begin(), state.pids.end(), pid) == state.pids.end()) {
                    state.pids.push_back(pid);
                }
            }
            state.used.emplace_back(use.instance.gi, use.instance.ci);
        }
    }
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

namespace {

// NVML's control, with nvidia-smi's for the reset NVML has no call for.
class NvmlWithSmiReset : public MigControl {
  public:
    NvmlWithSmiReset(std::unique_ptr<MigControl> smi, std::unique_ptr<MigControl> nvml)
        : smi_(std::move(smi)), nvml_(std::move(nvml)) {}
    Result<std::vector<MigGpuState>> gpus() override { return nvml_->gpus(); }
    Status destroy_ci(const GpuIdentity& gpu, unsigned gi, unsigned ci) override {
        return nvml_->destroy_ci(gpu, gi, ci);
    }
    Status destroy_gi(const GpuIdentity& gpu, unsigned gi) override {
        return nvml_->destroy_gi(gpu, gi);
    }
    Status set_mig_mode(const GpuIdentity& gpu, bool on) override {
        return nvml_->set_mig_mode(gpu, on);
    }
    Status reset(const GpuIdentity& gpu) override {
        // nvidia-smi numbers the GPUs when it reads them.
        if (smi_) {
            if (auto read = smi_->gpus(); !read) {
                return read.error();
            }
        }
        return nvml_->reset(gpu);
    }
    Result<unsigned> create_gi(const GpuIdentity& gpu, std::string_view profile,
                               std::optional<unsigned> start) override {
        return nvml_->create_gi(gpu, profile, start);
    }
    Result<unsigned> create_ci(const GpuIdentity& gpu, unsigned gi,
                               std::string_view profile) override {
        return nvml_->create_ci(gpu, gi, profile);
    }

  private:
    std::unique_ptr<MigControl> smi_; // before nvml_: destroyed after it
    std::unique_ptr<MigControl> nvml_;
};

} // namespace

Result<std::unique_ptr<MigControl>> open_mig_control(const ApplyRequest& request,
                                                     Diagnostics& diagnostics, std::string& name) {
    std::string program = request.nvidia_smi;
    std::optional<Diagnostic> smi_missing;
    if (program.empty()) {
        auto found = find_nvidia_smi();
        if (found) {
            program = *found;
        } else {
            smi_missing = found.error();
        }
    }
    std::unique_ptr<MigControl> smi;
    if (!program.empty()) {
        smi = std::make_unique<SmiMigControl>(program);
    }
    std::optional<Diagnostic> nvml_failed;
    if (request.use_nvml && nvml_supported()) {
        MigControl* reset_through = smi.get();
        auto nvml = open_nvml_mig_control(
            diagnostics, request.nvml_library.empty() ? kNvmlLibrary : request.nvml_library,
            reset_through);
        if (nvml) {
            name = "NVML";
            return std::unique_ptr<MigControl>(
                std::make_unique<NvmlWithSmiReset>(std::move(smi), std::move(*nvml)));
        }
        nvml_failed = nvml.error();
    }
    if (!smi) {
        Diagnostic failure = *smi_missing;
        failure.message = "no way to read or change MIG instances: " + failure.message +
                          (nvml_failed ? "; and NVML: " + nvml_failed->message : "");
        return failure;
    }
    // A machine without the driver's NVML is the usual reason and says
    // nothing; one whose NVML loads and then fails is worth a line.
    if (nvml_failed && nvml_failed->code != ENOENT) {
        Diagnostic warning = *nvml_failed;
        warning.severity = Severity::Warning;
        warning.message = "NVML not used: " + warning.message + "; nvidia-smi is";
        diagnostics.add(std::move(warning));
    }
    name = "nvidia-smi (" + program + ")";
    return smi;
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
    add_instance_users(root, *gpus, report.diagnostics);
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
    finish_activated_modes(*control, *report.layout, request.options, report.gpus,
                           report.diagnostics);
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
