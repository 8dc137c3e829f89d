// gpu-mig apply's MigControl over NVML (apply_nvml.hpp), loaded from the
// stand-in NVML (tests/fixture/standin_nvml.c) by path as gpuinit loads the
// driver's: what it reads back after creating instances, a GPU with MIG off
// and one with a process, a create NVML refuses, and a whole apply through
// it. The names NVML's profiles get are checked against the H100 capture's
// nvidia-smi mig -lgip (tests/fixture/captures/h100-580.159.04).
#include "gpuinit/mig/apply_nvml.hpp"
#include "gpuinit/mig/apply_smi.hpp"
#include "machine_fixture.hpp"
#include "mig_standin.h"
#include "temp_dir.hpp"

#include <cerrno>
#include <cstdlib>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuinit::mig {

namespace {

// The H100 capture: -q's FB memory total and -lgip's memory per profile.
constexpr uint64_t kH100Bytes = uint64_t{81559} << 20;

TEST(NvmlProfileNames, AreNvidiaSmisForTheH100Capture) {
    EXPECT_EQ(nvml_gi_profile_name(0, 9984, kH100Bytes), "1g.10gb");       // 1_SLICE, id 19
    EXPECT_EQ(nvml_gi_profile_name(7, 9984, kH100Bytes), "1g.10gb+me");    // 1_SLICE_REV1, 20
    EXPECT_EQ(nvml_gi_profile_name(9, 20096, kH100Bytes), "1g.20gb");      // 1_SLICE_REV2, 15
    EXPECT_EQ(nvml_gi_profile_name(1, 20096, kH100Bytes), "2g.20gb");      // 14
    EXPECT_EQ(nvml_gi_profile_name(2, 40448, kH100Bytes), "3g.40gb");      // 9
    EXPECT_EQ(nvml_gi_profile_name(3, 40448, kH100Bytes), "4g.40gb");      // 5
    EXPECT_EQ(nvml_gi_profile_name(4, 81152, kH100Bytes), "7g.80gb");      // 0
    EXPECT_EQ(nvml_gi_profile_name(0x0D, 9984, kH100Bytes), "1g.10gb-me"); // NO_ME
    EXPECT_EQ(nvml_gi_profile_name(0x0F, 9984, kH100Bytes), "1g.10gb+me.all");
    EXPECT_EQ(nvml_gi_profile_name(0x0B, 20096, kH100Bytes), "2g.20gb+gfx");
    EXPECT_EQ(nvml_gi_profile_name(0x40, 9984, kH100Bytes), std::nullopt);
    // An A100-PCIE-40GB (40536 MiB): 1g.5gb's 4864 MiB.
    EXPECT_EQ(nvml_gi_profile_name(0, 4864, uint64_t{40536} << 20), "1g.5gb");
    EXPECT_EQ(mig_memory_gb(0, 4864), 0u);
}

TEST(NvmlProfileNames, ComputeInstancesAreNamedInTheirGi) {
    EXPECT_EQ(nvml_ci_profile_name(NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, "3g.40gb", 3),
              "1c.3g.40gb");
    EXPECT_EQ(nvml_ci_profile_name(NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, "3g.40gb", 3),
              "2c.3g.40gb");
    EXPECT_EQ(nvml_ci_profile_name(NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, "3g.40gb", 3), "3g.40gb");
    EXPECT_EQ(nvml_ci_profile_name(NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, "3g.40gb", 3),
              std::nullopt);
    EXPECT_EQ(nvml_ci_profile_name(NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, "1g.10gb+me", 1),
              "1g.10gb+me");
}

// A reset_through that records its calls.
class ResetRecorder : public MigControl {
  public:
    std::vector<std::string> resets;
    Result<std::vector<MigGpuState>> gpus() override { return error("not here"); }
    Status destroy_ci(const GpuIdentity&, unsigned, unsigned) override { return {}; }
    Status destroy_gi(const GpuIdentity&, unsigned) override { return {}; }
    Status set_mig_mode(const GpuIdentity&, bool) override { return {}; }
    Status reset(const GpuIdentity& gpu) override {
        resets.push_back(gpu.uuid);
        return {};
    }
    Result<unsigned> create_gi(const GpuIdentity&, std::string_view,
                               std::optional<unsigned>) override {
        return 0u;
    }
    Result<unsigned> create_ci(const GpuIdentity&, unsigned, std::string_view) override {
        return 0u;
    }
};

class NvmlControl : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!nvml_supported()) {
            GTEST_SKIP() << "SKIPPED LOUDLY: this static build cannot dlopen NVML; the NVML "
                            "MigControl is tested in the dynamic build";
        }
        setenv("GPUINIT_STANDIN_MIG", dir_.path().c_str(), 1);
        setenv("GPUINIT_STANDIN_GPUS", "2", 1);
        unsetenv("GPUINIT_STANDIN_PIDS");
        unsetenv("GPUINIT_STANDIN_NVML_ACTIVATION");
        unsetenv("GPUINIT_STANDIN_CAPS");
        standin_gpu gpu;
        standin_h100(&gpu, 1);
        ASSERT_EQ(standin_save(&gpu, (dir_ / "gpu0").c_str()), 0);
        standin_h100(&gpu, 0);
        ASSERT_EQ(standin_save(&gpu, (dir_ / "gpu1").c_str()), 0);
        open();
    }
    void TearDown() override {
        control_.reset();
        unsetenv("GPUINIT_STANDIN_MIG");
        unsetenv("GPUINIT_STANDIN_GPUS");
        unsetenv("GPUINIT_STANDIN_PIDS");
        unsetenv("GPUINIT_STANDIN_NVML_ACTIVATION");
    }

    void open(MigControl* reset_through = nullptr) {
        control_.reset();
        auto opened = open_nvml_mig_control(diagnostics_, STANDIN_NVML_LIBRARY, reset_through);
        ASSERT_TRUE(opened) << opened.error().message;
        control_ = std::move(*opened);
    }

    std::vector<MigGpuState> gpus() {
        auto read = control_->gpus();
        EXPECT_TRUE(read) << read.error().message;
        return read ? *read : std::vector<MigGpuState>{};
    }

    standin_gpu state(unsigned index) {
        standin_gpu gpu;
        EXPECT_EQ(standin_load(&gpu, (dir_ / ("gpu" + std::to_string(index))).c_str()), 0);
        return gpu;
    }

    static GpuIdentity gpu0() { return {0, "0000:17:00.0", testing::fake_uuid(0)}; }
    static GpuIdentity gpu1() { return {1, "0000:27:00.0", testing::fake_uuid(1)}; }

    testing::TempDir dir_;
    Diagnostics diagnostics_;
    std::unique_ptr<MigControl> control_;
};

TEST_F(NvmlControl, ReadsBackTheInstancesItCreated) {
    auto gi = control_->create_gi(gpu0(), "3g.40gb", 4);
    ASSERT_TRUE(gi) << gi.error().message;
    EXPECT_EQ(*gi, 1u); // the half at 4, as the driver numbers it
    auto first = control_->create_ci(gpu0(), *gi, "1c.3g.40gb");
    auto second = control_->create_ci(gpu0(), *gi, "1c.3g.40gb");
    ASSERT_TRUE(first) << first.error().message;
    ASSERT_TRUE(second) << second.error().message;
    EXPECT_NE(*first, *second);
    auto small = control_->create_gi(gpu0(), "1g.10gb", std::nullopt);
    ASSERT_TRUE(small) << small.error().message;
    auto whole = control_->create_ci(gpu0(), *small, "1g.10gb");
    ASSERT_TRUE(whole) << whole.error().message;

    std::vector<MigGpuState> read = gpus();
    ASSERT_EQ(read.size(), 2u);
    const MigGpuState& on = read[0];
    EXPECT_EQ(on.gpu.minor, 0u);
    EXPECT_EQ(on.gpu.bdf, "0000:17:00.0");
    EXPECT_EQ(on.gpu.uuid, testing::fake_uuid(0));
    EXPECT_EQ(on.model, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(on.mig, true);
    EXPECT_EQ(on.mig_after, true);
    EXPECT_TRUE(on.pids.empty());
    ASSERT_EQ(on.gis.size(), 2u);
    // By GI id; the driver's state agrees.
    const GiState& half = on.gis[0].id == *gi ? on.gis[0] : on.gis[1];
    const GiState& eighth = on.gis[0].id == *gi ? on.gis[1] : on.gis[0];
    EXPECT_EQ(half.id, *gi);
    EXPECT_EQ(half.profile, "3g.40gb");
    ASSERT_EQ(half.cis.size(), 2u);
    EXPECT_EQ(half.cis[0].profile, "1c.3g.40gb");
    EXPECT_EQ(half.cis[1].profile, "1c.3g.40gb");
    EXPECT_EQ(eighth.id, *small);
    EXPECT_EQ(eighth.profile, "1g.10gb");
    ASSERT_EQ(eighth.cis.size(), 1u);
    EXPECT_EQ(eighth.cis[0].id, *whole);
    EXPECT_EQ(eighth.cis[0].profile, "1g.10gb");
    standin_gpu driver = state(0);
    EXPECT_TRUE(driver.gis[*gi].used);
    EXPECT_TRUE(driver.gis[*small].used);
    // Every profile of -lgip with its placements (-lgipp).
    std::vector<std::string> names;
    for (const GiPlacements& placements : on.placements) {
        names.push_back(placements.profile);
        if (placements.profile == "3g.40gb") {
            EXPECT_EQ(placements.size, 4u);
            EXPECT_EQ(placements.starts, (std::vector<unsigned>{0, 4}));
        }
    }
    EXPECT_EQ(names, (std::vector<std::string>{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb",
                                               "7g.80gb", "1g.10gb+me", "1g.20gb"}));

    const MigGpuState& off = read[1];
    EXPECT_EQ(off.gpu.minor, 1u);
    EXPECT_EQ(off.gpu.bdf, "0000:27:00.0");
    EXPECT_EQ(off.mig, false);
    EXPECT_TRUE(off.gis.empty());
    EXPECT_TRUE(off.placements.empty());

    // And destroys them.
    ASSERT_TRUE(control_->destroy_ci(gpu0(), *gi, *first));
    ASSERT_TRUE(control_->destroy_ci(gpu0(), *gi, *second));
    ASSERT_TRUE(control_->destroy_gi(gpu0(), *gi));
    EXPECT_FALSE(state(0).gis[*gi].used);
    Status gone = control_->destroy_gi(gpu0(), *gi);
    ASSERT_FALSE(gone);
    EXPECT_NE(gone.error().message.find("GPU 0 (0000:17:00.0)"), std::string::npos)
        << gone.error().message;
    EXPECT_NE(gone.error().message.find("Not Found"), std::string::npos) << gone.error().message;
}

TEST_F(NvmlControl, ACreateThatDoesNotFitFailsAsNvmlRefusesIt) {
    ASSERT_TRUE(control_->create_gi(gpu0(), "7g.80gb", std::nullopt));
    auto refused = control_->create_gi(gpu0(), "1g.10gb", std::nullopt);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ENOSPC);
    EXPECT_NE(refused.error().message.find("GPU 0 (0000:17:00.0)"), std::string::npos)
        << refused.error().message;
    EXPECT_NE(refused.error().message.find("Insufficient Resources"), std::string::npos)
        << refused.error().message;
    auto placed = control_->create_gi(gpu0(), "1g.10gb", 3);
    ASSERT_FALSE(placed);
    EXPECT_EQ(placed.error().code, ENOSPC) << placed.error().message;
    auto unknown = control_->create_gi(gpu0(), "5g.50gb", std::nullopt);
    ASSERT_FALSE(unknown);
    EXPECT_EQ(unknown.error().code, EINVAL);
    // MIG off: NVML says it is not supported.
    auto off = control_->create_gi(gpu1(), "1g.10gb", std::nullopt);
    ASSERT_FALSE(off);
    EXPECT_NE(off.error().message.find("GPU 1 (0000:27:00.0)"), std::string::npos)
        << off.error().message;
}

TEST_F(NvmlControl, ListsTheProcessesOnEachGpu) {
    const std::string self = std::to_string(getpid());
    setenv("GPUINIT_STANDIN_PIDS", ("1:" + self).c_str(), 1);
    std::vector<MigGpuState> read = gpus();
    ASSERT_EQ(read.size(), 2u);
    EXPECT_TRUE(read[0].pids.empty());
    EXPECT_EQ(read[1].pids, (std::vector<unsigned>{static_cast<unsigned>(getpid())}));
    EXPECT_EQ(read[1].mig, false);

    // A pid that is no live process here: the listing is not believed, and
    // the GPU is reported unknown, which apply leaves as it is.
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        _exit(0);
    }
    ASSERT_EQ(waitpid(child, nullptr, 0), child);
    setenv("GPUINIT_STANDIN_PIDS", ("0:" + std::to_string(child)).c_str(), 1);
    read = gpus();
    ASSERT_EQ(read.size(), 2u);
    EXPECT_EQ(read[0].mig, std::nullopt);
    EXPECT_TRUE(diagnostics_.count(Severity::Warning) > 0);
}

// A process with a graphics context keeps a GPU from changing as a
// compute one does: nvidia-smi -q -x lists both (type G and C), NVML's
// compute list only the second.
TEST_F(NvmlControl, AGraphicsProcessMakesAGpuBusyToo) {
    setenv("GPUINIT_STANDIN_GRAPHICS_PIDS", ("0:" + std::to_string(getpid())).c_str(), 1);
    std::vector<MigGpuState> read = gpus();
    unsetenv("GPUINIT_STANDIN_GRAPHICS_PIDS");
    ASSERT_EQ(read.size(), 2u);
    EXPECT_EQ(read[0].pids, (std::vector<unsigned>{static_cast<unsigned>(getpid())}));
    EXPECT_TRUE(read[1].pids.empty());
    auto layout = MigLayout::parse("gpu=* mig=on gi=1g.10gb*7\n", "/etc/gpu-mig-layout.conf");
    ASSERT_TRUE(layout) << layout.error().text();
    auto plans = plan_apply(read, *layout, ApplyOptions{});
    EXPECT_EQ(plans[0].verdict, GpuApplyPlan::Verdict::Busy) << verdict_name(plans[0].verdict);
}

TEST_F(NvmlControl, AModeChangeNeedsAResetOnlyWhenNvmlLeftItPending) {
    setenv("GPUINIT_STANDIN_NVML_ACTIVATION", "in-use", 1);
    ASSERT_TRUE(control_->set_mig_mode(gpu1(), true));
    std::vector<MigGpuState> read = gpus();
    ASSERT_EQ(read.size(), 2u);
    EXPECT_EQ(read[1].mig, false);
    EXPECT_EQ(read[1].mig_after, true);
    Status reset = control_->reset(gpu1());
    ASSERT_FALSE(reset);
    EXPECT_EQ(reset.error().code, ENOTSUP);
    EXPECT_NE(reset.error().message.find("nvidia-smi -r"), std::string::npos)
        << reset.error().message;

    ResetRecorder smi;
    open(&smi);
    ASSERT_TRUE(control_->reset(gpu1()));
    EXPECT_EQ(smi.resets, (std::vector<std::string>{testing::fake_uuid(1)}));

    // Activated at once: nothing to reset.
    unsetenv("GPUINIT_STANDIN_NVML_ACTIVATION");
    ASSERT_TRUE(control_->set_mig_mode(gpu1(), true));
    EXPECT_EQ(state(1).mig, 1);
    ASSERT_TRUE(control_->reset(gpu1()));
    EXPECT_EQ(smi.resets.size(), 1u);
}

TEST_F(NvmlControl, AnApplyConvergesInOneRunAndTheNextHasNothingToDo) {
    // GPU 0 has instances of another layout; GPU 1 has MIG off.
    ASSERT_TRUE(control_->create_gi(gpu0(), "7g.80gb", std::nullopt));
    auto layout = MigLayout::parse("gpu=0 mig=on gi=3g.40gb/1c.3g.40gb*2 gi=2g.20gb gi=1g.10gb*2\n"
                                   "gpu=1 mig=on gi=1g.10gb*7\n",
                                   "/etc/gpu-mig-layout.conf");
    ASSERT_TRUE(layout) << layout.error().message;
    ApplyOptions options;
    options.reset_if_needed = true;
    auto before = gpus();
    std::vector<GpuApplyPlan> plans = plan_apply(before, *layout, options);
    ASSERT_EQ(plans.size(), 2u);
    EXPECT_EQ(plans[0].verdict, GpuApplyPlan::Verdict::Change);
    EXPECT_EQ(plans[1].verdict, GpuApplyPlan::Verdict::Change);
    for (const GpuApplyOutcome& outcome : execute_apply(plans, *control_)) {
        EXPECT_FALSE(outcome.failure) << outcome.failure->message;
        EXPECT_EQ(outcome.steps_done, outcome.plan.steps.size());
    }
    auto after = gpus();
    ASSERT_EQ(after.size(), 2u);
    EXPECT_EQ(after[0].gis.size(), 4u);
    EXPECT_EQ(after[1].mig, true);
    EXPECT_EQ(after[1].gis.size(), 7u);
    for (const GpuApplyPlan& plan : plan_apply(after, *layout, options)) {
        EXPECT_EQ(plan.verdict, GpuApplyPlan::Verdict::AsDeclared)
            << gpu_subject(plan.gpu) << ": " << verdict_name(plan.verdict);
        EXPECT_TRUE(plan.steps.empty());
    }
    // What the driver holds, not only what NVML says back: 4 + 7 GIs.
    unsigned used = 0;
    for (unsigned index : {0u, 1u}) {
        standin_gpu driver = state(index);
        for (const standin_gi& gi : driver.gis) {
            used += gi.used ? 1 : 0;
        }
    }
    EXPECT_EQ(used, 11u);
}

TEST_F(NvmlControl, AModeChangeLeftPendingIsResetThroughNvidiaSmi) {
    // NVML cannot activate the mode (the GPU is in use as it tries); the
    // reset goes through nvidia-smi (the stand-in, over the same driver
    // state), and the instances are then created through NVML in the same
    // run.
    setenv("GPUINIT_STANDIN_NVML_ACTIVATION", "in-use", 1);
    SmiMigControl smi(STANDIN_NVIDIA_SMI, {gpu0(), gpu1()});
    open(&smi);
    auto layout = MigLayout::parse("gpu=1 mig=on gi=3g.40gb*2\n", "/etc/gpu-mig-layout.conf");
    ASSERT_TRUE(layout) << layout.error().message;
    ApplyOptions options;
    options.reset_if_needed = true;
    std::vector<GpuApplyPlan> plans = plan_apply(gpus(), *layout, options);
    ASSERT_EQ(plans.size(), 2u);
    ASSERT_EQ(plans[1].verdict, GpuApplyPlan::Verdict::Change);
    for (const GpuApplyOutcome& outcome : execute_apply(plans, *control_)) {
        EXPECT_FALSE(outcome.failure) << outcome.failure->message;
    }
    std::vector<MigGpuState> after = gpus();
    ASSERT_EQ(after.size(), 2u);
    EXPECT_EQ(after[1].mig, true);
    EXPECT_EQ(after[1].gis.size(), 2u);
    EXPECT_EQ(plan_apply(after, *layout, options)[1].verdict, GpuApplyPlan::Verdict::AsDeclared);
}

TEST_F(NvmlControl, ALibraryThatCannotLoadFailsSayingSo) {
    auto opened = open_nvml_mig_control(diagnostics_, dir_ / "libnvidia-ml.so.1");
    ASSERT_FALSE(opened);
    EXPECT_NE(opened.error().message.find("nvidia-smi"), std::string::npos)
        << opened.error().message;
}

} // namespace

} // namespace gpuinit::mig
