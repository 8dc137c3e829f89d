// A fixture machine's MIG instances as the tools join them: the fixture
// written to a temporary root, the machine discovered, the topology read,
// the instances joined. Names (profile, uuid) are the test's to set.
#pragma once

#include "gpuinit/host/machine.hpp"
#include "gpuinit/host/mig_topology.hpp"
#include "gpuinit/mig/instances.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>
#include <vector>

namespace gpuinit::testing {

struct MigBox {
    TempDir dir;
    Machine machine;
    std::vector<MigInstance> instances;
};

inline void load_mig_box(MigBox& box, const FakeMachine& fake = a100_mig_box()) {
    ASSERT_TRUE(write_fixture(fake, box.dir.path()));
    Diagnostics diagnostics;
    auto root = Sysroot::open(box.dir.path());
    ASSERT_TRUE(root);
    auto machine = discover_machine(*root, diagnostics);
    auto mig = read_mig_topology(*root, diagnostics);
    ASSERT_TRUE(machine && mig);
    box.machine = std::move(*machine);
    box.machine.mig = std::move(*mig);
    box.instances = join_mig_instances(box.machine, box.machine.mig, diagnostics);
}

} // namespace gpuinit::testing
