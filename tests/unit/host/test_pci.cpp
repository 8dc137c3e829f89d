#include "gpuinit/host/pci.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit {

using testing::FakeMachine;
using testing::TempDir;
using testing::workstation;
using testing::write_fixture;

namespace {

std::vector<std::string> addresses(const std::vector<PciFunction>& functions) {
    std::vector<std::string> out;
    for (const PciFunction& f : functions) {
        out.push_back(f.bdf);
    }
    return out;
}

} // namespace

TEST(Pci, NvidiaGpusInAddressOrder) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.pci.push_back({"10000:00:01.0", 0x10de, 0x2330, 0x030200, 9, "", ""});
    machine.pci.push_back({"ffff:00:00.0", 0x10de, 0x2330, 0x038000, 10, "", ""});
    machine.pci.push_back({"0000:a0:00.0", 0x10de, 0x22a3, 0x068000, std::nullopt, "", ""});
    machine.pci.push_back({"0000:b0:00.0", 0x1002, 0x73bf, 0x030000, std::nullopt, "", ""});
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    auto gpus = scan_nvidia_gpus(*root);
    ASSERT_TRUE(gpus) << gpus.error().text();
    // The audio function (0x0403), the NVSwitch (0x0680) and the AMD GPU are
    // not NVIDIA GPUs; domains sort numerically (ffff before 10000).
    EXPECT_EQ(addresses(*gpus), (std::vector<std::string>{"0000:17:00.0", "0000:27:00.0",
                                                          "ffff:00:00.0", "10000:00:01.0"}));
    EXPECT_EQ((*gpus)[2].pci_class, 0x038000u);
    auto one = scan_nvidia_gpus(*root, std::string("0000:27:00.0"));
    ASSERT_TRUE(one);
    EXPECT_EQ(addresses(*one), (std::vector<std::string>{"0000:27:00.0"}));
    auto audio = scan_nvidia_gpus(*root, std::string("0000:17:00.1"));
    ASSERT_TRUE(audio);
    EXPECT_TRUE(audio->empty());
}

TEST(Pci, ClassesThatCount) {
    EXPECT_TRUE(is_gpu_class(0x030000));
    EXPECT_TRUE(is_gpu_class(0x030200));
    EXPECT_TRUE(is_gpu_class(0x038000));
    EXPECT_FALSE(is_gpu_class(0x040300));
    EXPECT_FALSE(is_gpu_class(0x0c0330));
    EXPECT_FALSE(is_gpu_class(0x068000));
}

TEST(Pci, BrokenEntriesAreErrorsThatNameThem) {
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    std::string devices = dir / "sys/bus/pci/devices";
    ASSERT_EQ(::unlink((devices + "/0000:17:00.0/class").c_str()), 0);
    auto no_class = scan_nvidia_gpus(*root);
    ASSERT_FALSE(no_class);
    EXPECT_NE(no_class.error().text().find(devices + "/0000:17:00.0/class"), std::string::npos)
        << no_class.error().text();
    ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
    ASSERT_EQ(::mkdir((devices + "/garbage").c_str(), 0755), 0);
    auto garbage = scan_nvidia_gpus(*root);
    ASSERT_FALSE(garbage);
    EXPECT_NE(garbage.error().text().find(devices + "/garbage: not a PCI address"),
              std::string::npos);
    ASSERT_EQ(::rmdir((devices + "/garbage").c_str()), 0);
    // A FIFO where sysfs has a file: refused, not read (or waited on).
    ASSERT_EQ(::unlink((devices + "/0000:00:00.0/vendor").c_str()), 0);
    ASSERT_EQ(::mkfifo((devices + "/0000:00:00.0/vendor").c_str(), 0644), 0);
    auto fifo = scan_nvidia_gpus(*root);
    ASSERT_FALSE(fifo);
    EXPECT_NE(fifo.error().text().find("not a regular file"), std::string::npos);
}

} // namespace gpuinit
