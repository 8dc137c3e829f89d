#include "gpuinit/mig/apply_plan.hpp"

#include <algorithm>
#include <cstdint>
#include <tuple>

namespace gpuinit::mig {

namespace {

// A GPU's instances as the layout writes them: each GI's CI profiles
// sorted, the GIs sorted, so that two layouts compare equal when they have
// the same instances, whatever their ids.
// A CI's name in one spelling: where a GI's name has a suffix (+me),
// NVIDIA's names of its smaller CIs may carry it or not, and a layout may
// write either; its size in the GI is what counts.
std::string canonical_ci(const std::string& ci, const std::string& gi) {
    auto slices = ci_slices_in(ci, gi);
    return slices ? std::to_string(*slices) + "c" : ci;
}

// GIs and CIs in one order and spelling, to compare what a GPU has with
// what its layout declares.
std::vector<LayoutGi> canonical(std::vector<LayoutGi> gis) {
    for (LayoutGi& gi : gis) {
        for (std::string& ci : gi.cis) {
            ci = canonical_ci(ci, gi.profile);
        }
        std::sort(gi.cis.begin(), gi.cis.end());
    }
    std::sort(gis.begin(), gis.end(), [](const LayoutGi& a, const LayoutGi& b) {
        return std::tie(a.profile, a.cis) < std::tie(b.profile, b.cis);
    });
    return gis;
}

std::vector<LayoutGi> as_layout(const std::vector<GiState>& gis) {
    std::vector<LayoutGi> made;
    for (const GiState& gi : gis) {
        LayoutGi one;
        one.profile = gi.profile;
        for (const CiState& ci : gi.cis) {
            one.cis.push_back(ci.profile);
        }
        made.push_back(std::move(one));
    }
    return canonical(std::move(made));
}

// The instances a process uses first: the driver refuses to destroy them
// (NVML_ERROR_IN_USE), and a forced change should stop at that refusal
// before it has destroyed the idle ones.
void destroy_all(const MigGpuState& state, std::vector<ApplyStep>& steps) {
    auto ci_used = [&state](unsigned gi, unsigned ci) {
        return std::find(state.used.begin(), state.used.end(), std::make_pair(gi, ci)) !=
               state.used.end();
    };
    auto gi_used = [&state](unsigned gi) {
        return std::any_of(state.used.begin(), state.used.end(),
                           [gi](const auto& used) { return used.first == gi; });
    };
    std::vector<const GiState*> gis;
    for (const GiState& gi : state.gis) {
        gis.push_back(&gi);
    }
    std::stable_partition(gis.begin(), gis.end(),
                          [&](const GiState* gi) { return gi_used(gi->id); });
    for (const GiState* gi : gis) {
        std::vector<const CiState*> cis;
        for (const CiState& ci : gi->cis) {
            cis.push_back(&ci);
        }
        std::stable_partition(cis.begin(), cis.end(),
                              [&](const CiState* ci) { return ci_used(gi->id, ci->id); });
        for (const CiState* ci : cis) {
            steps.push_back({ApplyStep::Kind::DestroyCi, gi->id, ci->id, {}, false, {}});
        }
        steps.push_back({ApplyStep::Kind::DestroyGi, gi->id, 0, {}, false, {}});
    }
}

bool place(const std::vector<LayoutGi>& gis, const std::vector<GiPlacements>& placements,
           size_t next, uint64_t taken, std::vector<unsigned>& starts) {
    if (next == gis.size()) {
        return true;
    }
    for (const GiPlacements& profile : placements) {
        if (profile.profile != gis[next].profile) {
            continue;
        }
        for (unsigned start : profile.starts) {
            if (profile.size == 0 || profile.size > 63 || start > 63 - profile.size) {
                continue;
            }
            uint64_t span = ((uint64_t{1} << profile.size) - 1) << start;
            if ((taken & span) != 0) {
                continue;
            }
            starts.push_back(start);
            if (place(gis, placements, next + 1, taken | span, starts)) {
                return true;
            }
            starts.pop_back();
        }
    }
    return false;
}

void create_all(const GpuLayout& layout, const std::optional<std::vector<unsigned>>& starts,
                std::vector<ApplyStep>& steps) {
    // The layout keeps its GIs largest first: where the placements are not
    // known, the order in which the driver's own choice most often leaves
    // room for the rest.
    for (size_t i = 0; i < layout.gis.size(); ++i) {
        const LayoutGi& gi = layout.gis[i];
        steps.push_back({ApplyStep::Kind::CreateGi, static_cast<unsigned>(i), 0, gi.profile, false,
                         starts ? std::optional<unsigned>((*starts)[i]) : std::nullopt});
        for (const std::string& ci : gi.cis) {
            steps.push_back(
                {ApplyStep::Kind::CreateCi, static_cast<unsigned>(i), 0, ci, false, {}});
        }
    }
}

} // namespace

std::optional<std::vector<unsigned>> place_gis(const std::vector<LayoutGi>& gis,
                                               const std::vector<GiPlacements>& placements) {
    std::vector<unsigned> starts;
    if (!place(gis, placements, 0, 0, starts)) {
        return std::nullopt;
    }
    return starts;
}

const char* verdict_name(GpuApplyPlan::Verdict verdict) {
    switch (verdict) {
    case GpuApplyPlan::Verdict::NotDeclared:
        return "not-declared";
    case GpuApplyPlan::Verdict::AsDeclared:
        return "as-declared";
    case GpuApplyPlan::Verdict::Change:
        return "change";
    case GpuApplyPlan::Verdict::Busy:
        return "busy";
    case GpuApplyPlan::Verdict::ResetPending:
        return "reset-pending";
    case GpuApplyPlan::Verdict::Unknown:
        return "unknown";
    case GpuApplyPlan::Verdict::DoesNotFit:
        return "does-not-fit";
    }
    return "unknown";
}

const char* step_name(ApplyStep::Kind kind) {
    switch (kind) {
    case ApplyStep::Kind::DestroyCi:
        return "destroy-ci";
    case ApplyStep::Kind::DestroyGi:
        return "destroy-gi";
    case ApplyStep::Kind::SetMigMode:
        return "set-mig-mode";
    case ApplyStep::Kind::ResetGpu:
        return "reset-gpu";
    case ApplyStep::Kind::CreateGi:
        return "create-gi";
    case ApplyStep::Kind::CreateCi:
        return "create-ci";
    }
    return "unknown";
}

bool matches_layout(const MigGpuState& state, const GpuLayout& layout) {
    if (!state.mig || *state.mig != layout.mig) {
        return false;
    }
    if (!layout.mig) {
        return true;
    }
    return as_layout(state.gis) == canonical(layout.gis);
}

std::vector<GpuApplyPlan> plan_apply(const std::vector<MigGpuState>& gpus, const MigLayout& layout,
                                     const ApplyOptions& options) {
    std::vector<GpuApplyPlan> plans;
    for (const MigGpuState& state : gpus) {
        GpuApplyPlan plan;
        plan.gpu = state.gpu;
        plan.model = state.model;
        plan.layout = layout.for_gpu(state.gpu, state.model);
        plans.push_back(plan);
        GpuApplyPlan& made = plans.back();
        if (made.layout == nullptr) {
            continue;
        }
        const GpuLayout& want = *made.layout;
        // `gpu=* mig=off` holds for a GPU without MIG; `mig=on` cannot.
        if (!state.mig_capable) {
            made.verdict =
                want.mig ? GpuApplyPlan::Verdict::DoesNotFit : GpuApplyPlan::Verdict::AsDeclared;
            made.problem = want.mig ? "this GPU has no MIG (nvidia-smi -q shows its MIG mode "
                                      "as N/A): name the MIG GPUs in the layout"
                                    : "";
            continue;
        }
        if (!state.mig) {
            made.verdict = GpuApplyPlan::Verdict::Unknown;
            continue;
        }
        if (matches_layout(state, want)) {
            made.verdict = GpuApplyPlan::Verdict::AsDeclared;
            continue;
        }
        if (!state.pids.empty() || !state.leased.empty()) {
            made.pids = state.pids;
            made.leased = state.leased;
            if (!options.force) {
                made.verdict = GpuApplyPlan::Verdict::Busy;
                continue;
            }
        }
        // Placements are known only with MIG on; after a mode change the
        // driver chooses.
        std::optional<std::vector<unsigned>> starts;
        if (want.mig && *state.mig && !state.placements.empty()) {
            starts = place_gis(want.gis, state.placements);
            if (!starts) {
                made.verdict = GpuApplyPlan::Verdict::DoesNotFit;
                made.problem = "its GPU instances fit no placements of this GPU (nvidia-smi mig "
                               "-lgip and -lgipp list its profiles and placements)";
                continue;
            }
        }
        made.verdict = GpuApplyPlan::Verdict::Change;
        bool mode_changes = *state.mig != want.mig;
        // Instances exist only with MIG on; the driver refuses to turn it
        // off while any are left.
        if (*state.mig) {
            destroy_all(state, made.steps);
        }
        if (mode_changes) {
            // The mode already set for the next reset needs no second set.
            if (state.mig_after.value_or(*state.mig) != want.mig) {
                made.steps.push_back({ApplyStep::Kind::SetMigMode, 0, 0, {}, want.mig, {}});
            }
            // A reset with processes on the GPU would kill them: --force
            // changes instances, never resets a busy GPU.
            if (!options.reset_if_needed || !state.pids.empty() || !state.leased.empty()) {
                made.reset_pending = true;
                if (made.steps.empty()) {
                    made.verdict = GpuApplyPlan::Verdict::ResetPending;
                }
                continue;
            }
            made.steps.push_back({ApplyStep::Kind::ResetGpu, 0, 0, {}, false, {}});
        }
        if (want.mig) {
            create_all(want, starts, made.steps);
        }
    }
    return plans;
}

} // namespace gpuinit::mig
