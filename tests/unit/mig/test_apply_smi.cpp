// gpu-mig apply's MigControl over nvidia-smi, run against the stand-in
// nvidia-smi (tests/fixture/standin_nvidia_smi.c): what each call leaves in
// the stand-in driver's state, the ids read back from what it prints, and
// a create that does not fit failing as one line.
#include "gpuinit/mig/apply_smi.hpp"
#include "machine_fixture.hpp"
#include "mig_standin.h"
#include "temp_dir.hpp"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>

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
        unsetenv("GPUINIT_STANDIN_PIDS");
        unsetenv("GPUINIT_STANDIN_PROCESS_NAME");
    }

    void save(unsigned index, bool mig) {
        standin_gpu state;
        standin_h100(&state, mig ? 1 : 0);
        ASSERT_EQ(standin_save(&state, state_path(index).c_str()), 0);
    }
    std::string state_path(unsigned index) const { return dir_ / ("gpu" + std::to_string(index)); }
    void store(unsigned index, const standin_gpu& gpu) {
        ASSERT_EQ(standin_save(&gpu, state_path(index).c_str()), 0);
    }
    // A stand-in nvidia-smi of its own: a shell script with `body`, which
    // may hand on to the stand-in as "$SMI".
    std::string script(const std::string& body) {
        std::string path = dir_ / "smi.sh";
        std::ofstream out(path);
        out << "#!/bin/sh\nSMI=" << STANDIN_NVIDIA_SMI << "\n" << body << "\n";
        out.close();
        EXPECT_EQ(chmod(path.c_str(), 0755), 0);
        return path;
    }
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

// What gpus() reads is what the stand-in driver holds: ids as the driver
// gave them, each CI's profile, the placements named from -lgip, the GPUs'
// identities and index order, a process on GPU 1.
TEST_F(SmiControl, GpusReadsEachGpuAsTheDriverHasIt) {
    standin_gpu gpu;
    standin_h100(&gpu, 1);
    unsigned half = 0;
    unsigned me = 0;
    unsigned ci = 0;
    unsigned start = 4;
    ASSERT_EQ(standin_create_gi(&gpu, 9, &start, &half), STANDIN_SUCCESS); // 3g.40gb
    ASSERT_EQ(standin_create_ci(&gpu, half, 1, &ci), STANDIN_SUCCESS);
    ASSERT_EQ(standin_create_ci(&gpu, half, 2, &ci), STANDIN_SUCCESS);
    ASSERT_EQ(standin_create_gi(&gpu, 20, nullptr, &me), STANDIN_SUCCESS); // 1g.10gb+me
    ASSERT_EQ(standin_create_ci(&gpu, me, 1, &ci), STANDIN_SUCCESS);
    store(0, gpu);
    setenv("GPUINIT_STANDIN_PIDS", "1:4242,1:77", 1);

    SmiMigControl control(STANDIN_NVIDIA_SMI);
    auto states = control.gpus();
    ASSERT_TRUE(states) << states.error().text();
    ASSERT_EQ(states->size(), 2u);
    const MigGpuState& first = (*states)[0];
    EXPECT_EQ(first.gpu.minor, 0u);
    EXPECT_EQ(first.gpu.bdf, "0000:17:00.0");
    EXPECT_EQ(first.gpu.uuid, gpuinit::testing::fake_uuid(0));
    EXPECT_EQ(first.model, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(first.mig, true);
    EXPECT_EQ(first.mig_after, true);
    EXPECT_TRUE(first.pids.empty());
    ASSERT_EQ(first.gis.size(), 2u);
    // By GI id: the 3g.40gb at 4 is 1 (kmigmgrSwizzIdToSpan), the +me at 6 13.
    EXPECT_EQ(first.gis[0].id, half);
    EXPECT_EQ(first.gis[0].profile, "3g.40gb");
    ASSERT_EQ(first.gis[0].cis.size(), 2u);
    EXPECT_EQ(first.gis[0].cis[0].id, 0u);
    EXPECT_EQ(first.gis[0].cis[0].profile, "1c.3g.40gb");
    EXPECT_EQ(first.gis[0].cis[1].id, 1u);
    EXPECT_EQ(first.gis[0].cis[1].profile, "2c.3g.40gb");
    EXPECT_EQ(first.gis[1].id, me);
    EXPECT_EQ(first.gis[1].profile, "1g.10gb+me");
    // nvidia-smi -lci says "1g.10gb"; named as the GI, as the layout names it.
    ASSERT_EQ(first.gis[1].cis.size(), 1u);
    EXPECT_EQ(first.gis[1].cis[0].profile, "1g.10gb+me");
    ASSERT_EQ(first.placements.size(), gpu.profile_count);
    for (unsigned p = 0; p < gpu.profile_count; ++p) {
        EXPECT_EQ(first.placements[p].profile, gpu.profiles[p].name);
        EXPECT_EQ(first.placements[p].size, gpu.profiles[p].size);
        EXPECT_EQ(first.placements[p].starts,
                  std::vector<unsigned>(gpu.profiles[p].starts,
                                        gpu.profiles[p].starts + gpu.profiles[p].start_count));
    }
    const MigGpuState& second = (*states)[1];
    EXPECT_EQ(second.gpu.minor, 1u);
    EXPECT_EQ(second.gpu.bdf, "0000:27:00.0");
    EXPECT_EQ(second.gpu.uuid, gpuinit::testing::fake_uuid(1));
    EXPECT_EQ(second.mig, false);
    EXPECT_TRUE(second.gis.empty());
    EXPECT_EQ(second.pids, (std::vector<unsigned>{77, 4242}));

    // The later calls use the order read: GPU index 1 is the second.
    ASSERT_TRUE(control.set_mig_mode(second.gpu, true));
    EXPECT_TRUE(state(1).mig_pending);
    EXPECT_TRUE(state(0).mig);
}

// A process's name is the one text in nvidia-smi -q -x its user chooses,
// and nvidia-smi does not escape it. A user on GPU 0 names a process so
// that its lines close that <gpu> and open one of their own, an idle GPU
// with MIG: read by position, it would take GPU 1's index, so apply would
// see GPU 1's instances on an idle GPU and destroy them under GPU 1's job.
// The <gpu>s must be as many as <attached_gpus>, which comes before any
// text a user writes, and no two the same GPU.
TEST_F(SmiControl, AProcessNameCannotAddAGpuToTheListing) {
    standin_gpu victim;
    standin_h100(&victim, 1);
    unsigned gi = 0;
    unsigned ci = 0;
    ASSERT_EQ(standin_create_gi(&victim, 9, nullptr, &gi), STANDIN_SUCCESS); // 3g.40gb
    ASSERT_EQ(standin_create_ci(&victim, gi, 3, &ci), STANDIN_SUCCESS);
    store(1, victim);
    setenv("GPUINIT_STANDIN_PIDS", "0:4242,1:77", 1);
    setenv("GPUINIT_STANDIN_PROCESS_NAME",
           "4242:x</process_name>\n<used_memory>1 MiB</used_memory>\n</process_info>\n"
           "</processes>\n</gpu>\n<gpu id=\"00000000:99:00.0\">\n"
           "<product_name>NVIDIA H100 80GB HBM3</product_name>\n<mig_mode>\n"
           "<current_mig>Enabled</current_mig>\n<pending_mig>Enabled</pending_mig>\n"
           "</mig_mode>\n<uuid>GPU-99999999-9999-9999-9999-999999999999</uuid>\n"
           "<minor_number>9</minor_number>\n<pci>\n<pci_bus_id>00000000:99:00.0</pci_bus_id>\n"
           "</pci>\n<processes>\n<process_info>\n<process_name>y",
           1);

    SmiMigControl control(STANDIN_NVIDIA_SMI);
    auto states = control.gpus();
    unsetenv("GPUINIT_STANDIN_PROCESS_NAME");
    if (states) {
        // What apply would do with what it read.
        auto layout = MigLayout::parse("gpu=* mig=on gi=1g.10gb*7\n", "/etc/gpu-mig-layout.conf");
        ASSERT_TRUE(layout) << layout.error().text();
        execute_apply(plan_apply(*states, *layout, ApplyOptions{}), control);
    }
    standin_gpu after = state(1);
    EXPECT_TRUE(after.gis[gi].used && std::string(after.gis[gi].profile->name) == "3g.40gb")
        << "GPU 1's 3g.40gb was destroyed under its process";
    ASSERT_FALSE(states) << states->size() << " GPUs read";
    EXPECT_NE(states.error().message.find("attached_gpus"), std::string::npos)
        << states.error().text();
}

// MIG off on every GPU: "No MIG-enabled devices found." is no instances,
// and with MIG on but no GI, "No GPU instances found" (exit 6) none.
TEST_F(SmiControl, GpusWithoutInstancesHaveNone) {
    save(0, false);
    SmiMigControl control(STANDIN_NVIDIA_SMI);
    auto states = control.gpus();
    ASSERT_TRUE(states) << states.error().text();
    ASSERT_EQ(states->size(), 2u);
    for (const MigGpuState& state : *states) {
        EXPECT_EQ(state.mig, false);
        EXPECT_TRUE(state.gis.empty());
        EXPECT_TRUE(state.pids.empty());
    }
    save(0, true);
    states = control.gpus();
    ASSERT_TRUE(states) << states.error().text();
    EXPECT_EQ((*states)[0].mig, true);
    EXPECT_TRUE((*states)[0].gis.empty());
    EXPECT_FALSE((*states)[0].placements.empty());

    // Drivers differ in the exit status of the "nothing" line: not 0 is
    // nothing too.
    SmiMigControl failing_none(script("if [ \"$1\" = mig ]; then echo 'No MIG-enabled devices "
                                      "found.'; exit 6; fi\nexec \"$SMI\" \"$@\""));
    states = failing_none.gpus();
    ASSERT_TRUE(states) << states.error().text();
    EXPECT_TRUE((*states)[0].gis.empty());
}

// A GPU without MIG (N/A, as telegraf's RTX PRO 6000 Max-Q capture) is MIG
// off, not unknown: a layout of mig=off finds it as declared.
TEST_F(SmiControl, AGpuWithoutMigIsMigOff) {
    save(0, false);
    SmiMigControl control(
        script("\"$SMI\" \"$@\" | sed 's/<current_mig>Disabled/<current_mig>N\\/A/; "
               "s/<pending_mig>Disabled/<pending_mig>N\\/A/'"));
    auto states = control.gpus();
    ASSERT_TRUE(states) << states.error().text();
    EXPECT_EQ((*states)[0].mig, false);
    EXPECT_EQ((*states)[0].mig_after, false);
    EXPECT_FALSE((*states)[0].mig_capable);
}

TEST_F(SmiControl, AFailingNvidiaSmiFailsGpusSayingWhy) {
    SmiMigControl broken(script("echo \"NVIDIA-SMI has failed because it couldn't communicate "
                                "with the NVIDIA driver.\"; exit 9"));
    auto states = broken.gpus();
    ASSERT_FALSE(states);
    EXPECT_EQ(states.error().code, EIO);
    EXPECT_NE(states.error().message.find("-q -x exited with status 9"), std::string::npos)
        << states.error().message;
    EXPECT_NE(states.error().message.find("couldn't communicate"), std::string::npos)
        << states.error().message;

    SmiMigControl missing(dir_ / "no-such-nvidia-smi");
    EXPECT_FALSE(missing.gpus());

    // A mig listing failing otherwise than with nothing to list fails too.
    SmiMigControl denied(script("if [ \"$1\" = mig ]; then echo 'Failed to display GPU "
                                "instances: Insufficient Permissions'; exit 4; fi\n"
                                "exec \"$SMI\" \"$@\""));
    states = denied.gpus();
    ASSERT_FALSE(states);
    EXPECT_NE(states.error().message.find("Insufficient Permissions"), std::string::npos)
        << states.error().message;
}

// A CI whose GI -lgi does not list: the GPUs changed between the commands.
TEST_F(SmiControl, OutputsThatDisagreeAreRefused) {
    SmiMigControl control(script(
        "if [ \"$2\" = -lci ]; then\n"
        "echo '|   0      3       MIG 1g.10gb          0         0          0:1     |'; exit 0\n"
        "fi\nexec \"$SMI\" \"$@\""));
    auto states = control.gpus();
    ASSERT_FALSE(states);
    EXPECT_EQ(states.error().code, EAGAIN);
    EXPECT_NE(states.error().message.find("CI 0 of GI 3 on GPU 0"), std::string::npos)
        << states.error().message;
}

// gpu-mig apply's library path on a machine without NVML: a changed layout
// converges in one run through nvidia-smi, GI ids as the driver gives
// them, and a second plan finds every GPU as declared.
TEST_F(SmiControl, ALayoutConvergesInOneRunThroughNvidiaSmi) {
    standin_gpu gpu;
    standin_h100(&gpu, 1);
    unsigned whole = 0;
    unsigned ci = 0;
    ASSERT_EQ(standin_create_gi(&gpu, 0, nullptr, &whole), STANDIN_SUCCESS); // 7g.80gb
    ASSERT_EQ(standin_create_ci(&gpu, whole, 7, &ci), STANDIN_SUCCESS);
    store(0, gpu);
    auto layout = MigLayout::parse("gpu=0 mig=on gi=3g.40gb/1c.3g.40gb*2 gi=2g.20gb "
                                   "gi=1g.10gb+me gi=1g.10gb\n"
                                   "gpu=1 mig=on gi=1g.10gb*7\n",
                                   "/etc/gpu-mig-layout.conf");
    ASSERT_TRUE(layout) << layout.error().text();
    SmiMigControl control(STANDIN_NVIDIA_SMI);
    auto states = control.gpus();
    ASSERT_TRUE(states) << states.error().text();
    ApplyOptions options;
    options.reset_if_needed = true;
    auto plans = plan_apply(*states, *layout, options);
    ASSERT_EQ(plans.size(), 2u);
    EXPECT_EQ(plans[0].verdict, GpuApplyPlan::Verdict::Change);
    EXPECT_EQ(plans[1].verdict, GpuApplyPlan::Verdict::Change);
    auto outcomes = execute_apply(plans, control);
    for (const GpuApplyOutcome& outcome : outcomes) {
        EXPECT_FALSE(outcome.failure) << outcome.failure->text();
        EXPECT_EQ(outcome.steps_done, outcome.plan.steps.size());
    }
    ASSERT_EQ(outcomes.size(), 2u);
    EXPECT_EQ(outcomes[0].created.size(), 5u);
    EXPECT_EQ(outcomes[1].created.size(), 7u);
    EXPECT_FALSE(state(0).gis[whole].used);

    states = control.gpus();
    ASSERT_TRUE(states) << states.error().text();
    plans = plan_apply(*states, *layout, options);
    for (const GpuApplyPlan& plan : plans) {
        EXPECT_EQ(plan.verdict, GpuApplyPlan::Verdict::AsDeclared)
            << verdict_name(plan.verdict) << " " << gpu_subject(plan.gpu);
        EXPECT_TRUE(plan.steps.empty());
    }
    EXPECT_EQ((*states)[1].gis.size(), 7u);
}

} // namespace gpuinit::mig
