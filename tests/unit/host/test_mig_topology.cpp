// The MIG topology from the driver's capability files: what exists, with
// the minors mig-minors gives (never computed), and hostile files refused
// line by line.
#include "gpuinit/host/mig_topology.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

namespace gpuinit {

using testing::a100_mig_box;
using testing::FakeMachine;
using testing::oracle_ci_minor;
using testing::oracle_gi_minor;
using testing::TempDir;
using testing::workstation;
using testing::write_fixture;

namespace {

MigTopology read(const std::string& dir, Diagnostics& diagnostics) {
    auto root = Sysroot::open(dir);
    EXPECT_TRUE(root);
    auto topology = read_mig_topology(*root, diagnostics);
    EXPECT_TRUE(topology) << (topology ? "" : topology.error().text());
    return topology ? *topology : MigTopology{};
}

void overwrite(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

size_t count(const MigTopology& topology, MigCap::Kind kind) {
    return static_cast<size_t>(std::count_if(topology.caps.begin(), topology.caps.end(),
                                             [&](const MigCap& cap) { return cap.kind == kind; }));
}

} // namespace

TEST(MigTopology, FourA100sSevenInstancesEachWithAGapInTheIds) {
    TempDir dir;
    ASSERT_TRUE(write_fixture(a100_mig_box(), dir.path()));
    Diagnostics diagnostics;
    MigTopology topology = read(dir.path(), diagnostics);
    EXPECT_TRUE(diagnostics.empty());
    ASSERT_EQ(topology.caps.size(), 2u + 3 * 7 * 2);
    EXPECT_EQ(topology.caps[0].kind, MigCap::Kind::Config);
    EXPECT_EQ(topology.caps[0].minor, 1u);
    EXPECT_EQ(topology.caps[0].mode, 0400u);
    EXPECT_EQ(topology.caps[1].kind, MigCap::Kind::Monitor);
    EXPECT_EQ(count(topology, MigCap::Kind::GpuInstance), 21u);
    EXPECT_EQ(count(topology, MigCap::Kind::ComputeInstance), 21u);
    EXPECT_EQ(topology.gpus_with_mig_dir, (std::vector<unsigned>{0, 1, 2, 3}));
    EXPECT_TRUE(topology.has_instances());
    // GPU 0 has none; the others' GIs in order, 12 missing, each with its CI.
    std::vector<unsigned> gis;
    for (const MigCap& cap : topology.caps) {
        if (cap.kind == MigCap::Kind::GpuInstance || cap.kind == MigCap::Kind::ComputeInstance) {
            EXPECT_NE(cap.gpu_minor, 0u) << cap.key();
        }
        if (cap.kind == MigCap::Kind::GpuInstance) {
            EXPECT_EQ(cap.minor, oracle_gi_minor(cap.gpu_minor, cap.gi)) << cap.key();
            EXPECT_EQ(cap.mode, 0444u);
            EXPECT_TRUE(cap.modify);
            if (cap.gpu_minor == 2) {
                gis.push_back(cap.gi);
            }
        } else if (cap.kind == MigCap::Kind::ComputeInstance) {
            EXPECT_EQ(cap.minor, oracle_ci_minor(cap.gpu_minor, cap.gi, cap.ci)) << cap.key();
        }
    }
    EXPECT_EQ(gis, (std::vector<unsigned>{7, 8, 9, 10, 11, 13, 14}));
    const MigCap& gi = topology.caps[2];
    EXPECT_EQ(gi.key(), "gpu1/gi7");
    EXPECT_EQ(gi.access, "proc/driver/nvidia/capabilities/gpu1/mig/gi7/access");
    EXPECT_EQ(topology.caps[3].key(), "gpu1/gi7/ci0");
}

TEST(MigTopology, MixedProfilesAndAGiWithTwoCis) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.mig_caps = true;
    machine.mig = {{0, 1, {0}}, {0, 2, {0}}, {0, 3, {0, 1}}}; // 3g + 2g + 1c.3g x2
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    Diagnostics diagnostics;
    MigTopology topology = read(dir.path(), diagnostics);
    EXPECT_TRUE(diagnostics.empty());
    std::vector<std::string> keys;
    for (const MigCap& cap : topology.caps) {
        keys.push_back(cap.key());
    }
    EXPECT_EQ(keys, (std::vector<std::string>{"config", "monitor", "gpu0/gi1", "gpu0/gi1/ci0",
                                              "gpu0/gi2", "gpu0/gi2/ci0", "gpu0/gi3",
                                              "gpu0/gi3/ci0", "gpu0/gi3/ci1"}));
}

TEST(MigTopology, NoCapabilitiesIsNoMig) {
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(2), dir.path()));
    Diagnostics diagnostics;
    MigTopology topology = read(dir.path(), diagnostics);
    EXPECT_TRUE(topology.caps.empty());
    EXPECT_FALSE(topology.has_instances());
    EXPECT_TRUE(diagnostics.empty());
}

// MIG on but no instance looks like MIG off: only the gpuN/mig directories.
TEST(MigTopology, MigDirectoriesWithoutInstances) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.mig_caps = true;
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    Diagnostics diagnostics;
    MigTopology topology = read(dir.path(), diagnostics);
    EXPECT_FALSE(topology.has_instances());
    EXPECT_EQ(topology.caps.size(), 2u); // config and monitor
    EXPECT_EQ(topology.gpus_with_mig_dir, (std::vector<unsigned>{0, 1}));
}

// A minor that disagrees with mig-minors, or a cap it does not list, gets no
// node: an error, never a guess. The others are kept.
TEST(MigTopology, AMinorDisagreeingWithMigMinorsIsLeftOut) {
    TempDir dir;
    FakeMachine machine = a100_mig_box();
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    std::string caps = dir / "proc/driver/nvidia/capabilities";
    overwrite(caps + "/gpu1/mig/gi7/access",
              "DeviceFileMinor: 999\nDeviceFileMode: 292\nDeviceFileModify: 1\n");
    Diagnostics diagnostics;
    MigTopology topology = read(dir.path(), diagnostics);
    ASSERT_EQ(diagnostics.count(Severity::Error), 1u);
    EXPECT_NE(diagnostics.items()[0].message.find("DeviceFileMinor 999 disagrees with"),
              std::string::npos)
        << diagnostics.items()[0].text();
    EXPECT_EQ(count(topology, MigCap::Kind::GpuInstance), 20u);
    EXPECT_EQ(count(topology, MigCap::Kind::ComputeInstance), 21u);
}

TEST(MigTopology, HostileAccessFilesAreRefusedWithTheirLine) {
    struct Case {
        std::string text;
        std::string expected;
    } cases[] = {
        {"DeviceFileMinor: 3\nDeviceFileMode: 1000\nDeviceFileModify: 1\n", "not a decimal mode"},
        {"DeviceFileMinor: -3\nDeviceFileMode: 292\nDeviceFileModify: 1\n", "DeviceFileMinor"},
        {"DeviceFileMinor: 3\nDeviceFileMode: 292\nDeviceFileModify: 2\n", "not 0 or 1"},
        {"DeviceFileMinor: 3\nDeviceFileMode: 292\n", "needs DeviceFileMinor"},
        {"DeviceFileMinor: 3\nDeviceFileMinor: 3\nDeviceFileMode: 292\nDeviceFileModify: 0\n",
         "twice"},
        {"DeviceFileMinor: 3\x1b[2J\nDeviceFileMode: 292\nDeviceFileModify: 0\n", ""},
    };
    for (const Case& c : cases) {
        auto parsed = parse_mig_access(c.text, "access");
        ASSERT_FALSE(parsed) << c.text;
        EXPECT_NE(parsed.error().text().find(c.expected), std::string::npos)
            << parsed.error().text();
        EXPECT_EQ(parsed.error().text().find('\x1b'), std::string::npos);
    }
    auto good = parse_mig_access("DeviceFileMinor: 337\nDeviceFileMode: 292\nDeviceFileModify: 0\n",
                                 "access");
    ASSERT_TRUE(good);
    EXPECT_EQ(good->minor, 337u);
    EXPECT_EQ(good->mode, 0444u);
    EXPECT_FALSE(good->modify);
}

TEST(MigTopology, MigMinorsIsCheckedLineByLine) {
    auto table = parse_mig_minors("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n",
                                  "mig-minors");
    ASSERT_TRUE(table);
    EXPECT_EQ(table->at("gpu0/gi0/ci0"), 4u);
    EXPECT_EQ(table->at("config"), 1u);
    struct Case {
        std::string text;
        std::string expected;
    } cases[] = {
        {"config 1\nconfig 2\n", "mig-minors:2: 'config' is listed twice"},
        {"config 1\nmonitor 1\n", "minor 1 is listed for both"},
        {"gpu0/gi0 3\n", "is not a MIG capability name"},
        {"gpu00/gi0/access 3\n", "is not a MIG capability name"},
        {"gpu0/gi0/ci0/extra/access 3\n", "is not a MIG capability name"},
        {"gpu0/gi0/access 3 4\n", "expected 'NAME MINOR'"},
        {"gpu0/gi0/access 99999999\n", "is not a number"},
    };
    for (const Case& c : cases) {
        auto parsed = parse_mig_minors(c.text, "mig-minors");
        ASSERT_FALSE(parsed) << c.text;
        EXPECT_NE(parsed.error().text().find(c.expected), std::string::npos)
            << parsed.error().text();
    }
}

TEST(MigTopology, UnexpectedDirectoryEntriesAreWarnedAboutAndSkipped) {
    TempDir dir;
    ASSERT_TRUE(write_fixture(a100_mig_box(), dir.path()));
    std::string caps = dir / "proc/driver/nvidia/capabilities";
    std::filesystem::create_directories(caps + "/gpu01/mig/gi1");
    std::filesystem::create_directories(caps + "/gpu1/mig/gix");
    Diagnostics diagnostics;
    MigTopology topology = read(dir.path(), diagnostics);
    EXPECT_EQ(diagnostics.count(Severity::Warning), 2u);
    EXPECT_EQ(diagnostics.count(Severity::Error), 0u);
    EXPECT_EQ(count(topology, MigCap::Kind::GpuInstance), 21u);
}

} // namespace gpuinit
