// The stand-in driver's MIG state (tests/fixture/mig_standin.h) against the
// real machines' output: the profiles and placements of the H100 capture,
// the GI ids of the A100 capture, and the failures nvml.h documents.
#include "mig_standin.h"

#include <fstream>
#include <gtest/gtest.h>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace {

std::string capture(const std::string& path) {
    std::ifstream in(std::string(GPUINIT_TESTS_DIR) + "/fixture/captures/" + path);
    EXPECT_TRUE(in.good()) << path;
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// `nvidia-smi mig -lgipp`: profile id -> (placement starts, size).
std::vector<std::tuple<unsigned, std::vector<unsigned>, unsigned>> lgipp(const std::string& text) {
    std::vector<std::tuple<unsigned, std::vector<unsigned>, unsigned>> rows;
    std::regex row(R"(Profile ID +(\d+) Placements? *: \{([0-9,]+)\}:(\d+))");
    for (std::sregex_iterator it(text.begin(), text.end(), row), end; it != end; ++it) {
        std::vector<unsigned> starts;
        std::stringstream list((*it)[2].str());
        for (std::string start; std::getline(list, start, ',');) {
            starts.push_back(static_cast<unsigned>(std::stoul(start)));
        }
        rows.emplace_back(std::stoul((*it)[1].str()), starts, std::stoul((*it)[3].str()));
    }
    return rows;
}

// `nvidia-smi mig -lgi`: (GI id, profile id, start, size) per row.
std::vector<std::tuple<unsigned, unsigned, unsigned, unsigned>> lgi(const std::string& text) {
    std::vector<std::tuple<unsigned, unsigned, unsigned, unsigned>> rows;
    std::regex row(R"(MIG \S+ +(\d+) +(\d+) +(\d+):(\d+))");
    for (std::sregex_iterator it(text.begin(), text.end(), row), end; it != end; ++it) {
        rows.emplace_back(std::stoul((*it)[2].str()), std::stoul((*it)[1].str()),
                          std::stoul((*it)[3].str()), std::stoul((*it)[4].str()));
    }
    return rows;
}

} // namespace

TEST(MigStandin, HasTheH100CapturesProfilesAndPlacements) {
    standin_gpu gpu;
    standin_h100(&gpu, 1);
    auto rows = lgipp(capture("h100-580.159.04/mig-lgipp.txt"));
    ASSERT_EQ(rows.size(), gpu.profile_count);
    for (const auto& [id, starts, size] : rows) {
        const standin_gi_profile* profile = standin_find_profile(&gpu, id);
        ASSERT_NE(profile, nullptr) << id;
        EXPECT_EQ(profile->size, size) << id;
        EXPECT_EQ(std::vector<unsigned>(profile->starts, profile->starts + profile->start_count),
                  starts)
            << id;
    }
    // -lgip's "Instances Free/Total" column: the 1g.10gb+me row says 1/1.
    std::string lgip = capture("h100-580.159.04/mig-lgip.txt");
    std::regex row(R"(MIG (\S+) +(\d+) +(\d+)/(\d+))");
    size_t seen = 0;
    for (std::sregex_iterator it(lgip.begin(), lgip.end(), row), end; it != end; ++it, ++seen) {
        const standin_gi_profile* profile =
            standin_find_profile(&gpu, static_cast<unsigned>(std::stoul((*it)[2].str())));
        ASSERT_NE(profile, nullptr);
        EXPECT_EQ(profile->name, (*it)[1].str());
        EXPECT_EQ(profile->max_instances, std::stoul((*it)[4].str()));
    }
    EXPECT_EQ(seen, gpu.profile_count);
}

TEST(MigStandin, GivesTheGiIdsARealA100Gave) {
    auto rows = lgi(capture("a100-pcie-40gb-510.47.03/mig-lgi.txt"));
    ASSERT_EQ(rows.size(), 4u);
    for (const auto& [gi, profile, start, size] : rows) {
        EXPECT_EQ(standin_gi_id(start, size), gi) << start << ":" << size;
    }
    // Created in the order the capture lists them, on the same geometry,
    // the driver's own choice of placement gives those ids.
    standin_gpu gpu;
    standin_h100(&gpu, 1);
    const unsigned h100_profile[] = {19, 19, 14, 9}; // 1g, 1g, 2g, 3g
    for (size_t i = 0; i < rows.size(); ++i) {
        unsigned id = 99;
        ASSERT_EQ(standin_create_gi(&gpu, h100_profile[i], nullptr, &id), STANDIN_SUCCESS);
        EXPECT_EQ(id, std::get<0>(rows[i]));
        EXPECT_EQ(gpu.gis[id].start, std::get<2>(rows[i]));
    }
}

TEST(MigStandin, ACreateThatDoesNotFitFailsAsNvmlSays) {
    standin_gpu gpu;
    standin_h100(&gpu, 1);
    unsigned id = 0;
    for (int i = 0; i < 7; ++i) {
        ASSERT_EQ(standin_create_gi(&gpu, 19, nullptr, &id), STANDIN_SUCCESS);
    }
    EXPECT_EQ(standin_create_gi(&gpu, 19, nullptr, &id), STANDIN_INSUFFICIENT_RESOURCES);
    EXPECT_EQ(standin_create_gi(&gpu, 0, nullptr, &id), STANDIN_INSUFFICIENT_RESOURCES);
    EXPECT_EQ(standin_create_gi(&gpu, 42, nullptr, &id), STANDIN_INVALID_ARGUMENT);

    standin_h100(&gpu, 1);
    ASSERT_EQ(standin_create_gi(&gpu, 5, nullptr, &id), STANDIN_SUCCESS); // 4g.40gb at 0
    unsigned at = 0;
    EXPECT_EQ(standin_create_gi(&gpu, 9, &at, &id), STANDIN_INSUFFICIENT_RESOURCES);
    at = 2;
    EXPECT_EQ(standin_create_gi(&gpu, 9, &at, &id), STANDIN_INVALID_ARGUMENT); // not a placement
    ASSERT_EQ(standin_create_gi(&gpu, 9, nullptr, &id), STANDIN_SUCCESS);
    EXPECT_EQ(gpu.gis[id].start, 4u);
    EXPECT_EQ(standin_create_gi(&gpu, 19, nullptr, &id), STANDIN_INSUFFICIENT_RESOURCES);

    standin_h100(&gpu, 1);
    ASSERT_EQ(standin_create_gi(&gpu, 20, nullptr, &id), STANDIN_SUCCESS); // one +me at a time
    EXPECT_EQ(standin_create_gi(&gpu, 20, nullptr, &id), STANDIN_INSUFFICIENT_RESOURCES);

    standin_h100(&gpu, 0);
    EXPECT_EQ(standin_create_gi(&gpu, 19, nullptr, &id), STANDIN_NOT_SUPPORTED);
}

TEST(MigStandin, ComputeInstancesShareTheirGisSlices) {
    standin_gpu gpu;
    standin_h100(&gpu, 1);
    unsigned gi = 0;
    ASSERT_EQ(standin_create_gi(&gpu, 9, nullptr, &gi), STANDIN_SUCCESS); // 3g.40gb
    unsigned ci = 99;
    EXPECT_EQ(standin_create_ci(&gpu, gi, 4, &ci), STANDIN_NOT_SUPPORTED);
    ASSERT_EQ(standin_create_ci(&gpu, gi, 1, &ci), STANDIN_SUCCESS);
    EXPECT_EQ(ci, 0u);
    ASSERT_EQ(standin_create_ci(&gpu, gi, 1, &ci), STANDIN_SUCCESS);
    EXPECT_EQ(ci, 1u);
    EXPECT_EQ(standin_create_ci(&gpu, gi, 2, &ci), STANDIN_INSUFFICIENT_RESOURCES);
    char name[32];
    standin_ci_name(&gpu.gis[gi], 1, name, sizeof(name));
    EXPECT_STREQ(name, "1c.3g.40gb");
    standin_ci_name(&gpu.gis[gi], 3, name, sizeof(name));
    EXPECT_STREQ(name, "3g.40gb");

    EXPECT_EQ(standin_destroy_gi(&gpu, gi), STANDIN_IN_USE);
    EXPECT_EQ(standin_destroy_ci(&gpu, gi, 0), STANDIN_SUCCESS);
    EXPECT_EQ(standin_destroy_ci(&gpu, gi, 0), STANDIN_INVALID_ARGUMENT);
    EXPECT_EQ(standin_destroy_ci(&gpu, gi, 1), STANDIN_SUCCESS);
    EXPECT_EQ(standin_destroy_gi(&gpu, gi), STANDIN_SUCCESS);
    EXPECT_EQ(standin_destroy_gi(&gpu, gi), STANDIN_INVALID_ARGUMENT);
}

TEST(MigStandin, AResetTakesThePendingModeAndLosesEveryInstance) {
    standin_gpu gpu;
    standin_h100(&gpu, 1);
    unsigned gi = 0;
    ASSERT_EQ(standin_create_gi(&gpu, 0, nullptr, &gi), STANDIN_SUCCESS);
    EXPECT_EQ(gi, 0u);
    standin_reset(&gpu);
    EXPECT_EQ(gpu.gis[0].used, 0);
    EXPECT_EQ(gpu.mig, 1);
    gpu.mig_pending = 0;
    standin_reset(&gpu);
    EXPECT_EQ(gpu.mig, 0);
}
