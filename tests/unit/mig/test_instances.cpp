// Compute instances joined with their GPU and their GI's cap minor.
#include "gpuinit/mig/instances.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

using testing::a100_mig_box;
using testing::oracle_ci_minor;
using testing::oracle_gi_minor;
using testing::TempDir;
using testing::write_fixture;

namespace {

std::vector<MigInstance> instances_of(const testing::FakeMachine& fake, Diagnostics& diagnostics) {
    TempDir dir;
    EXPECT_TRUE(write_fixture(fake, dir.path()));
    auto root = Sysroot::open(dir.path());
    auto machine = discover_machine(*root, diagnostics);
    auto topology = read_mig_topology(*root, diagnostics);
    EXPECT_TRUE(machine && topology);
    return join_mig_instances(*machine, *topology, diagnostics);
}

} // namespace

TEST(MigInstances, OnePerComputeInstanceWithItsGpuAndCapMinors) {
    Diagnostics diagnostics;
    std::vector<MigInstance> instances = instances_of(a100_mig_box(), diagnostics);
    EXPECT_TRUE(diagnostics.empty());
    ASSERT_EQ(instances.size(), 21u);
    const MigInstance& first = instances.front();
    EXPECT_EQ(first.key(), "gpu1/gi7/ci0");
    EXPECT_EQ(first.gpu_bdf, "0000:27:00.0");
    EXPECT_EQ(first.gpu_uuid, testing::fake_uuid(1));
    EXPECT_EQ(first.gi_cap_minor, oracle_gi_minor(1, 7));
    EXPECT_EQ(first.ci_cap_minor, oracle_ci_minor(1, 7, 0));
    EXPECT_TRUE(first.profile.empty()); // not in /proc
    EXPECT_TRUE(first.uuid.empty());
    EXPECT_EQ(instances.back().key(), "gpu3/gi14/ci0");
}

// A CI on a minor the driver does not list is left out, loudly.
TEST(MigInstances, AnInstanceOfAnUnknownGpuIsLeftOut) {
    testing::FakeMachine fake = a100_mig_box();
    fake.mig.push_back({7, 1, {0, 1}});
    Diagnostics diagnostics;
    std::vector<MigInstance> instances = instances_of(fake, diagnostics);
    EXPECT_EQ(instances.size(), 21u);
    EXPECT_EQ(diagnostics.count(Severity::Error), 2u);
    EXPECT_NE(diagnostics.items()[0].message.find("the driver lists no GPU with minor 7"),
              std::string::npos)
        << diagnostics.items()[0].text();
}

} // namespace gpuinit
