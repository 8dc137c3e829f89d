// The declared MIG layout (gpu-mig-layout.conf): what each GPU should be,
// chosen by the most specific line; every malformed line refused with
// file:line; no file, no layout.
#include "gpuinit/mig/layout.hpp"
#include "temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

namespace gpuinit::mig {

namespace {

constexpr const char* kUuid = "GPU-558ce121-3d5b-5f1b-8ee7-6b1a2d6f5a01";
constexpr const char* kH100 = "NVIDIA H100 80GB HBM3";

GpuIdentity gpu(unsigned minor, std::string bdf = "0000:17:00.0", std::string uuid = kUuid) {
    return GpuIdentity{minor, std::move(bdf), std::move(uuid)};
}

std::vector<std::string> times(unsigned n, const std::string& profile) {
    return std::vector<std::string>(n, profile);
}

MigLayout parsed(std::string_view text) {
    auto layout = MigLayout::parse(text, "/etc/gpu-mig-layout.conf");
    EXPECT_TRUE(layout) << layout.error().text();
    return layout ? *layout : MigLayout{};
}

std::string failure(std::string_view text) {
    auto layout = MigLayout::parse(text, "/etc/gpu-mig-layout.conf");
    EXPECT_FALSE(layout) << text;
    return layout ? std::string() : layout.error().text();
}

} // namespace

TEST(MigLayout, TheIssuesExamples) {
    MigLayout layout = parsed("# every GPU seven 1g.10gb\n"
                              "gpu=* mig=on gi=1g.10gb*7\n"
                              "gpu=0 mig=off\n"
                              "gpu=1 mig=on gi=3g.40gb/1c.3g.40gb*2   # two CIs\n");
    const GpuLayout* any = layout.for_gpu(gpu(5), kH100);
    ASSERT_NE(any, nullptr);
    EXPECT_TRUE(any->mig);
    ASSERT_EQ(any->gis.size(), 7u);
    for (const LayoutGi& gi : any->gis) {
        EXPECT_EQ(gi.profile, "1g.10gb");
        EXPECT_EQ(gi.cis, times(1, "1g.10gb")); // one CI as large as the GI
    }
    EXPECT_EQ(any->origin, "/etc/gpu-mig-layout.conf:2");

    const GpuLayout* off = layout.for_gpu(gpu(0), kH100);
    ASSERT_NE(off, nullptr);
    EXPECT_FALSE(off->mig);
    EXPECT_TRUE(off->gis.empty());

    const GpuLayout* one = layout.for_gpu(gpu(1), kH100);
    ASSERT_NE(one, nullptr);
    ASSERT_EQ(one->gis.size(), 1u);
    EXPECT_EQ(one->gis[0].profile, "3g.40gb");
    EXPECT_EQ(one->gis[0].cis, times(2, "1c.3g.40gb"));
    EXPECT_EQ(one->origin, "/etc/gpu-mig-layout.conf:4");
}

TEST(MigLayout, TheMostSpecificLineWins) {
    MigLayout layout = parsed("gpu=* mig=off\n"
                              "model=nvidia_h100_80gb_hbm3 mig=on gi=7g.80gb\n"
                              "gpu=3 mig=on gi=3g.40gb*2\n"
                              "gpu=0000:2a:00.0 mig=on gi=2g.20gb*3\n"
                              "gpu=GPU-558CE121-3D5B-5f1b-8ee7-6b1a2d6f5a01 mig=on\n");
    auto line_of = [&](const GpuIdentity& identity, std::string_view model) {
        const GpuLayout* found = layout.for_gpu(identity, model);
        return found == nullptr ? std::string() : found->origin.substr(found->origin.rfind(':'));
    };
    EXPECT_EQ(line_of(gpu(7, "0000:01:00.0", "GPU-1"), "NVIDIA A100-SXM4-80GB"), ":1");
    EXPECT_EQ(line_of(gpu(7, "0000:01:00.0", "GPU-1"), kH100), ":2");
    EXPECT_EQ(line_of(gpu(3, "0000:01:00.0", "GPU-1"), kH100), ":3");
    EXPECT_EQ(line_of(gpu(3, "0000:2a:00.0", "GPU-1"), kH100), ":4");
    EXPECT_EQ(line_of(gpu(3, "0000:2a:00.0", kUuid), kH100), ":5");
    const GpuLayout* empty = layout.for_gpu(gpu(3, "0000:2a:00.0", kUuid), kH100);
    ASSERT_NE(empty, nullptr);
    EXPECT_TRUE(empty->mig);
    EXPECT_TRUE(empty->gis.empty()); // MIG on, no instances
}

TEST(MigLayout, AGpuNoLineNamesIsLeftAlone) {
    MigLayout layout = parsed("gpu=1 mig=off\nmodel=NVIDIA_A100-SXM4-80GB mig=off\n");
    EXPECT_EQ(layout.for_gpu(gpu(0), kH100), nullptr);
    EXPECT_NE(layout.for_gpu(gpu(0), "NVIDIA A100-SXM4-80GB"), nullptr);
    EXPECT_EQ(parsed("").for_gpu(gpu(0), kH100), nullptr);
}

TEST(MigLayout, InstancesAreKeptLargestFirst) {
    MigLayout layout = parsed("gpu=* mig=on gi=1g.10gb*2 gi=3g.40gb/1c.3g.40gb,2c.3g.40gb\n");
    const GpuLayout* any = layout.for_gpu(gpu(0), kH100);
    ASSERT_NE(any, nullptr);
    ASSERT_EQ(any->gis.size(), 3u);
    EXPECT_EQ(any->gis[0].profile, "3g.40gb");
    EXPECT_EQ(any->gis[0].cis, (std::vector<std::string>{"2c.3g.40gb", "1c.3g.40gb"}));
    EXPECT_EQ(any->gis[1].profile, "1g.10gb");
}

TEST(MigLayout, RendersCanonicallyAndParsesBackTheSame) {
    std::string text = "gpu=1 mig=on gi=1g.10gb gi=3g.40gb/1c.3g.40gb,1c.3g.40gb gi=1g.10gb "
                       "gi=1g.10gb+me\nmodel=NVIDIA_H100_80GB_HBM3 mig=off\ngpu=* mig=on\n";
    MigLayout layout = parsed(text);
    EXPECT_EQ(layout.render(), "gpu=1 mig=on gi=3g.40gb/1c.3g.40gb*2 gi=1g.10gb*2 gi=1g.10gb+me\n"
                               "model=NVIDIA_H100_80GB_HBM3 mig=off\n"
                               "gpu=* mig=on\n");
    MigLayout again = parsed(layout.render());
    ASSERT_EQ(again.entries().size(), layout.entries().size());
    for (size_t i = 0; i < again.entries().size(); ++i) {
        EXPECT_TRUE(again.entries()[i].layout.same_as(layout.entries()[i].layout));
    }
}

TEST(MigLayout, ComputeInstancesFitTheirGpuInstance) {
    EXPECT_EQ(ci_slices_in("1c.3g.40gb", "3g.40gb"), 1u);
    EXPECT_EQ(ci_slices_in("2c.3g.40gb", "3g.40gb"), 2u);
    EXPECT_EQ(ci_slices_in("3g.40gb", "3g.40gb"), 3u);
    EXPECT_EQ(ci_slices_in("3c.3g.40gb", "3g.40gb"), std::nullopt); // named 3g.40gb
    EXPECT_EQ(ci_slices_in("1c.2g.20gb", "3g.40gb"), std::nullopt);
    EXPECT_EQ(ci_slices_in("1g.10gb", "1g.10gb+me"), 1u);
    EXPECT_EQ(gi_slices("7g.80gb"), 7u);
    EXPECT_EQ(gi_slices("1c.3g.40gb"), 0u);
}

TEST(MigLayout, EveryMalformedLineIsRefusedWithItsFileAndLine) {
    struct Case {
        const char* text;
        const char* says;
    };
    const Case cases[] = {
        {"gpu=0 mig=off\nmig=on gi=1g.10gb\n", ":2: the line names no GPU"},
        {"gpu=0\n", ":1: say mig=on or mig=off"},
        {"gpu=0 mig=yes\n", "it is on or off"},
        {"gpu=0 mig=on mig=on\n", "mig= given twice"},
        {"gpu=0 mig=off gi=1g.10gb\n", "gi= needs mig=on"},
        {"gpu=0 model=x mig=off\n", "one gpu= or model="},
        {"gpu=0 mig=off\ngpu=0 mig=on\n", ":2: gpu=0 is named twice (also line 1)"},
        {"gpu=* mig=off\ngpu=* mig=on\n", "gpu=* is named twice"},
        {"model=nvidia_h100 mig=off\nmodel=NVIDIA_H100 mig=on\n", "named twice"},
        {"gpu=GPU-AB mig=off\ngpu=GPU-ab mig=on\n", "named twice"},
        {"gpu=254 mig=off\n", ":1:"},
        {"gpu=0 mig=on gi=1c.3g.40gb\n", "not a GPU-instance profile"},
        {"gpu=0 mig=on gi=10gb\n", "not a GPU-instance profile"},
        {"gpu=0 mig=on gi=1g.10gb*0\n", "a count is written *N"},
        {"gpu=0 mig=on gi=1g.10gb*16\n", "a count is written *N"},
        {"gpu=0 mig=on gi=1g.10gb*8 gi=1g.10gb*8\n", "more than 15 GPU instances"},
        {"gpu=0 mig=on gi=3g.40gb/\n", "after '/'"},
        {"gpu=0 mig=on gi=3g.40gb/1c.3g.40gb,\n", "after '/'"},
        {"gpu=0 mig=on gi=3g.40gb/1c.2g.20gb\n", "not a compute-instance profile of a 3g.40gb"},
        {"gpu=0 mig=on gi=3g.40gb/2c.3g.40gb*2\n", "take 4 slices, more than the 3"},
        {"gpu=0 mig=on gi=3g.40gb/3g.40gb,1c.3g.40gb\n", "take 4 slices"},
        {"gpu=0 mig=on gi=7g.80gb/1c.7g.80gb*4,1c.7g.80gb*5\n", "more than 8 compute instances"},
        {"gpu=0 mig=on color=red\n", "unknown key 'color'"},
        {"gpu=0 mig\n", "'mig' is not key=value"},
        {"model=NVIDIA;rm mig=off\n", "each space written as _"},
    };
    for (const Case& c : cases) {
        std::string said = failure(c.text);
        EXPECT_TRUE(said.starts_with("/etc/gpu-mig-layout.conf:")) << said;
        EXPECT_NE(said.find(c.says), std::string::npos) << c.text << " -> " << said;
        EXPECT_EQ(said.find('\n'), std::string::npos) << said;
    }
}

TEST(MigLayout, NoFileIsNoLayoutAndABadFileFailsToLoad) {
    testing::TempDir dir;
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    auto none = MigLayout::load(*root);
    ASSERT_TRUE(none) << none.error().text();
    EXPECT_FALSE(none->has_value());

    std::filesystem::create_directories(dir.path() + "/etc");
    std::ofstream(dir.path() + "/etc/gpu-mig-layout.conf") << "gpu=* mig=on gi=2g.20gb*3\n";
    auto one = MigLayout::load(*root);
    ASSERT_TRUE(one) << one.error().text();
    ASSERT_TRUE(one->has_value());
    EXPECT_EQ((*one)->entries().size(), 1u);
    EXPECT_NE((*one)->source().find("/etc/gpu-mig-layout.conf"), std::string::npos);

    std::ofstream(dir.path() + "/etc/gpu-mig-layout.conf") << "gpu=* mig=maybe\n";
    auto bad = MigLayout::load(*root);
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().text().find("gpu-mig-layout.conf:1:"), std::string::npos);
}

} // namespace gpuinit::mig
