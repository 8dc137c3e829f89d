#include "gpuinit/host/gpu_selector.hpp"
#include "gpuinit/host/pci.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

TEST(GpuSelector, MinorAddressOrUuidParsedOnce) {
    auto minor = GpuSelector::parse("3");
    ASSERT_TRUE(minor);
    EXPECT_EQ(minor->kind(), GpuSelector::Kind::Minor);
    EXPECT_EQ(minor->minor(), 3u);
    auto bdf = GpuSelector::parse("3B:00.0");
    ASSERT_TRUE(bdf);
    EXPECT_EQ(bdf->kind(), GpuSelector::Kind::Bdf);
    EXPECT_EQ(bdf->text(), "0000:3b:00.0");
    auto uuid = GpuSelector::parse("GPU-558ce120-5b8b-16a1-87d4-ce157bba3e9d");
    ASSERT_TRUE(uuid);
    EXPECT_EQ(uuid->kind(), GpuSelector::Kind::Uuid);
    for (const char* bad :
         {"", "254", "-1", "nvidia0", "GPU-", "GPU-xyz", "17:00", "GPU-1 2", "0000:17:20.0"}) {
        auto parsed = GpuSelector::parse(bad);
        EXPECT_FALSE(parsed) << bad;
    }
    auto refused = GpuSelector::parse("nvidia\x1b[0");
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().message.find('\x1b'), std::string::npos);
}

TEST(GpuSelector, MatchesAndSameness) {
    GpuIdentity gpu{2, "0000:37:00.0", "GPU-ABCD"};
    EXPECT_TRUE(GpuSelector::parse("2")->matches(gpu));
    EXPECT_TRUE(GpuSelector::parse("37:00.0")->matches(gpu));
    EXPECT_TRUE(GpuSelector::parse("GPU-abcd")->matches(gpu)); // case-insensitive
    EXPECT_FALSE(GpuSelector::parse("GPU-abcd")->matches({2, "0000:37:00.0", ""}));
    EXPECT_FALSE(GpuSelector::parse("1")->matches(gpu));
    EXPECT_TRUE(GpuSelector::parse("GPU-AB")->same_as(*GpuSelector::parse("GPU-ab")));
    EXPECT_FALSE(GpuSelector::parse("2")->same_as(*GpuSelector::parse("37:00.0")));
}

TEST(PciAddress, Normalizes) {
    EXPECT_EQ(normalize_bdf("17:00.0"), "0000:17:00.0");
    EXPECT_EQ(normalize_bdf("0000:3B:00.0"), "0000:3b:00.0");
    EXPECT_EQ(normalize_bdf("10000:00:01.0"), "10000:00:01.0");
    EXPECT_FALSE(normalize_bdf("17:00"));
    EXPECT_FALSE(normalize_bdf("0000:17:20.0")); // device > 0x1f
    EXPECT_FALSE(normalize_bdf("0000:17:00.8"));
    EXPECT_FALSE(normalize_bdf("../../etc"));
}

} // namespace gpuinit
