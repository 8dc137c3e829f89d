// nvidia-smi mig -lgipp: each GPU-instance profile's placements, which
// gpu-mig apply places a layout's GPU instances by; from the real H100 and
// RTX PRO 6000 Blackwell captures, and refused whole when malformed.
#include "gpuinit/mig/names.hpp"

#include <fstream>
#include <gtest/gtest.h>
#include <sstream>

namespace gpuinit {

namespace {

std::string capture(const std::string& path) {
    std::ifstream in(std::string(GPUINIT_TESTS_DIR) + "/fixture/captures/" + path);
    EXPECT_TRUE(in.good()) << path;
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

} // namespace

TEST(SmiPlacements, ReadsTheH100Capture) {
    auto rows = parse_nvidia_smi_lgipp(capture("h100-580.159.04/mig-lgipp.txt"), "lgipp");
    ASSERT_TRUE(rows) << rows.error().text();
    ASSERT_EQ(rows->size(), 7u);
    EXPECT_EQ((*rows)[0].profile_id, 19u);
    EXPECT_EQ((*rows)[0].starts, (std::vector<unsigned>{0, 1, 2, 3, 4, 5, 6}));
    EXPECT_EQ((*rows)[0].size, 1u);
    EXPECT_EQ((*rows)[4].profile_id, 9u);
    EXPECT_EQ((*rows)[4].starts, (std::vector<unsigned>{0, 4}));
    EXPECT_EQ((*rows)[4].size, 4u);
    EXPECT_EQ((*rows)[6].profile_id, 0u); // "Placement :" for a single one
    EXPECT_EQ((*rows)[6].starts, (std::vector<unsigned>{0}));
    EXPECT_EQ((*rows)[6].size, 8u);
}

TEST(SmiPlacements, ReadsTheBlackwellCapture) {
    auto rows =
        parse_nvidia_smi_lgipp(capture("rtx-pro-6000-blackwell-610.43.02/mig-lgipp.txt"), "lgipp");
    ASSERT_TRUE(rows) << rows.error().text();
    ASSERT_EQ(rows->size(), 11u);
    EXPECT_EQ((*rows)[0].starts, (std::vector<unsigned>{0, 3, 6, 9}));
    EXPECT_EQ((*rows)[0].size, 3u);
    EXPECT_EQ(rows->back().size, 12u);
}

TEST(SmiPlacements, RefusesWhatIsNotItsOutput) {
    for (const char* text :
         {"GPU  0 Profile ID 19 Placements: {0,1}\n", "GPU  0 Profile ID 19 Placements: {}:1\n",
          "GPU  0 Profile ID 19 Placements: {0,x}:1\n", "GPU  0 Profile ID 19 Placements: {64}:1\n",
          "GPU  0 Profile ID 19 Placements: {0}:0\n", "GPU  0 Profile 19 Placements: {0}:1\n",
          "GPU  0 Profile ID 19 Placements: {0}:1\n"
          "GPU  0 Profile ID 19 Placements: {1}:1\n"}) {
        auto rows = parse_nvidia_smi_lgipp(text, "lgipp");
        ASSERT_FALSE(rows) << text;
        EXPECT_TRUE(rows.error().text().starts_with("lgipp:")) << rows.error().text();
    }
    auto none = parse_nvidia_smi_lgipp("No MIG-enabled devices found.\n", "lgipp");
    ASSERT_TRUE(none);
    EXPECT_TRUE(none->empty());
}

} // namespace gpuinit
