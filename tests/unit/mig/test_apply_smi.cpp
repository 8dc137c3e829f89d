// gpu-mig apply's MigControl over nvidia-smi, run against the stand-in
// nvidia-smi (tests/fixture/standin_nvidia_smi.c): what each call leaves in
// the stand-in driver's state, the ids read back from what it prints, and
// a create that does not fit failing as one line.
#include "gpuinit/mig/apply_smi.hpp"
#include "mig_standin.h"
#include "temp_dir.hpp"

#include <cerrno>
#include <cstdlib>
#include <gtest/gtest.h>

namespace gpuinit::mig {

namespace {

class SmiControl : public ::testing::Test {
  protected:
    void SetUp() override {
        setenv("GPUINIT_STANDIN_MIG", dir_.path().c_str(), 1);
        setenv("GPUINIT_STANDIN_GPUS", "2", 1);
        save(0, true);
        save(1, false);
    }
    void TearDown() override {
        unsetenv("GPUINIT_STANDIN_MIG");
        unsetenv("GPUINIT_STANDIN_GPUS");
    }

    void save(unsigned index, bool mig) {
        standin_gpu state;
        standin_h100(&state, mig ? 1 : 0);
        ASSERT_EQ(standin_save(&state, state_path(index).c_str()), 0);
    }
    std::string state_path(unsigned index) const { return dir_ / ("gpu" + std::to_string(index)); }
    standin_gpu state(unsigned index) const {
        standin_gpu gpu;
        EXPECT_EQ(standin_load(&gpu, state_path(index).c_str()), 0);
        return gpu;
    }

    // nvidia-smi's order is not the minors': GPU index 0 is minor 3 here.
    GpuIdentity gpu0_{3, "0000:17:00.0", "GPU-00000000-0000-0000-0000-000000000000"};
    GpuIdentity gpu1_{0, "0000:27:00.0", "GPU-11111111-1111-1111-1111-111111111111"};
    SmiMigControl control_{STANDIN_NVIDIA_SMI, {gpu0_, gpu1_}};
    gpuinit::testing::TempDir dir_;
};

} // namespace

TEST(CiProfileId, IsNvmlsSliceNumbering) {
    EXPECT_EQ(ci_profile_id("1c.3g.40gb"), 0u);
    EXPECT_EQ(ci_profile_id("2c.3g.40gb"), 1u);
    EXPECT_EQ(ci_profile_id("3g.40gb"), 2u);
    EXPECT_EQ(ci_profile_id("4g.40gb"), 3u);
    EXPECT_EQ(ci_profile_id("7g.80gb"), 4u);
    EXPECT_EQ(ci_profile_id("1g.10gb+me"), 0u);
    EXPECT_EQ(ci_profile_id("5c.7g.80gb"), std::nullopt);
    EXPECT_EQ(ci_profile_id("c.3g.40gb"), std::nullopt);
    EXPECT_EQ(ci_profile_id("3x.40gb"), std::nullopt);
}

// The ids come from what the driver printed: the stand-in, as NVIDIA's,
// gives a 3g.40gb at 4 GI id 2 and a 1g.10gb at 6 GI id 13, not 1 and 2.
TEST_F(SmiControl, CreatesAndDestroysWithTheDriversIds) {
    auto gi = control_.create_gi(gpu0_, "3g.40gb", 4u);
    ASSERT_TRUE(gi) << gi.error().text();
    auto small = control_.create_gi(gpu0_, "1g.10gb", std::nullopt);
    ASSERT_TRUE(small) << small.error().text();
    EXPECT_NE(*gi, *small);
    standin_gpu now = state(0);
    ASSERT_TRUE(now.gis[*gi].used);
    EXPECT_STREQ(now.gis[*gi].profile->name, "3g.40gb");
    EXPECT_EQ(now.gis[*gi].start, 4u);
    EXPECT_EQ(*gi, standin_gi_id(4, 4));
    ASSERT_TRUE(now.gis[*small].used);
    EXPECT_STREQ(now.gis[*small].profile->name, "1g.10gb");

    auto first = control_.create_ci(gpu0_, *gi, "1c.3g.40gb");
    ASSERT_TRUE(first) << first.error().text();
    auto second = control_.create_ci(gpu0_, *gi, "2c.3g.40gb");
    ASSERT_TRUE(second) << second.error().text();
    EXPECT_NE(*first, *second);
    now = state(0);
    ASSERT_TRUE(now.gis[*gi].cis[*first].used);
    EXPECT_EQ(now.gis[*gi].cis[*first].slices, 1u);
    ASSERT_TRUE(now.gis[*gi].cis[*second].used);
    EXPECT_EQ(now.gis[*gi].cis[*second].slices, 2u);
    EXPECT_FALSE(state(1).gis[*gi].used); // index 1 untouched

    ASSERT_TRUE(control_.destroy_ci(gpu0_, *gi, *first));
    now = state(0);
    EXPECT_FALSE(now.gis[*gi].cis[*first].used);
    EXPECT_TRUE(now.gis[*gi].cis[*second].used);
    ASSERT_TRUE(control_.destroy_ci(gpu0_, *gi, *second));
    ASSERT_TRUE(control_.destroy_gi(gpu0_, *gi));
    now = state(0);
    EXPECT_FALSE(now.gis[*gi].used);
    EXPECT_TRUE(now.gis[*small].used);
}

TEST_F(SmiControl, SetsTheModeAndResets) {
    ASSERT_TRUE(control_.set_mig_mode(gpu1_, true));
    standin_gpu now = state(1);
    EXPECT_FALSE(now.mig);
    EXPECT_TRUE(now.mig_pending);
    ASSERT_TRUE(control_.reset(gpu1_));
    EXPECT_TRUE(state(1).mig);
    EXPECT_TRUE(state(0).mig); // index 0 untouched
}

TEST_F(SmiControl, AGpuNvidiaSmiDoesNotListIsRefused) {
    GpuIdentity other{5, "0000:99:00.0", "GPU-22222222-2222-2222-2222-222222222222"};
    auto gi = control_.create_gi(other, "1g.10gb", std::nullopt);
    ASSERT_FALSE(gi);
    EXPECT_EQ(gi.error().code, ENODEV);
}

// A create that does not fit fails as nvidia-smi's does, and apply reports
// it in one line: the GPU, the step, the driver's reason, the layout line.
TEST_F(SmiControl, ACreateThatDoesNotFitIsOneLineNamingGpuStepAndLayoutLine) {
    GpuLayout layout;
    layout.mig = true;
    layout.origin = "/etc/gpu-mig-layout.conf:3";
    GpuApplyPlan plan;
    plan.gpu = gpu0_;
    plan.verdict = GpuApplyPlan::Verdict::Change;
    plan.layout = &layout;
    ApplyStep big;
    big.kind = ApplyStep::Kind::CreateGi;
    big.profile = "4g.40gb";
    big.start = 0;
    ApplyStep whole = big;
    whole.profile = "7g.80gb";
    whole.start = std::nullopt;
    plan.steps = {big, whole};
    auto outcomes = execute_apply({plan}, control_);
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].steps_done, 1u);
    ASSERT_TRUE(outcomes[0].failure);
    const std::string& message = outcomes[0].failure->message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_TRUE(message.starts_with("GPU 3 (0000:17:00.0): ")) << message;
    EXPECT_NE(message.find("7g.80gb"), std::string::npos) << message;
    EXPECT_NE(message.find("Insufficient Resources"), std::string::npos) << message;
    EXPECT_NE(message.find("/etc/gpu-mig-layout.conf:3"), std::string::npos) << message;
    standin_gpu now = state(0);
    unsigned used = 0;
    for (const standin_gi& gi : now.gis) {
        used += gi.used ? 1u : 0u;
    }
    EXPECT_EQ(used, 1u); // the 4g.40gb made before it stays
}

} // namespace gpuinit::mig
