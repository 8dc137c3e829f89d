#include "gpuinit/mig/apply.hpp"

#include "gpuinit/base/text.hpp"

namespace gpuinit::mig {

namespace {

std::string step_text(const ApplyStep& step, const std::vector<CreatedInstance>& gis) {
    switch (step.kind) {
    case ApplyStep::Kind::DestroyCi:
        return format("destroying compute instance %u of GPU instance %u", step.ci, step.gi);
    case ApplyStep::Kind::DestroyGi:
        return format("destroying GPU instance %u", step.gi);
    case ApplyStep::Kind::SetMigMode:
        return step.mig ? "enabling MIG mode" : "disabling MIG mode";
    case ApplyStep::Kind::ResetGpu:
        return "resetting the GPU";
    case ApplyStep::Kind::CreateGi:
        return "creating a " + step.profile + " GPU instance" +
               (step.start ? format(" at placement %u", *step.start) : "");
    case ApplyStep::Kind::CreateCi:
        return "creating a " + step.profile + " compute instance" +
               (step.gi < gis.size() ? format(" in GPU instance %u", gis[step.gi].gi) : "");
    }
    return "an unknown step";
}

} // namespace

std::string gpu_subject(const GpuIdentity& gpu) {
    return format("GPU %u", gpu.minor) + (gpu.bdf.empty() ? "" : " (" + gpu.bdf + ")");
}

std::vector<GpuApplyOutcome> execute_apply(const std::vector<GpuApplyPlan>& plans,
                                           MigControl& control, ResetHolder* holder) {
    std::vector<GpuApplyOutcome> outcomes;
    for (const GpuApplyPlan& plan : plans) {
        GpuApplyOutcome outcome;
        outcome.plan = plan;
        // The GIs made so far, by their index in the layout: a CreateCi
        // names its GI that way, since the driver gives the id.
        std::vector<CreatedInstance> gis;
        for (const ApplyStep& step : plan.verdict == GpuApplyPlan::Verdict::Change
                                         ? plan.steps
                                         : std::vector<ApplyStep>{}) {
            Status done;
            switch (step.kind) {
            case ApplyStep::Kind::DestroyCi:
                done = control.destroy_ci(plan.gpu, step.gi, step.ci);
                break;
            case ApplyStep::Kind::DestroyGi:
                done = control.destroy_gi(plan.gpu, step.gi);
                break;
            case ApplyStep::Kind::SetMigMode:
                done = control.set_mig_mode(plan.gpu, step.mig);
                break;
            case ApplyStep::Kind::ResetGpu: {
                bool released = false;
                if (holder != nullptr) {
                    auto let_go = holder->release(plan.gpu);
                    if (!let_go) {
                        done = let_go.error();
                        break;
                    }
                    released = *let_go;
                }
                done = control.reset(plan.gpu);
                if (released) {
                    // Taken back whether or not the reset worked: the
                    // admin wanted it held.
                    Status held = holder->hold(plan.gpu);
                    if (!held) {
                        Diagnostic warning = held.error();
                        warning.severity = Severity::Warning;
                        warning.message = gpu_subject(plan.gpu) +
                                          ": not held again after its reset: " + warning.message;
                        outcome.warnings.push_back(std::move(warning));
                    }
                }
                break;
            }
            case ApplyStep::Kind::CreateGi: {
                auto id = control.create_gi(plan.gpu, step.profile, step.start);
                if (id) {
                    gis.push_back(CreatedInstance{*id, 0, step.profile});
                } else {
                    done = id.error();
                }
                break;
            }
            case ApplyStep::Kind::CreateCi: {
                if (step.gi >= gis.size()) {
                    done = error("a compute instance planned before its GPU instance");
                    break;
                }
                auto id = control.create_ci(plan.gpu, gis[step.gi].gi, step.profile);
                if (id) {
                    outcome.created.push_back(CreatedInstance{gis[step.gi].gi, *id, step.profile});
                } else {
                    done = id.error();
                }
                break;
            }
            }
            if (!done) {
                Diagnostic failure = done.error();
                std::string fix;
                if (step.kind == ApplyStep::Kind::CreateGi ||
                    step.kind == ApplyStep::Kind::CreateCi) {
                    fix = "; the layout of " + (plan.layout ? plan.layout->origin : "it") +
                          " does not fit this GPU (nvidia-smi mig -lgip and -lgipp list its "
                          "profiles and placements): change it and rerun";
                }
                failure.message = gpu_subject(plan.gpu) + ": " + step_text(step, gis) +
                                  " failed: " + failure.message + fix;
                failure.where.device = gpu_subject(plan.gpu);
                outcome.failure = std::move(failure);
                break;
            }
            ++outcome.steps_done;
        }
        outcomes.push_back(std::move(outcome));
    }
    return outcomes;
}

} // namespace gpuinit::mig
