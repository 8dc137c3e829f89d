// gres.conf for MIG instances without NVML: the lines, the types Slurm's
// autodetect would use, the slurm.conf fragment, and --check's findings.
#include "gpuinit/mig/gres.hpp"
#include "machine_fixture.hpp"
#include "mig_box.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

namespace gpuinit {

using testing::a100_mig_box;
using testing::oracle_ci_minor;
using testing::oracle_gi_minor;

namespace {

using Box = testing::MigBox;

// The 4xA100 box with every instance a 1g.10gb (as names would say).
void load(Box& box, const testing::FakeMachine& fake = a100_mig_box()) {
    testing::load_mig_box(box, fake);
    for (MigInstance& instance : box.instances) {
        instance.profile = "1g.10gb";
    }
}

// Files as gpu-mknod makes them, for --check's stat (regular files do).
void touch_dev(const Box& box, const std::string& path) {
    std::filesystem::create_directories(std::filesystem::path(box.dir / path).parent_path());
    std::ofstream(box.dir / path) << "";
}

} // namespace

TEST(MigGres, AutodetectTypesAsSlurmNamesThem) {
    EXPECT_EQ(autodetect_gres_type("NVIDIA A100 80GB PCIe", "1g.10gb"),
              "nvidia_a100_80gb_pcie_1g.10gb");
    EXPECT_EQ(autodetect_gres_type("NVIDIA A100-SXM4-40GB", "1g.5gb"), "nvidia_a100_1g.5gb");
    EXPECT_EQ(autodetect_gres_type("NVIDIA A100-SXM4-80GB"), "nvidia_a100-sxm4-80gb");
    EXPECT_EQ(autodetect_gres_type("NVIDIA H100 80GB HBM3", "1g.10gb"),
              "nvidia_h100_80gb_hbm3_1g.10gb");
}

namespace {

// What SchedMD/slurm src/plugins/gpu/nvml/gpu_nvml.c does with NVML's names
// (slurm-26-05-3-1, the same since slurm-23-02-6-1), step by step: each name
// through gpu_common_underscorify_tolower() (tolower, ' ' -> '_'), the GPU's
// cut at its first '-', the MIG device's taken from strstr(name, "mig_") + 3.
std::string slurm_mig_type(std::string gpu_name, std::string mig_name) {
    for (std::string* name : {&gpu_name, &mig_name}) {
        for (char& c : *name) {
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            c = c == ' ' ? '_' : c;
        }
    }
    if (size_t dash = gpu_name.find('-'); dash != std::string::npos) {
        gpu_name.resize(dash);
    }
    size_t mig = mig_name.find("mig_");
    return mig == std::string::npos ? std::string("(no mig_)")
                                    : gpu_name + mig_name.substr(mig + 3);
}

} // namespace

// Every profile form NVML names MIG devices with, on the GPUs of the
// captures: the type is the one Slurm's AutoDetect=nvml gives the device
// NVML names "<GPU name> MIG <profile>".
TEST(MigGres, AutodetectTypesEqualSlurmsForEveryProfileForm) {
    const std::vector<std::pair<std::string, std::vector<std::string>>> gpus = {
        {"NVIDIA A100-SXM4-40GB", {"1g.5gb", "1g.5gb+me", "1c.3g.20gb", "2c.7g.40gb"}},
        {"NVIDIA A100-PCIE-40GB", {"1c.2g.10gb", "7g.40gb"}},
        {"NVIDIA A100 80GB PCIe", {"1g.10gb+me", "3g.40gb"}},
        {"NVIDIA H100 80GB HBM3", {"1g.10gb+me", "1g.20gb", "1c.3g.40gb", "7g.80gb"}},
        {"NVIDIA RTX PRO 6000 Blackwell Server Edition",
         {"1g.24gb", "1g.24gb+me", "1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me", "2g.48gb-me",
          "2g.48gb+me.all", "4g.96gb+gfx"}},
        // Not a name NVIDIA prints, but one the profile grammar admits:
        // Slurm lowercases it, and so does gpuinit.
        {"NVIDIA H100 80GB HBM3", {"1g.10gb+ME"}},
    };
    for (const auto& [gpu, profiles] : gpus) {
        for (const std::string& profile : profiles) {
            EXPECT_EQ(autodetect_gres_type(gpu, profile),
                      slurm_mig_type(gpu, gpu + " MIG " + profile))
                << gpu << " " << profile;
        }
    }
    EXPECT_EQ(autodetect_gres_type("NVIDIA RTX PRO 6000 Blackwell Server Edition", "1g.24gb-me"),
              "nvidia_rtx_pro_6000_blackwell_server_edition_1g.24gb-me");
    EXPECT_EQ(autodetect_gres_type("NVIDIA A100-SXM4-40GB", "1g.5gb+me"), "nvidia_a100_1g.5gb+me");
}

TEST(MigGres, OneLinePerInstanceAndPerWholeGpu) {
    Box box;
    load(box);
    auto plan = plan_gres(box.machine, box.instances, GresTypeStyle::Autodetect, nullptr);
    ASSERT_TRUE(plan) << plan.error().text();
    ASSERT_EQ(plan->records.size(), 1u + 21u);
    EXPECT_EQ(plan->records[0].files, std::vector<std::string>{"/dev/nvidia0"});
    EXPECT_EQ(plan->records[0].type, "nvidia_a100_80gb_pcie");
    const GresRecord& first_mig = plan->records[1];
    EXPECT_EQ(first_mig.type, "nvidia_a100_80gb_pcie_1g.10gb");
    EXPECT_EQ(
        first_mig.files,
        (std::vector<std::string>{
            "/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap" + std::to_string(oracle_gi_minor(1, 7)),
            "/dev/nvidia-caps/nvidia-cap" + std::to_string(oracle_ci_minor(1, 7, 0))}));
    std::string conf = render_gres_conf(*plan, "gpu01");
    EXPECT_NE(conf.find("NodeName=gpu01 Name=gpu Type=nvidia_a100_80gb_pcie File=/dev/nvidia0"),
              std::string::npos)
        << conf;
    // gpu1/gi7: caps 201 (GI) and 202 (CI) in the driver's numbering.
    EXPECT_NE(conf.find("NodeName=gpu01 Name=gpu Type=nvidia_a100_80gb_pcie_1g.10gb "
                        "MultipleFiles=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap201,"
                        "/dev/nvidia-caps/nvidia-cap202"),
              std::string::npos)
        << conf;
    EXPECT_EQ(render_slurm_gres(*plan),
              "Gres=gpu:nvidia_a100_80gb_pcie:1,gpu:nvidia_a100_80gb_pcie_1g.10gb:21");

    auto short_names = plan_gres(box.machine, box.instances, GresTypeStyle::Profile, nullptr);
    ASSERT_TRUE(short_names);
    EXPECT_EQ(render_slurm_gres(*short_names), "Gres=gpu:1g.10gb:21,gpu:nvidia_a100_80gb_pcie:1");
    auto map = parse_gres_type_map("1g.10gb small # the site's name\n", "map");
    ASSERT_TRUE(map);
    auto mapped = plan_gres(box.machine, box.instances, GresTypeStyle::Profile, &*map);
    EXPECT_EQ(render_slurm_gres(*mapped), "Gres=gpu:nvidia_a100_80gb_pcie:1,gpu:small:21");
}

// Mixed profiles on one A100: a 3g.40gb GI split into two CIs (1c and 2c,
// each its own gres device sharing the GI's cap file), a 2g.20gb and a
// 1g.10gb; the types carry the CI's own profile (NVML's name, as Slurm's
// autodetect does from 23.11).
TEST(MigGres, MixedProfilesAndTwoCisInOneGi) {
    testing::FakeMachine fake = testing::workstation(2);
    fake.mig_caps = true;
    fake.mig = {{1, 1, {0, 1}}, {1, 5, {0}}, {1, 13, {0}}};
    Box box;
    load(box, fake);
    ASSERT_EQ(box.instances.size(), 4u);
    const char* profiles[] = {"1c.3g.40gb", "2c.3g.40gb", "2g.20gb", "1g.10gb"};
    for (size_t i = 0; i < box.instances.size(); ++i) {
        box.instances[i].profile = profiles[i];
    }
    auto plan = plan_gres(box.machine, box.instances, GresTypeStyle::Autodetect, nullptr);
    ASSERT_TRUE(plan) << plan.error().text();
    ASSERT_EQ(plan->records.size(), 5u); // GPU 0 whole, four instances on GPU 1
    std::string gi_cap = "/dev/nvidia-caps/nvidia-cap" + std::to_string(oracle_gi_minor(1, 1));
    EXPECT_EQ(plan->records[1].files[1], gi_cap);
    EXPECT_EQ(plan->records[2].files[1], gi_cap);
    EXPECT_EQ(plan->records[1].files[2],
              "/dev/nvidia-caps/nvidia-cap" + std::to_string(oracle_ci_minor(1, 1, 0)));
    EXPECT_EQ(plan->records[2].files[2],
              "/dev/nvidia-caps/nvidia-cap" + std::to_string(oracle_ci_minor(1, 1, 1)));
    EXPECT_EQ(render_slurm_gres(*plan),
              "Gres=gpu:nvidia_a100_80gb_pcie:1,gpu:nvidia_a100_80gb_pcie_1c.3g.40gb:1,"
              "gpu:nvidia_a100_80gb_pcie_1g.10gb:1,gpu:nvidia_a100_80gb_pcie_2c.3g.40gb:1,"
              "gpu:nvidia_a100_80gb_pcie_2g.20gb:1");
}

TEST(MigGres, AnUnknownProfileIsNamedNotGuessed) {
    Box box;
    load(box);
    box.instances[3].profile.clear();
    auto plan = plan_gres(box.machine, box.instances, GresTypeStyle::Autodetect, nullptr);
    ASSERT_FALSE(plan);
    EXPECT_NE(plan.error().message.find("MIG gpu1/gi10/ci0 has no known profile"),
              std::string::npos)
        << plan.error().text();
    EXPECT_FALSE(parse_gres_type_map("a b c\n", "map"));
    EXPECT_FALSE(parse_gres_type_map("a b\na c\n", "map"));
    EXPECT_FALSE(parse_gres_type_map("a\x1b b\n", "map"));
}

// --check: the hand-written mistakes of the issue, each found.
TEST(MigGres, CheckFindsTheHandWrittenMistakes) {
    Box box;
    load(box);
    auto plan = plan_gres(box.machine, box.instances, GresTypeStyle::Autodetect, nullptr);
    ASSERT_TRUE(plan);
    for (const GresRecord& record : plan->records) {
        for (const std::string& file : record.files) {
            touch_dev(box, file);
        }
    }
    auto root = Sysroot::open(box.dir.path());
    // What gpu-mig gres writes is clean.
    auto clean =
        check_gres_conf(render_gres_conf(*plan, ""), "gres.conf", *plan, *root, box.machine, "");
    ASSERT_TRUE(clean) << clean.error().text();
    EXPECT_TRUE(clean->empty()) << (*clean)[0].message;

    touch_dev(box, "/dev/nvidia7");
    std::string bad = "AutoDetect=off\n"
                      "Name=gpu Type=a100 File=/dev/nvidia[0-1]\n" // GPU 1 is MIG
                      "Name=gpu Type=a100 File=/dev/nvidia7\n"     // an nvidia-smi index?
                      "Name=gpu Type=mig MultipleFiles=/dev/nvidia2,/dev/nvidia-caps/nvidia-cap3,"
                      "/dev/nvidia-caps/nvidia-cap4\n" // gone instance, no files
                      "NodeName=other Name=gpu Type=x File=/dev/nvidia9\n"; // another node's
    auto findings = check_gres_conf(bad, "gres.conf", *plan, *root, box.machine, "gpu01");
    ASSERT_TRUE(findings) << findings.error().text();
    auto has = [&](GresFinding::Kind kind, size_t line) {
        return std::any_of(findings->begin(), findings->end(),
                           [&](const GresFinding& f) { return f.kind == kind && f.line == line; });
    };
    std::string all;
    for (const GresFinding& f : *findings) {
        all += std::string(gres_finding_name(f.kind)) + ": " + f.message + "\n";
    }
    EXPECT_TRUE(has(GresFinding::Kind::NoCapFiles, 2)) << all;
    EXPECT_TRUE(has(GresFinding::Kind::WrongDevice, 3)) << all;
    EXPECT_TRUE(has(GresFinding::Kind::MissingFile, 4)) << all;
    EXPECT_TRUE(has(GresFinding::Kind::NotListed, 0)) << all;
    EXPECT_TRUE(has(GresFinding::Kind::CountChange, 0)) << all;
    EXPECT_EQ(all.find("nvidia9"), std::string::npos) << all;

    // A minor the driver lacks, with no file of that name either (what an
    // nvidia-smi index past the last minor gives): wrong-device, as
    // gpu-mig(8) documents, not missing-file.
    auto wrong = check_gres_conf("Name=gpu Type=a100 File=/dev/nvidia0\n"
                                 "Name=gpu Type=a100 File=/dev/nvidia5\n",
                                 "gres.conf", *plan, *root, box.machine, "");
    ASSERT_TRUE(wrong) << wrong.error().text();
    std::string kinds;
    for (const GresFinding& f : *wrong) {
        kinds += f.line == 2 ? std::string(gres_finding_name(f.kind)) + " " : "";
    }
    EXPECT_EQ(kinds, "wrong-device ") << all;

    auto malformed = check_gres_conf("Name=gpu File=/dev/nvidia0 MultipleFiles=/dev/nvidia1\n",
                                     "gres.conf", *plan, *root, box.machine, "");
    ASSERT_FALSE(malformed);
    EXPECT_NE(malformed.error().text().find("gres.conf:1:"), std::string::npos);
}

} // namespace gpuinit

namespace gpuinit {

// An empty device path (File=, or an empty entry of MultipleFiles=) is an
// error with its line, not a device: it would shift every later index.
// Found by fuzz_gres_conf.
TEST(MigGres, AnEmptyDevicePathIsAnError) {
    for (const char* line : {"Name=gpu File=\n", "Name=gpu MultipleFiles=\n",
                             "Name=gpu MultipleFiles=/dev/nvidia0,,/dev/nvidia-caps/nvidia-cap4\n",
                             "Name=gpu MultipleFiles=/dev/nvidia0,\n"}) {
        std::string text = std::string("Name=gpu File=/dev/nvidia1\n") + line;
        auto records = parse_gres_conf(text, "gres.conf", {});
        ASSERT_FALSE(records) << line;
        EXPECT_NE(records.error().text().find("gres.conf:2:"), std::string::npos)
            << records.error().text();
        EXPECT_NE(records.error().message.find("empty path"), std::string::npos);
    }
}

} // namespace gpuinit
