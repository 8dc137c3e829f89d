// gpu-mig apply's pure plan: a GPU that matches its layout is left alone,
// one that differs is cleared and made again largest first, a busy one is
// refused unless forced, and a MIG mode change waits for a reset unless
// one is allowed and the GPU is idle.
#include "gpuinit/mig/apply_plan.hpp"

#include <gtest/gtest.h>

namespace gpuinit::mig {

namespace {

using Kind = ApplyStep::Kind;
using Verdict = GpuApplyPlan::Verdict;

MigLayout layout_of(std::string_view text) {
    auto layout = MigLayout::parse(text, "layout");
    EXPECT_TRUE(layout) << layout.error().text();
    return layout ? *layout : MigLayout{};
}

MigGpuState gpu(unsigned minor, bool mig) {
    MigGpuState state;
    state.gpu = GpuIdentity{minor, "0000:0" + std::to_string(minor) + ":00.0", {}};
    state.model = "NVIDIA H100 80GB HBM3";
    state.mig = mig;
    state.mig_after = mig;
    return state;
}

GiState gi(unsigned id, std::string profile, std::vector<std::string> cis) {
    GiState made{id, std::move(profile), {}};
    for (size_t i = 0; i < cis.size(); ++i) {
        made.cis.push_back(CiState{static_cast<unsigned>(i), cis[i]});
    }
    return made;
}

std::vector<Kind> kinds(const GpuApplyPlan& plan) {
    std::vector<Kind> made;
    for (const ApplyStep& step : plan.steps) {
        made.push_back(step.kind);
    }
    return made;
}

} // namespace

TEST(MigApplyPlan, AGpuAsDeclaredIsLeftAloneWhateverItsIds) {
    MigLayout layout = layout_of("gpu=* mig=on gi=3g.40gb/1c.3g.40gb*2 gi=1g.10gb\n");
    MigGpuState state = gpu(0, true);
    state.gis = {gi(9, "1g.10gb", {"1g.10gb"}), gi(2, "3g.40gb", {"1c.3g.40gb", "1c.3g.40gb"})};
    state.pids = {4242}; // busy, but nothing to change
    auto plans = plan_apply({state}, layout, {});
    ASSERT_EQ(plans.size(), 1u);
    EXPECT_EQ(plans[0].verdict, Verdict::AsDeclared);
    EXPECT_TRUE(plans[0].steps.empty());
}

TEST(MigApplyPlan, ACiOfASuffixedGiMatchesInEitherSpelling) {
    MigGpuState state = gpu(0, true);
    state.gis = {gi(1, "4g.96gb+gfx", {"1c.4g.96gb", "1c.4g.96gb", "2c.4g.96gb"})};
    auto plans = plan_apply(
        {state}, layout_of("gpu=0 mig=on gi=4g.96gb+gfx/1c.4g.96gb+gfx*2,2c.4g.96gb\n"), {});
    EXPECT_EQ(plans[0].verdict, Verdict::AsDeclared);
    auto other = plan_apply({state}, layout_of("gpu=0 mig=on gi=4g.96gb+gfx/1c.4g.96gb*4\n"), {});
    EXPECT_EQ(other[0].verdict, Verdict::Change);
}

TEST(MigApplyPlan, AGpuWithoutMigIsAsDeclaredOffAndDoesNotFitOn) {
    MigGpuState plain = gpu(1, false);
    plain.mig_capable = false;
    plain.model = "NVIDIA RTX A6000";
    auto off = plan_apply({plain}, layout_of("gpu=* mig=off\n"), {});
    EXPECT_EQ(off[0].verdict, Verdict::AsDeclared);
    auto on = plan_apply({plain}, layout_of("gpu=* mig=on gi=1g.10gb\n"), {});
    EXPECT_EQ(on[0].verdict, Verdict::DoesNotFit);
    EXPECT_NE(on[0].problem.find("has no MIG"), std::string::npos) << on[0].problem;
    EXPECT_TRUE(on[0].steps.empty());
}

TEST(MigApplyPlan, AChangedLayoutClearsTheGpuThenCreatesLargestFirst) {
    MigLayout layout = layout_of("gpu=0 mig=on gi=1g.10gb gi=3g.40gb/1c.3g.40gb*2\n");
    MigGpuState state = gpu(0, true);
    state.gis = {gi(7, "1g.10gb", {"1g.10gb"}), gi(8, "1g.10gb", {"1g.10gb"})};
    auto plans = plan_apply({state}, layout, {});
    ASSERT_EQ(plans.size(), 1u);
    EXPECT_EQ(plans[0].verdict, Verdict::Change);
    EXPECT_EQ(kinds(plans[0]), (std::vector<Kind>{Kind::DestroyCi, Kind::DestroyGi, Kind::DestroyCi,
                                                  Kind::DestroyGi, Kind::CreateGi, Kind::CreateCi,
                                                  Kind::CreateCi, Kind::CreateGi, Kind::CreateCi}));
    EXPECT_EQ(plans[0].steps[0], (ApplyStep{Kind::DestroyCi, 7, 0, {}, false, {}}));
    EXPECT_EQ(plans[0].steps[3], (ApplyStep{Kind::DestroyGi, 8, 0, {}, false, {}}));
    EXPECT_EQ(plans[0].steps[4].profile, "3g.40gb");
    EXPECT_EQ(plans[0].steps[5], (ApplyStep{Kind::CreateCi, 0, 0, "1c.3g.40gb", false, {}}));
    EXPECT_EQ(plans[0].steps[7], (ApplyStep{Kind::CreateGi, 1, 0, "1g.10gb", false, {}}));
    EXPECT_FALSE(plans[0].reset_pending);
}

TEST(MigApplyPlan, AGpuNoLineNamesIsNotTouched) {
    MigLayout layout = layout_of("gpu=1 mig=off\n");
    MigGpuState state = gpu(0, true);
    state.gis = {gi(7, "1g.10gb", {"1g.10gb"})};
    auto plans = plan_apply({state, gpu(1, false)}, layout, {});
    ASSERT_EQ(plans.size(), 2u);
    EXPECT_EQ(plans[0].verdict, Verdict::NotDeclared);
    EXPECT_TRUE(plans[0].steps.empty());
    EXPECT_EQ(plans[1].verdict, Verdict::AsDeclared);
}

TEST(MigApplyPlan, ABusyGpuIsRefusedUnlessForced) {
    MigLayout layout = layout_of("gpu=* mig=on gi=7g.80gb\n");
    MigGpuState state = gpu(0, true);
    state.gis = {gi(7, "1g.10gb", {"1g.10gb"})};
    state.pids = {100, 200};
    auto refused = plan_apply({state}, layout, {});
    EXPECT_EQ(refused[0].verdict, Verdict::Busy);
    EXPECT_TRUE(refused[0].steps.empty());
    EXPECT_EQ(refused[0].pids, (std::vector<unsigned>{100, 200}));

    auto forced = plan_apply({state}, layout, ApplyOptions{.force = true});
    EXPECT_EQ(forced[0].verdict, Verdict::Change);
    EXPECT_EQ(kinds(forced[0]), (std::vector<Kind>{Kind::DestroyCi, Kind::DestroyGi, Kind::CreateGi,
                                                   Kind::CreateCi}));
}

// The driver refuses to destroy an instance a process uses (nvml.h,
// nvmlComputeInstanceDestroy and nvmlGpuInstanceDestroy: NVML_ERROR_IN_USE).
// Forced, the instances with processes are destroyed first, so that this
// refusal comes before any idle instance is gone, not after.
TEST(MigApplyPlan, ForcedTheInstancesInUseAreDestroyedFirst) {
    MigLayout layout = layout_of("gpu=* mig=on gi=7g.80gb\n");
    MigGpuState state = gpu(0, true);
    state.gis = {gi(7, "1g.10gb", {"1g.10gb"}), gi(8, "2g.20gb", {"1c.2g.20gb", "1c.2g.20gb"})};
    state.gis[1].cis[1].id = 1;
    state.pids = {100};
    state.used = {{8, 1}};
    auto forced = plan_apply({state}, layout, ApplyOptions{.force = true});
    ASSERT_EQ(forced[0].verdict, Verdict::Change);
    ASSERT_GE(forced[0].steps.size(), 5u);
    EXPECT_EQ(forced[0].steps[0].kind, Kind::DestroyCi);
    EXPECT_EQ(forced[0].steps[0].gi, 8u);
    EXPECT_EQ(forced[0].steps[0].ci, 1u);
    EXPECT_EQ(forced[0].steps[1].kind, Kind::DestroyCi);
    EXPECT_EQ(forced[0].steps[1].gi, 8u);
    EXPECT_EQ(forced[0].steps[2].kind, Kind::DestroyGi);
    EXPECT_EQ(forced[0].steps[2].gi, 8u);
    EXPECT_EQ(forced[0].steps[3].gi, 7u);
}

TEST(MigApplyPlan, AModeChangeWaitsForAResetUnlessOneIsAllowed) {
    MigLayout layout = layout_of("gpu=0 mig=on gi=1g.10gb*2\ngpu=1 mig=off\n");
    MigGpuState off = gpu(0, false);
    MigGpuState on = gpu(1, true);
    on.gis = {gi(1, "7g.80gb", {"7g.80gb"})};

    auto waiting = plan_apply({off, on}, layout, {});
    EXPECT_EQ(waiting[0].verdict, Verdict::Change);
    EXPECT_EQ(kinds(waiting[0]), (std::vector<Kind>{Kind::SetMigMode}));
    EXPECT_TRUE(waiting[0].steps[0].mig);
    EXPECT_TRUE(waiting[0].reset_pending);
    EXPECT_EQ(kinds(waiting[1]),
              (std::vector<Kind>{Kind::DestroyCi, Kind::DestroyGi, Kind::SetMigMode}));
    EXPECT_FALSE(waiting[1].steps[2].mig);
    EXPECT_TRUE(waiting[1].reset_pending);

    // The mode is already set for the next reset: nothing left but the reset.
    off.mig_after = true;
    auto again = plan_apply({off}, layout, {});
    EXPECT_EQ(again[0].verdict, Verdict::ResetPending);
    EXPECT_TRUE(again[0].steps.empty());

    auto reset = plan_apply({off}, layout, ApplyOptions{.reset_if_needed = true});
    EXPECT_EQ(reset[0].verdict, Verdict::Change);
    EXPECT_EQ(kinds(reset[0]), (std::vector<Kind>{Kind::ResetGpu, Kind::CreateGi, Kind::CreateCi,
                                                  Kind::CreateGi, Kind::CreateCi}));
    EXPECT_FALSE(reset[0].reset_pending);
}

TEST(MigApplyPlan, ABusyGpuIsNeverReset) {
    MigLayout layout = layout_of("gpu=0 mig=on\n");
    MigGpuState off = gpu(0, false);
    off.pids = {77};
    auto plans = plan_apply({off}, layout, ApplyOptions{.force = true, .reset_if_needed = true});
    EXPECT_EQ(kinds(plans[0]), (std::vector<Kind>{Kind::SetMigMode}));
    EXPECT_TRUE(plans[0].reset_pending);
}

TEST(MigApplyPlan, AGpuWhoseModeIsUnknownIsNotChanged) {
    MigLayout layout = layout_of("gpu=* mig=off\n");
    MigGpuState state = gpu(0, false);
    state.mig.reset();
    auto plans = plan_apply({state}, layout, {});
    EXPECT_EQ(plans[0].verdict, Verdict::Unknown);
    EXPECT_TRUE(plans[0].steps.empty());
}

TEST(MigApplyPlan, OnlyTheCiProfilesMatterNotTheirOrder) {
    MigLayout layout = layout_of("gpu=* mig=on gi=3g.40gb/2c.3g.40gb,1c.3g.40gb\n");
    MigGpuState state = gpu(0, true);
    state.gis = {gi(1, "3g.40gb", {"1c.3g.40gb", "2c.3g.40gb"})};
    EXPECT_TRUE(matches_layout(state, *layout.for_gpu(state.gpu, state.model)));
    state.gis[0].cis.pop_back();
    EXPECT_FALSE(matches_layout(state, *layout.for_gpu(state.gpu, state.model)));
}

} // namespace gpuinit::mig

namespace gpuinit::mig {

TEST(MigApplyPlan, PlacesEveryGiWhereTheRestStillFit) {
    // nvidia-smi mig -lgipp of the H100 capture, for the profiles used.
    std::vector<GiPlacements> h100 = {{"1g.10gb", 1, {0, 1, 2, 3, 4, 5, 6}},
                                      {"2g.20gb", 2, {0, 2, 4}},
                                      {"3g.40gb", 4, {0, 4}},
                                      {"7g.80gb", 8, {0}}};
    MigLayout layout = layout_of("gpu=* mig=on gi=1g.10gb*2 gi=2g.20gb gi=3g.40gb\n");
    const GpuLayout& want = layout.entries()[0].layout;
    auto starts = place_gis(want.gis, h100);
    ASSERT_TRUE(starts);
    EXPECT_EQ(*starts, (std::vector<unsigned>{4, 0, 2, 3})); // 3g, 2g, 1g, 1g
    EXPECT_FALSE(
        place_gis(layout_of("gpu=* mig=on gi=7g.80gb gi=1g.10gb\n").entries()[0].layout.gis, h100));
    EXPECT_FALSE(place_gis(layout_of("gpu=* mig=on gi=4g.40gb\n").entries()[0].layout.gis, h100));

    MigGpuState state = gpu(0, true);
    state.placements = h100;
    auto plans = plan_apply({state}, layout, {});
    ASSERT_EQ(plans[0].verdict, Verdict::Change);
    EXPECT_EQ(plans[0].steps[0].start, 4u);
}

} // namespace gpuinit::mig
