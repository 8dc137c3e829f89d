// NVML, dlopened: against the stand-in libnvidia-ml.so.1 the tests build
// (fake_nvml.c: two GPUs, MIG on NVML GPU 0 = the fixture's minor 1).
#include "gpuinit/mig/gres.hpp"
#include "gpuinit/mig/nvml.hpp"
#include "machine_fixture.hpp"
#include "mig_box.hpp"

#include <cstdlib>
#include <gtest/gtest.h>

namespace gpuinit {

namespace {

// FAKE_NVML_SCENARIO for one test.
class Scenario {
  public:
    explicit Scenario(const char* name) { ::setenv("FAKE_NVML_SCENARIO", name, 1); }
    ~Scenario() { ::unsetenv("FAKE_NVML_SCENARIO"); }
    Scenario(const Scenario&) = delete;
    Scenario& operator=(const Scenario&) = delete;
};

} // namespace

TEST(Nvml, ProfileFromTheMigDeviceName) {
    EXPECT_EQ(profile_from_nvml_name("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), "1g.5gb");
    EXPECT_EQ(profile_from_nvml_name("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb"), "1c.3g.40gb");
    EXPECT_EQ(profile_from_nvml_name("MIG 1g.10gb+me"), "1g.10gb+me");
    // The name CUDA reports for a MIG device of an RTX PRO 6000 (captures
    // README), and the profiles nvml.h's _NO_ME, _ALL_ME and _GFX make.
    EXPECT_EQ(profile_from_nvml_name("NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 1g.24gb"),
              "1g.24gb");
    EXPECT_EQ(profile_from_nvml_name("NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 1g.24gb-me"),
              "1g.24gb-me");
    EXPECT_EQ(profile_from_nvml_name("NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 2g.48gb-me"),
              "2g.48gb-me");
    EXPECT_EQ(profile_from_nvml_name("NVIDIA RTX PRO 6000 Blackwell Server Edition MIG "
                                     "1g.24gb+me.all"),
              "1g.24gb+me.all");
    EXPECT_EQ(
        profile_from_nvml_name("NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 4g.96gb+gfx"),
        "4g.96gb+gfx");
    EXPECT_EQ(profile_from_nvml_name("NVIDIA A100 80GB PCIe"), "");
    EXPECT_EQ(profile_from_nvml_name("NVIDIA A100 MIG 1g.10gb x"), "");
    EXPECT_EQ(profile_from_nvml_name(""), "");
}

TEST(Nvml, ReadsEveryMigDeviceAcrossGapsFromTheLibrary) {
    ASSERT_TRUE(nvml_supported());
    Diagnostics diagnostics;
    auto names = mig_names_from_nvml(diagnostics, FAKE_NVML_LIBRARY);
    ASSERT_TRUE(names) << names.error().text();
    EXPECT_TRUE(diagnostics.empty()) << diagnostics.items()[0].text();
    EXPECT_EQ(names->instances().size(), 3u);
    std::string gpu = testing::fake_uuid(1);
    const MigName* small = names->find(gpu, 7, 0);
    ASSERT_NE(small, nullptr);
    EXPECT_EQ(small->profile, "1g.10gb");
    EXPECT_EQ(small->uuid, "MIG-3c4c5a28-1007-5001-a000-0007e5494646");
    ASSERT_NE(names->find(gpu, 1, 1), nullptr);
    EXPECT_EQ(names->find(gpu, 1, 0)->profile, "2c.3g.40gb");
    EXPECT_EQ(names->find(gpu, 1, 1)->profile, "1c.3g.40gb");
    ASSERT_NE(names->gpu(testing::fake_uuid(0)), nullptr);
    EXPECT_EQ(names->gpu(testing::fake_uuid(0))->index, 1u);
    EXPECT_EQ(names->gpu(gpu)->name, "NVIDIA A100 80GB PCIe");
    EXPECT_NE(names->source().find("NVML"), std::string::npos);
}

// An RTX PRO 6000 Blackwell's MIG devices (nvml.h's 1_SLICE_NO_ME:
// "1g.24gb-me") name their instances, and through them their gres types, as
// any other: they used to be refused, and gres failed with "no known
// profile".
TEST(Nvml, BlackwellProfilesNameInstancesAndGresTypes) {
    Scenario blackwell("blackwell");
    Diagnostics diagnostics;
    auto names = mig_names_from_nvml(diagnostics, FAKE_NVML_LIBRARY);
    ASSERT_TRUE(names) << names.error().text();
    EXPECT_TRUE(diagnostics.empty()) << diagnostics.items()[0].text();
    std::string gpu = testing::fake_uuid(1);
    ASSERT_NE(names->find(gpu, 7, 0), nullptr);
    EXPECT_EQ(names->find(gpu, 7, 0)->profile, "1g.24gb-me");
    EXPECT_EQ(names->find(gpu, 1, 1)->profile, "1c.2g.48gb");
    EXPECT_EQ(names->gpu(gpu)->name, "NVIDIA RTX PRO 6000 Blackwell Server Edition");

    // The fixture's minor 1 is NVML GPU 0; minor 0, NVML GPU 1, has no MIG.
    testing::FakeMachine fake = testing::workstation(2);
    fake.mig_caps = true;
    fake.mig = {{1, 1, {0, 1}}, {1, 7, {0}}};
    for (testing::FakePciFunction& function : fake.pci) {
        if (function.minor == 1u) {
            function.model = "NVIDIA RTX PRO 6000 Blackwell Server Edition";
        }
    }
    testing::MigBox box;
    testing::load_mig_box(box, fake);
    ASSERT_EQ(box.instances.size(), 3u);
    apply_mig_names(box.instances, *names, diagnostics);
    EXPECT_TRUE(diagnostics.empty()) << diagnostics.items()[0].text();
    auto plan = plan_gres(box.machine, box.instances, GresTypeStyle::Autodetect, nullptr);
    ASSERT_TRUE(plan) << plan.error().text();
    EXPECT_EQ(render_slurm_gres(*plan),
              "Gres=gpu:nvidia_a100_80gb_pcie:1,"
              "gpu:nvidia_rtx_pro_6000_blackwell_server_edition_1c.2g.48gb:2,"
              "gpu:nvidia_rtx_pro_6000_blackwell_server_edition_1g.24gb-me:1");
}

TEST(Nvml, TheOldUuidFormIsRefusedAndLeftUnknown) {
    Scenario old("old-uuid");
    Diagnostics diagnostics;
    auto names = mig_names_from_nvml(diagnostics, FAKE_NVML_LIBRARY);
    ASSERT_TRUE(names) << names.error().text();
    EXPECT_EQ(diagnostics.count(Severity::Warning), 3u);
    EXPECT_NE(diagnostics.items()[0].message.find("R470"), std::string::npos)
        << diagnostics.items()[0].text();
    const MigName* name = names->find(testing::fake_uuid(1), 7, 0);
    ASSERT_NE(name, nullptr);
    EXPECT_TRUE(name->uuid.empty());
    EXPECT_EQ(name->profile, "1g.10gb");
}

TEST(Nvml, ANameWithoutAProfileLeavesItUnknown) {
    Scenario odd("odd-name");
    Diagnostics diagnostics;
    auto names = mig_names_from_nvml(diagnostics, FAKE_NVML_LIBRARY);
    ASSERT_TRUE(names);
    EXPECT_EQ(diagnostics.count(Severity::Warning), 3u);
    EXPECT_TRUE(names->find(testing::fake_uuid(1), 7, 0)->profile.empty());
    EXPECT_FALSE(names->find(testing::fake_uuid(1), 7, 0)->uuid.empty());
}

TEST(Nvml, FailuresSayWhatToDoInstead) {
    Diagnostics diagnostics;
    auto missing = mig_names_from_nvml(diagnostics, "/nonexistent/libnvidia-ml.so.1");
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().message.find("--nvidia-smi-output"), std::string::npos);
    auto not_nvml = mig_names_from_nvml(diagnostics, "libm.so.6");
    ASSERT_FALSE(not_nvml);
    EXPECT_NE(not_nvml.error().message.find("lacks nvmlInit_v2"), std::string::npos)
        << not_nvml.error().message;
    Scenario no_driver("init-fails");
    auto init = mig_names_from_nvml(diagnostics, FAKE_NVML_LIBRARY);
    ASSERT_FALSE(init);
    EXPECT_NE(init.error().message.find("Driver Not Loaded"), std::string::npos)
        << init.error().message;
    EXPECT_TRUE(diagnostics.empty());
}

} // namespace gpuinit
