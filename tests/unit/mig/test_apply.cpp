// gpu-mig apply's effects over the stand-in driver (tests/fixture/
// mig_standin.h): a changed layout converges in one run and a second run
// changes nothing, a GPU with a process is not touched, a layout that does
// not fit fails as the driver refuses it, naming the GPU and the line.
#include "gpuinit/mig/apply.hpp"
#include "standin_control.hpp"

#include <gtest/gtest.h>

namespace gpuinit::mig {

namespace {

using testing::StandinControl;

MigLayout layout_of(std::string_view text) {
    auto layout = MigLayout::parse(text, "/etc/gpu-mig-layout.conf");
    EXPECT_TRUE(layout) << layout.error().text();
    return layout ? *layout : MigLayout{};
}

std::vector<GpuApplyOutcome> run(StandinControl& control, const MigLayout& layout,
                                 ApplyOptions options = {}) {
    auto gpus = control.gpus();
    EXPECT_TRUE(gpus);
    return execute_apply(plan_apply(*gpus, layout, options), control);
}

} // namespace

TEST(MigApply, AChangedLayoutConvergesInOneRunAndASecondRunDoesNothing) {
    StandinControl control(2);
    // What an admin made by hand: seven 1g.10gb on both GPUs.
    for (unsigned minor = 0; minor < 2; ++minor) {
        for (int i = 0; i < 7; ++i) {
            unsigned gi = 0;
            unsigned ci = 0;
            ASSERT_EQ(standin_create_gi(&control.gpu(minor), 19, nullptr, &gi), STANDIN_SUCCESS);
            ASSERT_EQ(standin_create_ci(&control.gpu(minor), gi, 1, &ci), STANDIN_SUCCESS);
        }
    }
    MigLayout layout = layout_of("gpu=* mig=on gi=1g.10gb*7\n"
                                 "gpu=1 mig=on gi=1g.10gb gi=3g.40gb/1c.3g.40gb*2\n");
    auto first = run(control, layout);
    ASSERT_EQ(first.size(), 2u);
    EXPECT_EQ(first[0].plan.verdict, GpuApplyPlan::Verdict::AsDeclared);
    EXPECT_EQ(first[1].plan.verdict, GpuApplyPlan::Verdict::Change);
    EXPECT_FALSE(first[1].failure) << first[1].failure->text();
    EXPECT_EQ(first[1].steps_done, first[1].plan.steps.size());
    ASSERT_EQ(first[1].created.size(), 3u);
    EXPECT_EQ(first[1].created[0].profile, "1c.3g.40gb");

    auto gpus = control.gpus();
    ASSERT_TRUE(gpus);
    EXPECT_TRUE(matches_layout((*gpus)[1], *layout.for_gpu((*gpus)[1].gpu, (*gpus)[1].model)));

    size_t changes = control.changes;
    auto second = run(control, layout);
    for (const GpuApplyOutcome& outcome : second) {
        EXPECT_EQ(outcome.plan.verdict, GpuApplyPlan::Verdict::AsDeclared);
    }
    EXPECT_EQ(control.changes, changes);
}

TEST(MigApply, AGpuWithAProcessIsNotTouched) {
    StandinControl control(1);
    unsigned gi = 0;
    unsigned ci = 0;
    ASSERT_EQ(standin_create_gi(&control.gpu(0), 0, nullptr, &gi), STANDIN_SUCCESS);
    ASSERT_EQ(standin_create_ci(&control.gpu(0), gi, 7, &ci), STANDIN_SUCCESS);
    control.pids[0] = {4321};
    auto outcomes = run(control, layout_of("gpu=0 mig=on gi=1g.10gb*7\n"));
    EXPECT_EQ(outcomes[0].plan.verdict, GpuApplyPlan::Verdict::Busy);
    EXPECT_EQ(outcomes[0].plan.pids, (std::vector<unsigned>{4321}));
    EXPECT_EQ(control.changes, 0u);
    EXPECT_TRUE(control.gpu(0).gis[0].used);
}

TEST(MigApply, ALayoutThatDoesNotFitFailsAsTheDriverRefusesIt) {
    StandinControl control(1);
    control.with_placements = false; // else the plan refuses it first (below)
    // 4g.40gb and 3g.40gb take all eight memory slices: no room for a 1g.
    auto outcomes = run(control, layout_of("gpu=0 mig=on gi=4g.40gb gi=3g.40gb gi=1g.10gb\n"));
    ASSERT_TRUE(outcomes[0].failure);
    std::string said = outcomes[0].failure->text();
    EXPECT_NE(said.find("GPU 0 (0000:10:00.0): creating a 1g.10gb GPU instance failed: "
                        "insufficient resources"),
              std::string::npos)
        << said;
    EXPECT_NE(said.find("/etc/gpu-mig-layout.conf:1"), std::string::npos) << said;
    EXPECT_EQ(said.find('\n'), std::string::npos);
    EXPECT_LT(outcomes[0].steps_done, outcomes[0].plan.steps.size());
}

TEST(MigApply, AModeChangeIsMadeInOneRunOnlyWhenAResetIsAllowed) {
    StandinControl control(1);
    standin_h100(&control.gpu(0), 0);
    MigLayout layout = layout_of("gpu=0 mig=on gi=3g.40gb*2\n");
    auto waiting = run(control, layout);
    EXPECT_TRUE(waiting[0].plan.reset_pending);
    EXPECT_EQ(control.gpu(0).mig, 0);
    EXPECT_EQ(control.gpu(0).mig_pending, 1);

    auto again = run(control, layout);
    EXPECT_EQ(again[0].plan.verdict, GpuApplyPlan::Verdict::ResetPending);

    auto reset = run(control, layout, ApplyOptions{.reset_if_needed = true});
    EXPECT_FALSE(reset[0].failure);
    EXPECT_EQ(control.gpu(0).mig, 1);
    EXPECT_EQ(reset[0].created.size(), 2u);
    // The driver's ids (no placements were known before the reset): the
    // first 3g.40gb takes GI 1, at 4, the second GI 2 (mig_standin.h).
    EXPECT_EQ(reset[0].created[0].gi, 1u);
    EXPECT_EQ(reset[0].created[1].gi, 2u);
    EXPECT_EQ(run(control, layout)[0].plan.verdict, GpuApplyPlan::Verdict::AsDeclared);
}

} // namespace gpuinit::mig

namespace gpuinit::mig {

TEST(MigApply, GivesEveryGpuInstanceAPlacementThatLeavesRoomForTheRest) {
    // Largest first, the driver's own choice (mig_standin.h) puts the
    // 2g.20gbs at 4 and 0 and the 1g.10gbs at 6 and 2, where the 1g.20gb
    // then finds no room; placed, all fit (2g 0, 2g 2, 1g 4, 1g 5, 1g.20gb 6).
    MigLayout layout = layout_of("gpu=0 mig=on gi=2g.20gb*2 gi=1g.10gb*2 gi=1g.20gb\n");
    StandinControl unplaced(1);
    unplaced.with_placements = false;
    auto failed = run(unplaced, layout);
    ASSERT_TRUE(failed[0].failure);
    EXPECT_NE(failed[0].failure->text().find("insufficient resources"), std::string::npos);

    StandinControl control(1);
    auto outcomes = run(control, layout);
    EXPECT_FALSE(outcomes[0].failure) << outcomes[0].failure->text();
    EXPECT_EQ(outcomes[0].created.size(), 5u);
    EXPECT_EQ(run(control, layout)[0].plan.verdict, GpuApplyPlan::Verdict::AsDeclared);
}

TEST(MigApply, ALayoutThatFitsNoWayIsRefusedBeforeAnythingIsDestroyed) {
    StandinControl control(1);
    unsigned gi = 0;
    unsigned ci = 0;
    ASSERT_EQ(standin_create_gi(&control.gpu(0), 19, nullptr, &gi), STANDIN_SUCCESS);
    ASSERT_EQ(standin_create_ci(&control.gpu(0), gi, 1, &ci), STANDIN_SUCCESS);
    auto outcomes = run(control, layout_of("gpu=0 mig=on gi=7g.80gb gi=1g.10gb\n"));
    EXPECT_EQ(outcomes[0].plan.verdict, GpuApplyPlan::Verdict::DoesNotFit);
    EXPECT_EQ(control.changes, 0u);
    EXPECT_TRUE(control.gpu(0).gis[gi].used);
}

} // namespace gpuinit::mig
