// nvidia-smi mig -lgip: each GPU's profile names and ids, which gpu-mig
// apply turns a layout's names into ids by (ids differ between GPU models);
// from the real H100, A100 and RTX PRO 6000 Blackwell captures, and refused
// whole when malformed.
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

std::vector<std::pair<std::string, unsigned>> names_and_ids(const std::vector<SmiGiProfile>& rows) {
    std::vector<std::pair<std::string, unsigned>> out;
    out.reserve(rows.size());
    for (const SmiGiProfile& row : rows) {
        out.emplace_back(row.profile, row.profile_id);
    }
    return out;
}

const char* const kRow =
    "|   0  MIG 1g.10gb         19     7/7        9.75       No     16     1     0   |\n"
    "|                                                               1     1     0   |\n";

} // namespace

TEST(SmiGiProfiles, ReadsTheH100Capture) {
    auto rows = parse_nvidia_smi_lgip(capture("h100-580.159.04/mig-lgip.txt"), "lgip");
    ASSERT_TRUE(rows) << rows.error().text();
    using P = std::pair<std::string, unsigned>;
    EXPECT_EQ(names_and_ids(*rows), (std::vector<P>{{"1g.10gb", 19},
                                                    {"1g.10gb+me", 20},
                                                    {"1g.20gb", 15},
                                                    {"2g.20gb", 14},
                                                    {"3g.40gb", 9},
                                                    {"4g.40gb", 5},
                                                    {"7g.80gb", 0}}));
    EXPECT_EQ((*rows)[0].free, 7u);
    EXPECT_EQ((*rows)[0].total, 7u);
    EXPECT_EQ((*rows)[0].line, 6u);
    EXPECT_EQ((*rows)[4].total, 2u);
    const SmiGiProfile* found = find_gi_profile(*rows, 0, "3g.40gb");
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(found->profile_id, 9u);
    EXPECT_EQ(find_gi_profile(*rows, 1, "3g.40gb"), nullptr);
    EXPECT_EQ(find_gi_profile(*rows, 0, "3g.20gb"), nullptr);
}

// An A100 40GB names id 19 1g.5gb: a name is turned into an id per GPU.
TEST(SmiGiProfiles, ReadsTheA100CaptureWithItsOwnNames) {
    auto rows = parse_nvidia_smi_lgip(capture("a100-pcie-40gb-510.47.03/mig-lgip.txt"), "lgip");
    ASSERT_TRUE(rows) << rows.error().text();
    using P = std::pair<std::string, unsigned>;
    EXPECT_EQ(names_and_ids(*rows), (std::vector<P>{{"1g.5gb", 19},
                                                    {"1g.5gb+me", 20},
                                                    {"2g.10gb", 14},
                                                    {"3g.20gb", 9},
                                                    {"4g.20gb", 5},
                                                    {"7g.40gb", 0}}));
    EXPECT_EQ((*rows)[0].free, 0u); // all taken in that post
    EXPECT_EQ((*rows)[0].total, 7u);
}

TEST(SmiGiProfiles, ReadsTheBlackwellCapture) {
    auto rows =
        parse_nvidia_smi_lgip(capture("rtx-pro-6000-blackwell-610.43.02/mig-lgip.txt"), "lgip");
    ASSERT_TRUE(rows) << rows.error().text();
    const SmiGiProfile* all = find_gi_profile(*rows, 0, "1g.24gb+me.all");
    ASSERT_NE(all, nullptr);
    EXPECT_EQ(all->profile_id, 65u);
    const SmiGiProfile* no_me = find_gi_profile(*rows, 0, "1g.24gb-me");
    ASSERT_NE(no_me, nullptr);
    EXPECT_EQ(no_me->profile_id, 67u);
}

TEST(SmiGiProfiles, ReadsSeveralGpus) {
    std::string two = std::string(kRow) +
                      "|   1  MIG 1g.10gb         19     6/7        9.75       No     16     1     "
                      "0   |\n"
                      "|                                                               1     1     "
                      "0   |\n";
    auto rows = parse_nvidia_smi_lgip(two, "lgip");
    ASSERT_TRUE(rows) << rows.error().text();
    ASSERT_EQ(rows->size(), 2u);
    EXPECT_EQ((*rows)[1].gpu_index, 1u);
    EXPECT_EQ((*rows)[1].free, 6u);
    ASSERT_NE(find_gi_profile(*rows, 1, "1g.10gb"), nullptr);
    EXPECT_EQ(find_gi_profile(*rows, 1, "1g.10gb")->line, 3u);
}

TEST(SmiGiProfiles, RefusesWhatIsNotItsOutput) {
    const std::string second =
        "|                                                               1     1     0   |\n";
    for (const std::string& text : std::vector<std::string>{
             // no CE JPEG OFA line
             std::string("|   0  MIG 1g.10gb         19     7/7        9.75       No     16     1  "
                         "   0   |\n"),
             std::string("|   0  MIG 1g.10gb         19     7/7        9.75       No     16     1  "
                         "   0   |\n"
                         "+----+\n"),
             // free above total, bad fraction, a bad P2P, an id out of range
             "|   0  MIG 1g.10gb  19  8/7  9.75  No  16  1  0  |\n" + second,
             "|   0  MIG 1g.10gb  19  7/7  9.  No  16  1  0  |\n" + second,
             "|   0  MIG 1g.10gb  19  7/7  9.75  Maybe  16  1  0  |\n" + second,
             "|   0  MIG 1g.10gb  256  7/7  9.75  No  16  1  0  |\n" + second,
             "|   0  GPU 1g.10gb  19  7/7  9.75  No  16  1  0  |\n" + second,
             "|   0  MIG 1x.10gb  19  7/7  9.75  No  16  1  0  |\n" + second,
             "|   0  MIG 1g.10gb  19  7/7  9.75  No  16  1  0  |\n|  1  1  |\n",
             // twice, by id and by name
             std::string(kRow) + kRow,
             std::string(kRow) + "|   0  MIG 1g.10gb  20  7/7  9.75  No  16  1  0  |\n" + second,
             "GPU instance profiles:\n",
         }) {
        auto rows = parse_nvidia_smi_lgip(text, "lgip");
        ASSERT_FALSE(rows) << text;
        EXPECT_TRUE(rows.error().text().starts_with("lgip:")) << rows.error().text();
    }
    auto none = parse_nvidia_smi_lgip("No MIG-enabled devices found.\n", "lgip");
    ASSERT_TRUE(none);
    EXPECT_TRUE(none->empty());
}

} // namespace gpuinit
