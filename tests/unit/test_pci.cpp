#include "gpuinit/host/pci.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

using testing::FakeMachine;
using testing::TempDir;
using testing::workstation;
using testing::write_fixture;

TEST(Pci, ListsFunctionsInAddressOrderThroughLibpci) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.pci.push_back({"10000:00:01.0", 0x10de, 0x2330, 0x030200, 9, "", ""});
    machine.pci.push_back({"0000:a0:00.0", 0x10de, 0x22a3, 0x068000, std::nullopt, "", ""});
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    auto functions = scan_pci(*root);
    ASSERT_TRUE(functions) << functions.error().message;
    std::vector<std::string> gpus;
    for (const PciFunction& f : *functions) {
        if (is_nvidia_gpu(f)) {
            gpus.push_back(f.bdf);
        }
    }
    // The audio function (0x0403) and the NVSwitch (0x0680) are not GPUs.
    EXPECT_EQ(gpus, (std::vector<std::string>{"0000:17:00.0", "0000:27:00.0", "10000:00:01.0"}));
    EXPECT_EQ(functions->size(), 6u);
}

TEST(Pci, ClassesThatCount) {
    EXPECT_TRUE(is_nvidia_gpu({"", 0x10de, 0, 0x0300}));
    EXPECT_TRUE(is_nvidia_gpu({"", 0x10de, 0, 0x0302}));
    EXPECT_TRUE(is_nvidia_gpu({"", 0x10de, 0, 0x0380}));
    EXPECT_FALSE(is_nvidia_gpu({"", 0x10de, 0, 0x0403}));
    EXPECT_FALSE(is_nvidia_gpu({"", 0x10de, 0, 0x0c03}));
    EXPECT_FALSE(is_nvidia_gpu({"", 0x10de, 0, 0x0680}));
    EXPECT_FALSE(is_nvidia_gpu({"", 0x1002, 0, 0x0300}));
}

TEST(Pci, MalformedEntryIsAnErrorNotAnExit) {
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
    ASSERT_EQ(::unlink((dir / "sys/bus/pci/devices/0000:17:00.0/class").c_str()), 0);
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    auto functions = scan_pci(*root);
    ASSERT_FALSE(functions);
    EXPECT_NE(functions.error().message.find("libpci"), std::string::npos)
        << functions.error().message;
    // And libpci is usable again afterwards.
    ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
    EXPECT_TRUE(scan_pci(*root));
}

} // namespace gpuinit
