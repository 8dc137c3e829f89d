// The stand-in driver's MIG state (tests/fixture/mig_standin.h) against the
// real machines' output: the profiles and placements of the H100 capture,
// the GI ids of the A100 capture, and the failures nvml.h documents.
#include "machine_fixture.hpp"
#include "mig_standin.h"
#include "temp_dir.hpp"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <regex>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <tuple>
#include <utility>
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
    // The post the capture comes from (captures/README.md) made them with
    // `nvidia-smi mig -cgi 9,19,14,19` on the empty GPU; on the same
    // geometry, without placements, the driver's choice gives those ids.
    standin_gpu gpu;
    standin_h100(&gpu, 1);
    const std::vector<std::pair<unsigned, unsigned>> created = {
        {9, 1}, {19, 11}, {14, 6}, {19, 12}}; // (profile, GI id), as it printed them
    for (const auto& [profile, want] : created) {
        unsigned id = 99;
        ASSERT_EQ(standin_create_gi(&gpu, profile, nullptr, &id), STANDIN_SUCCESS);
        EXPECT_EQ(id, want) << profile;
    }
    for (const auto& [gi, profile, start, size] : rows) {
        ASSERT_TRUE(gpu.gis[gi].used) << gi;
        EXPECT_EQ(gpu.gis[gi].start, start) << gi;
    }
}

TEST(MigStandin, PlacesUnplacedGisWhereNvidiasMigUserGuideShows) {
    // The guide's three nvidia-smi mig -cgi sequences on an empty A100
    // (mig_standin.h): profile ids in, placement starts out; 99: the
    // create fails with Insufficient Resources.
    const std::vector<std::vector<std::pair<unsigned, unsigned>>> sequences = {
        {{19, 6}, {19, 4}, {14, 0}, {9, 99}},
        {{9, 4}, {19, 0}, {14, 2}, {19, 1}},
        {{14, 4}, {19, 6}, {19, 0}, {19, 1}, {19, 2}, {19, 3}},
    };
    for (const auto& sequence : sequences) {
        standin_gpu gpu;
        standin_h100(&gpu, 1);
        for (const auto& [profile, start] : sequence) {
            unsigned id = 99;
            int result = standin_create_gi(&gpu, profile, nullptr, &id);
            if (start == 99) {
                EXPECT_EQ(result, STANDIN_INSUFFICIENT_RESOURCES) << profile;
                continue;
            }
            ASSERT_EQ(result, STANDIN_SUCCESS) << profile;
            EXPECT_EQ(gpu.gis[id].start, start) << profile;
        }
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

namespace {

void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
}

} // namespace

TEST(MigStandin, ItsStateSurvivesAFileWithTheDriversIdsAndGaps) {
    gpuinit::testing::TempDir dir;
    std::string path = dir / "gpu0";
    standin_gpu gpu;
    ASSERT_EQ(standin_load(&gpu, path.c_str()), 0); // no file: MIG off, nothing
    EXPECT_EQ(gpu.mig, 0);
    gpu.mig = gpu.mig_pending = 1;
    unsigned gi = 0;
    unsigned ci = 0;
    ASSERT_EQ(standin_create_gi(&gpu, 19, nullptr, &gi), STANDIN_SUCCESS);
    ASSERT_EQ(standin_create_gi(&gpu, 9, nullptr, &gi), STANDIN_SUCCESS);
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(standin_create_ci(&gpu, gi, 1, &ci), STANDIN_SUCCESS);
    }
    ASSERT_EQ(standin_destroy_ci(&gpu, gi, 1), STANDIN_SUCCESS); // a gap in the CI ids
    gpu.mig_pending = 0;
    ASSERT_EQ(standin_save(&gpu, path.c_str()), 0);

    standin_gpu again;
    ASSERT_EQ(standin_load(&again, path.c_str()), 0);
    EXPECT_EQ(again.mig, 1);
    EXPECT_EQ(again.mig_pending, 0);
    for (unsigned id = 0; id < STANDIN_MAX_GIS; ++id) {
        ASSERT_EQ(again.gis[id].used, gpu.gis[id].used) << id;
        if (!gpu.gis[id].used) {
            continue;
        }
        EXPECT_EQ(again.gis[id].profile, gpu.gis[id].profile) << id;
        EXPECT_EQ(again.gis[id].start, gpu.gis[id].start) << id;
        for (unsigned c = 0; c < STANDIN_MAX_CIS; ++c) {
            EXPECT_EQ(again.gis[id].cis[c].used, gpu.gis[id].cis[c].used) << id << "/" << c;
            EXPECT_EQ(again.gis[id].cis[c].slices, gpu.gis[id].cis[c].slices) << id << "/" << c;
        }
    }
}

TEST(MigStandin, RefusesAStateFileTheDriverCouldNotHaveMade) {
    gpuinit::testing::TempDir dir;
    std::string path = dir / "gpu0";
    const char* bad[] = {
        "gi 11 19 0\n",                            // MIG off
        "mig 1 1\ngi 7 19 0\n",                    // start 0's eighth is GI 11
        "mig 1 1\ngi 11 19 0\ngi 11 19 0\n",       // one GI twice
        "mig 1 1\ngi 1 5 0\n",                     // the 4g.40gb at 0 is GI 2
        "mig 1 1\ngi 2 9 0\ngi 1 5 0\n",           // overlapping
        "mig 1 1\ngi 11 19 0\nci 11 0 2\n",        // a CI larger than its GI
        "mig 1 1\ngi 2 9 0\nci 2 0 2\nci 2 1 2\n", // more slices than the GI has
        "mig 1 1\nci 2 0 1\n",                     // a CI with no GI
        "mig 1 1\ngi 11 19 0\nmig 0 0\n",          // the mode after its instances
        "mig 1 1\ngi 11 19 0 junk\n",
        "mig 2 1\n",
        "mig 1 1", // cut short
    };
    for (const char* text : bad) {
        write_file(path, text);
        standin_gpu gpu;
        errno = 0;
        EXPECT_EQ(standin_load(&gpu, path.c_str()), -1) << text;
        EXPECT_EQ(errno, EINVAL) << text;
        EXPECT_EQ(gpu.mig, 0) << text; // nothing half loaded
    }
    write_file(path, "mig 1 1\ngi 2 9 0\nci 2 5 1\nci 2 0 2\n");
    standin_gpu gpu;
    ASSERT_EQ(standin_load(&gpu, path.c_str()), 0);
    EXPECT_EQ(gpu.gis[2].cis[5].slices, 1u);
    EXPECT_EQ(gpu.gis[2].cis[0].slices, 2u);
}

namespace {

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

bool exists(const std::string& path) {
    struct stat st {};
    return lstat(path.c_str(), &st) == 0;
}

} // namespace

TEST(MigStandin, WritesAndRemovesTheCapFilesAsTheDriverDoes) {
    gpuinit::testing::TempDir dir;
    std::string caps = dir.path();
    standin_gpu gpu;
    standin_h100(&gpu, 1);
    unsigned gi = 0;
    unsigned ci = 0;
    ASSERT_EQ(standin_create_gi(&gpu, 9, nullptr, &gi), STANDIN_SUCCESS); // GI 1
    ASSERT_EQ(standin_create_ci(&gpu, gi, 1, &ci), STANDIN_SUCCESS);
    ASSERT_EQ(standin_create_ci(&gpu, gi, 2, &ci), STANDIN_SUCCESS);
    ASSERT_EQ(standin_write_caps(&gpu, 2, caps.c_str(), 1), 0);

    std::string gi_dir = caps + "/gpu2/mig/gi" + std::to_string(gi);
    EXPECT_EQ(read_text(gi_dir + "/access"),
              "DeviceFileMinor: " + std::to_string(gpuinit::testing::oracle_gi_minor(2, gi)) +
                  "\nDeviceFileMode: 292\nDeviceFileModify: 1\n");
    EXPECT_EQ(read_text(gi_dir + "/ci1/access"),
              "DeviceFileMinor: " + std::to_string(gpuinit::testing::oracle_ci_minor(2, gi, 1)) +
                  "\nDeviceFileMode: 292\nDeviceFileModify: 1\n");
    struct stat st {};
    ASSERT_EQ(stat((gi_dir + "/ci0/access").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0444u);
    ASSERT_EQ(stat(gi_dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0555, 0555u); // the owner's write bit: mig_standin.c
    EXPECT_FALSE(exists(gi_dir + "/ci2"));

    // Root set DeviceFileModify 0 on CI 0's file: it stays as written, while
    // the CI does; CI 1 destroyed loses its file; a new GI gets the driver's.
    std::string kept = gi_dir + "/ci0/access";
    chmod(kept.c_str(), 0644);
    {
        std::ofstream out(kept);
        out << "DeviceFileMinor: 1\nDeviceFileMode: 292\nDeviceFileModify: 0\n";
    }
    ASSERT_EQ(standin_destroy_ci(&gpu, gi, 1), STANDIN_SUCCESS);
    unsigned other = 0;
    ASSERT_EQ(standin_create_gi(&gpu, 19, nullptr, &other), STANDIN_SUCCESS);
    ASSERT_EQ(standin_write_caps(&gpu, 2, caps.c_str(), 0), 0);
    EXPECT_NE(read_text(kept).find("DeviceFileModify: 0"), std::string::npos);
    EXPECT_FALSE(exists(gi_dir + "/ci1"));
    EXPECT_NE(read_text(caps + "/gpu2/mig/gi" + std::to_string(other) + "/access")
                  .find("DeviceFileModify: 0"),
              std::string::npos);

    ASSERT_EQ(standin_destroy_ci(&gpu, gi, 0), STANDIN_SUCCESS);
    ASSERT_EQ(standin_destroy_gi(&gpu, gi), STANDIN_SUCCESS);
    ASSERT_EQ(standin_write_caps(&gpu, 2, caps.c_str(), 1), 0);
    EXPECT_FALSE(exists(gi_dir));
    EXPECT_TRUE(exists(caps + "/gpu2/mig")); // there with or without instances
}

namespace {

// The stand-in kernel module's nvidia-test/mig records (nvidia-main.c
// mig_show) of two GPUs: minor 0 with a 1g.10gb (GI 13 at start 6) and a
// 3g.40gb (GI 1 at 4) with two 1-slice CIs, minor 1 with a module-made
// instance (no profile).
const char* const kDriverState = "gpu 0 mig 1 1\n"
                                 "gi 0 1 9 4\n"
                                 "ci 0 1 0 1\n"
                                 "ci 0 1 2 1\n"
                                 "gpu 1 mig 1 0\n"
                                 "gi 1 1\n"
                                 "ci 1 1 0\n";

// Restores the environment variable the driver mode reads.
class DriverMode {
  public:
    explicit DriverMode(const std::string& driver) {
        setenv(STANDIN_DRIVER_ENV, driver.c_str(), 1);
    }
    ~DriverMode() { unsetenv(STANDIN_DRIVER_ENV); }
    DriverMode(const DriverMode&) = delete;
    DriverMode& operator=(const DriverMode&) = delete;
};

} // namespace

TEST(MigStandinDriver, ReadsOneGpusStateFromTheDriversRecords) {
    gpuinit::testing::TempDir dir;
    std::string driver = dir / "mig";
    write_file(driver, kDriverState);
    standin_gpu gpu;
    ASSERT_EQ(standin_driver_load(&gpu, driver.c_str(), 0), 0);
    EXPECT_EQ(gpu.mig, 1);
    ASSERT_TRUE(gpu.gis[1].used);
    EXPECT_EQ(gpu.gis[1].profile->id, 9u);
    EXPECT_EQ(gpu.gis[1].start, 4u);
    EXPECT_TRUE(gpu.gis[1].cis[0].used);
    EXPECT_FALSE(gpu.gis[1].cis[1].used); // the driver's gap stays
    EXPECT_TRUE(gpu.gis[1].cis[2].used);
    for (unsigned id = 0; id < STANDIN_MAX_GIS; ++id) {
        EXPECT_EQ(gpu.gis[id].used, id == 1) << id;
    }

    // An instance the module made (mig=N) has no profile: not the stand-in's.
    errno = 0;
    EXPECT_EQ(standin_driver_load(&gpu, driver.c_str(), 1), -1);
    EXPECT_EQ(errno, EINVAL);
    // A GPU the driver does not list has no MIG.
    ASSERT_EQ(standin_driver_load(&gpu, driver.c_str(), 2), 0);
    EXPECT_EQ(gpu.mig, 0);
    // A record the driver could not have made (GI 2 is the half at 0).
    write_file(driver, "gpu 0 mig 1 1\ngi 0 2 9 4\n");
    EXPECT_EQ(standin_driver_load(&gpu, driver.c_str(), 0), -1);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(standin_driver_load(&gpu, (dir / "none").c_str(), 0), -1);
    EXPECT_EQ(errno, ENOENT);
}

TEST(MigStandinDriver, SavesAsTheDriversCommandsDestroysFirst) {
    gpuinit::testing::TempDir dir;
    std::string driver = dir / "mig";
    write_file(driver, kDriverState);
    standin_gpu gpu;
    ASSERT_EQ(standin_driver_load(&gpu, driver.c_str(), 0), 0);
    // CI 2 goes, GI 1 keeps CI 0; a 2g.20gb and its full CI come.
    ASSERT_EQ(standin_destroy_ci(&gpu, 1, 2), STANDIN_SUCCESS);
    unsigned gi = 0;
    unsigned ci = 0;
    ASSERT_EQ(standin_create_gi(&gpu, 14, nullptr, &gi), STANDIN_SUCCESS);
    ASSERT_EQ(standin_create_ci(&gpu, gi, 2, &ci), STANDIN_SUCCESS);
    ASSERT_EQ(standin_driver_save(&gpu, driver.c_str(), 0), 0);
    std::string text = read_text(driver);
    ASSERT_EQ(text.substr(0, std::string(kDriverState).size()), kDriverState);
    EXPECT_EQ(text.substr(std::string(kDriverState).size()),
              "destroy-ci 0 1 2\n"
              "create-gi 0 " +
                  std::to_string(gi) + " 14 0\ncreate-ci 0 " + std::to_string(gi) + " 0 2\n");

    // A reset with MIG going off: every instance destroyed before the mode.
    write_file(driver, kDriverState);
    ASSERT_EQ(standin_driver_load(&gpu, driver.c_str(), 0), 0);
    gpu.mig_pending = 0;
    standin_reset(&gpu);
    ASSERT_EQ(standin_driver_save(&gpu, driver.c_str(), 0), 0);
    EXPECT_EQ(read_text(driver).substr(std::string(kDriverState).size()),
              "destroy-ci 0 1 0\ndestroy-ci 0 1 2\ndestroy-gi 0 1\nmode 0 0 0\n");

    // Nothing changed: nothing written.
    write_file(driver, kDriverState);
    ASSERT_EQ(standin_driver_load(&gpu, driver.c_str(), 0), 0);
    ASSERT_EQ(standin_driver_save(&gpu, driver.c_str(), 0), 0);
    EXPECT_EQ(read_text(driver), kDriverState);
}

TEST(MigStandinDriver, TheEnvironmentTurnsLoadSaveAndCapsToTheDriver) {
    gpuinit::testing::TempDir dir;
    std::string driver = dir / "mig";
    write_file(driver, kDriverState);
    DriverMode mode(driver);
    standin_gpu gpu;
    // The path's gpu<N> names the minor; no state file is read or written.
    ASSERT_EQ(standin_load(&gpu, (dir / "state/gpu0").c_str()), 0);
    EXPECT_TRUE(gpu.gis[1].used);
    ASSERT_EQ(standin_destroy_ci(&gpu, 1, 0), STANDIN_SUCCESS);
    ASSERT_EQ(standin_save(&gpu, (dir / "state/gpu0").c_str()), 0);
    EXPECT_EQ(read_text(driver).substr(std::string(kDriverState).size()), "destroy-ci 0 1 0\n");
    EXPECT_FALSE(exists(dir / "state"));
    errno = 0;
    EXPECT_EQ(standin_load(&gpu, (dir / "state/gpux").c_str()), -1);
    EXPECT_EQ(errno, EINVAL);
    // The driver makes the cap files: nothing is written under caps.
    ASSERT_EQ(standin_write_caps(&gpu, 0, (dir / "caps").c_str(), 1), 0);
    EXPECT_FALSE(exists(dir / "caps"));
}
