// The apply command's library side (apply_run.hpp) over stand-in GPUs: no
// layout changes nothing, --check and --dry-run plan without a change, a
// line that names no GPU is said, a reset is bracketed by the holder's
// release and hold, and a change the driver did not make is caught by
// reading the GPUs again. (The whole command with its sync: tests/root.)
#include "gpuinit/mig/apply_run.hpp"
#include "gpuinit/mig/nvml.hpp"
#include "standin_control.hpp"
#include "temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

namespace gpuinit::mig {

namespace {

using testing::StandinControl;

class Root {
  public:
    explicit Root(const std::string& layout = {}) {
        std::filesystem::create_directories(dir_ / "etc");
        if (!layout.empty()) {
            std::ofstream(dir_ / "etc/gpu-mig-layout.conf") << layout;
        }
        auto opened = Sysroot::open(dir_.path());
        EXPECT_TRUE(opened) << opened.error().text();
        root_.emplace(std::move(*opened));
    }
    const Sysroot& root() const { return *root_; }

  private:
    gpuinit::testing::TempDir dir_;
    std::optional<Sysroot> root_;
};

class CountingControl : public StandinControl {
  public:
    using StandinControl::StandinControl;
    size_t reads = 0;
    bool lose_creates = false; // reports a create it did not make
    Result<std::vector<MigGpuState>> gpus() override {
        ++reads;
        return StandinControl::gpus();
    }
    Result<unsigned> create_gi(const GpuIdentity& gpu, std::string_view profile,
                               std::optional<unsigned> start) override {
        if (lose_creates) {
            return 9u;
        }
        return StandinControl::create_gi(gpu, profile, start);
    }
    Result<unsigned> create_ci(const GpuIdentity& gpu, unsigned gi,
                               std::string_view profile) override {
        if (lose_creates) {
            return 0u;
        }
        return StandinControl::create_ci(gpu, gi, profile);
    }
};

class RecordingHolder : public ResetHolder {
  public:
    std::vector<std::string> calls;
    bool held = true;
    Result<bool> release(const GpuIdentity& gpu) override {
        calls.push_back("release " + std::to_string(gpu.minor));
        return held;
    }
    Status hold(const GpuIdentity& gpu) override {
        calls.push_back("hold " + std::to_string(gpu.minor));
        return {};
    }
};

ApplyRequest request(ApplyRequest::Mode mode) {
    ApplyRequest made;
    made.mode = mode;
    return made;
}

} // namespace

TEST(MigApplyRun, NoLayoutChangesNothingAndReadsNoGpu) {
    Root root;
    CountingControl control(1);
    auto report = run_apply(root.root(), request(ApplyRequest::Mode::Apply), &control, nullptr);
    ASSERT_TRUE(report) << report.error().text();
    EXPECT_EQ(report->status, ApplyReport::Status::NoLayout);
    EXPECT_EQ(control.reads, 0u);
    EXPECT_EQ(control.changes, 0u);
    EXPECT_FALSE(report->sync);
}

TEST(MigApplyRun, CheckAndDryRunPlanWithoutAChange) {
    Root root("gpu=* mig=on gi=1g.10gb*7\n");
    CountingControl control(2);
    for (auto mode : {ApplyRequest::Mode::Check, ApplyRequest::Mode::DryRun}) {
        auto report = run_apply(root.root(), request(mode), &control, nullptr);
        ASSERT_TRUE(report) << report.error().text();
        EXPECT_EQ(report->status, ApplyReport::Status::Differs);
        ASSERT_EQ(report->gpus.size(), 2u);
        EXPECT_EQ(report->gpus[0].plan.verdict, GpuApplyPlan::Verdict::Change);
        // 7 GIs and 7 CIs on an empty GPU.
        EXPECT_EQ(report->gpus[0].plan.steps.size(), 14u);
        EXPECT_EQ(report->gpus[0].steps_done, 0u);
        EXPECT_FALSE(report->sync);
    }
    EXPECT_EQ(control.changes, 0u);
}

TEST(MigApplyRun, ALayoutThatMatchesChecksClean) {
    Root root("gpu=0 mig=on gi=3g.40gb/1c.3g.40gb*2\n");
    CountingControl control(1);
    unsigned gi = 0;
    unsigned ci = 0;
    ASSERT_EQ(standin_create_gi(&control.gpu(0), 9, nullptr, &gi), STANDIN_SUCCESS);
    ASSERT_EQ(standin_create_ci(&control.gpu(0), gi, 1, &ci), STANDIN_SUCCESS);
    ASSERT_EQ(standin_create_ci(&control.gpu(0), gi, 1, &ci), STANDIN_SUCCESS);
    auto report = run_apply(root.root(), request(ApplyRequest::Mode::Check), &control, nullptr);
    ASSERT_TRUE(report) << report.error().text();
    EXPECT_EQ(report->status, ApplyReport::Status::AsDeclared);
    EXPECT_EQ(report->gpus[0].plan.verdict, GpuApplyPlan::Verdict::AsDeclared);
}

TEST(MigApplyRun, ALineThatNamesNoGpuIsSaidWithItsLine) {
    Root root("gpu=* mig=on gi=1g.10gb\ngpu=5 mig=off\n");
    CountingControl control(2);
    auto report = run_apply(root.root(), request(ApplyRequest::Mode::Check), &control, nullptr);
    ASSERT_TRUE(report) << report.error().text();
    ASSERT_EQ(report->diagnostics.items().size(), 1u);
    EXPECT_NE(report->diagnostics.items()[0].message.find("gpu-mig-layout.conf:2: names no GPU"),
              std::string::npos)
        << report->diagnostics.items()[0].message;
    EXPECT_EQ(report->diagnostics.items()[0].severity, Severity::Warning);
}

TEST(MigApplyRun, ABadLayoutFailsWithItsLineAndChangesNothing) {
    Root root("gpu=0 mig=on gi=1g.10gb\ngpu=1 mig=maybe\n");
    CountingControl control(2);
    auto report = run_apply(root.root(), request(ApplyRequest::Mode::Apply), &control, nullptr);
    ASSERT_FALSE(report);
    EXPECT_NE(report.error().text().find("gpu-mig-layout.conf:2"), std::string::npos)
        << report.error().text();
    EXPECT_EQ(control.reads, 0u);
    EXPECT_EQ(control.changes, 0u);
}

TEST(MigApplyRun, AResetIsBracketedByTheHoldersReleaseAndHold) {
    Root root("gpu=0 mig=off\n");
    CountingControl control(1);
    ApplyRequest made = request(ApplyRequest::Mode::Apply);
    made.options.reset_if_needed = true;
    RecordingHolder holder;
    auto report = run_apply(root.root(), made, &control, &holder);
    ASSERT_TRUE(report) << report.error().text();
    EXPECT_EQ(holder.calls, (std::vector<std::string>{"release 0", "hold 0"}));
    EXPECT_EQ(control.gpu(0).mig, 0);
    EXPECT_TRUE(outcome_as_declared(report->gpus[0]));
}

TEST(MigApplyRun, AGpuTheHolderDidNotHoldIsNotTakenBack) {
    Root root("gpu=0 mig=off\n");
    CountingControl control(1);
    ApplyRequest made = request(ApplyRequest::Mode::Apply);
    made.options.reset_if_needed = true;
    RecordingHolder holder;
    holder.held = false;
    auto report = run_apply(root.root(), made, &control, &holder);
    ASSERT_TRUE(report) << report.error().text();
    EXPECT_EQ(holder.calls, (std::vector<std::string>{"release 0"}));
}

TEST(MigApplyRun, AChangeTheDriverDidNotMakeIsCaughtByReadingAgain) {
    Root root("gpu=0 mig=on gi=1g.10gb\n");
    CountingControl control(1);
    control.lose_creates = true;
    auto report = run_apply(root.root(), request(ApplyRequest::Mode::Apply), &control, nullptr);
    ASSERT_TRUE(report) << report.error().text();
    EXPECT_EQ(report->status, ApplyReport::Status::Partial);
    EXPECT_EQ(control.reads, 2u);
    ASSERT_TRUE(report->gpus[0].failure);
    EXPECT_NE(report->gpus[0].failure->message.find("still differs from"), std::string::npos)
        << report->gpus[0].failure->message;
}

// nvmlDeviceSetMigMode "may unbind or reset the device to activate the
// requested mode" (nvml.h): on an idle GPU the mode is on at once, and the
// instances are made in the same run; no reset is reported, none is done.
TEST(MigApplyRun, AModeThatTookEffectAtOnceGetsItsInstancesInTheSameRun) {
    class Activating : public CountingControl {
      public:
        using CountingControl::CountingControl;
        Status set_mig_mode(const GpuIdentity& gpu, bool on) override {
            Status set = CountingControl::set_mig_mode(gpu, on);
            standin_reset(&this->gpu(gpu.minor));
            return set;
        }
        Status reset(const GpuIdentity& gpu) override {
            ++resets;
            return CountingControl::reset(gpu);
        }
        size_t resets = 0;
    };
    Root root("gpu=* mig=on gi=1g.10gb*7\n");
    Activating control(1);
    control.gpu(0).mig = 0;
    control.gpu(0).mig_pending = 0;
    RecordingHolder holder;
    auto report = run_apply(root.root(), request(ApplyRequest::Mode::Apply), &control, &holder);
    ASSERT_TRUE(report) << report.error().text();
    ASSERT_EQ(report->gpus.size(), 1u);
    EXPECT_FALSE(report->gpus[0].plan.reset_pending);
    EXPECT_FALSE(report->gpus[0].failure) << report->gpus[0].failure->text();
    EXPECT_EQ(report->status, ApplyReport::Status::AsDeclared);
    EXPECT_EQ(report->gpus[0].created.size(), 7u);
    EXPECT_EQ(control.resets, 0u);
    EXPECT_TRUE(holder.calls.empty());
    unsigned gis = 0;
    for (const standin_gi& gi : control.gpu(0).gis) {
        gis += gi.used ? 1u : 0u;
    }
    EXPECT_EQ(gis, 7u);
}

// Where the mode waits for a reset (the GPU in use, or an A100), it is
// reported pending and nothing more is done.
TEST(MigApplyRun, AModeThatWaitsForAResetIsPendingAndNothingMore) {
    Root root("gpu=* mig=on gi=1g.10gb*7\n");
    CountingControl control(1);
    control.gpu(0).mig = 0;
    control.gpu(0).mig_pending = 0;
    auto report = run_apply(root.root(), request(ApplyRequest::Mode::Apply), &control, nullptr);
    ASSERT_TRUE(report) << report.error().text();
    ASSERT_EQ(report->gpus.size(), 1u);
    EXPECT_TRUE(report->gpus[0].plan.reset_pending);
    EXPECT_EQ(report->status, ApplyReport::Status::Partial);
    EXPECT_TRUE(report->gpus[0].created.empty());
    EXPECT_TRUE(control.gpu(0).mig_pending);
    EXPECT_FALSE(control.gpu(0).mig);
}

TEST(MigApplyRun, NvmlIsTheControlWhereItLoadsAndNvidiaSmiOtherwise) {
    gpuinit::testing::TempDir state;
    setenv("GPUINIT_STANDIN_MIG", state.path().c_str(), 1);
    setenv("GPUINIT_STANDIN_GPUS", "2", 1);
    Root root("gpu=* mig=on gi=1g.10gb*7\n");
    ApplyRequest made = request(ApplyRequest::Mode::Check);
    made.nvml_library = STANDIN_NVML_LIBRARY;
    made.nvidia_smi = STANDIN_NVIDIA_SMI;
    auto report = run_apply(root.root(), made, nullptr, nullptr);
    ASSERT_TRUE(report) << report.error().text();
    if (nvml_supported()) {
        EXPECT_EQ(report->control, "NVML");
    } else {
        EXPECT_EQ(report->control, std::string("nvidia-smi (") + STANDIN_NVIDIA_SMI + ")");
    }
    made.use_nvml = false;
    auto by_smi = run_apply(root.root(), made, nullptr, nullptr);
    unsetenv("GPUINIT_STANDIN_MIG");
    unsetenv("GPUINIT_STANDIN_GPUS");
    ASSERT_TRUE(by_smi) << by_smi.error().text();
    EXPECT_EQ(by_smi->control, std::string("nvidia-smi (") + STANDIN_NVIDIA_SMI + ")");
    EXPECT_EQ(report->gpus.size(), 2u);
    EXPECT_EQ(report->status, ApplyReport::Status::Differs);
}

TEST(MigApplyRun, NeitherNvmlNorNvidiaSmiIsOneLineWithBoth) {
    Root root("gpu=* mig=off\n");
    ApplyRequest made = request(ApplyRequest::Mode::Check);
    made.nvml_library = "/nonexistent/libnvidia-ml.so.1";
    made.nvidia_smi = "";
    std::string saved = getenv("PATH") != nullptr ? getenv("PATH") : "";
    setenv("PATH", "/nonexistent", 1);
    auto report = run_apply(root.root(), made, nullptr, nullptr);
    setenv("PATH", saved.c_str(), 1);
    ASSERT_FALSE(report);
    EXPECT_NE(report.error().message.find("no way to read or change MIG instances"),
              std::string::npos)
        << report.error().text();
}

} // namespace gpuinit::mig
