// The host's GPUs in nvidia-smi's numbering (numbered_gpus.hpp), from a
// fixture of /proc/driver/nvidia/gpus in the driver's format (nv-procfs.c).
#include "gpuinit/host/numbered_gpus.hpp"
#include "temp_dir.hpp"

#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <sys/stat.h>

namespace gpuinit {

using testing::TempDir;

namespace {

void add_gpu(const TempDir& root, const std::string& bus, unsigned minor, const std::string& uuid) {
    std::string dir = root.path();
    for (const char* part : {"/proc", "/driver", "/nvidia", "/gpus"}) {
        dir += part;
        ::mkdir(dir.c_str(), 0755);
    }
    dir += "/" + bus;
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
    std::ofstream(dir + "/information")
        << "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nGPU UUID: \t " << uuid
        << "\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
           "DMA Mask: \t 0xfffffffffffff\nBus Location: \t "
        << bus << "\nDevice Minor: \t " << minor
        << "\nGPU Firmware: \t 580.159.04\nGPU Excluded:\t No\n";
}

} // namespace

TEST(NumberedGpus, PciOrderNotMinorOrder) {
    TempDir root;
    add_gpu(root, "0000:3b:00.0", 0, "GPU-11111111-2222-3333-4444-555555555555");
    add_gpu(root, "10000:01:00.0", 1, "GPU-22222222-2222-3333-4444-555555555555");
    add_gpu(root, "0000:1a:00.0", 2, "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa");
    auto sysroot = Sysroot::open(root.path());
    ASSERT_TRUE(sysroot.ok());
    auto numbered = read_numbered_gpus(*sysroot);
    ASSERT_TRUE(numbered.ok()) << numbered.error().message;
    EXPECT_TRUE(numbered->listed);
    ASSERT_EQ(numbered->gpus.size(), 3u);
    EXPECT_EQ(numbered->gpus[0].bdf, "0000:1a:00.0");
    EXPECT_EQ(numbered->gpus[0].minor, 2u);
    EXPECT_EQ(numbered->gpus[1].bdf, "0000:3b:00.0");
    EXPECT_EQ(numbered->gpus[2].bdf, "10000:01:00.0");
}

TEST(NumberedGpus, ABrokenEntryFailsAndNoDriverListsNothing) {
    TempDir root;
    add_gpu(root, "0000:3b:00.0", 0, "GPU-11111111-2222-3333-4444-555555555555");
    auto sysroot = Sysroot::open(root.path());
    ASSERT_TRUE(sysroot.ok());
    ASSERT_EQ(::mkdir((root / "proc/driver/nvidia/gpus/0000:05:00.0").c_str(), 0755), 0);
    std::ofstream(root / "proc/driver/nvidia/gpus/0000:05:00.0/information")
        << "Model: \t\t NVIDIA H100 80GB HBM3\n";
    EXPECT_FALSE(read_numbered_gpus(*sysroot).ok());
    TempDir empty;
    auto bare = Sysroot::open(empty.path());
    ASSERT_TRUE(bare.ok());
    auto none = read_numbered_gpus(*bare);
    ASSERT_TRUE(none.ok()) << none.error().message;
    EXPECT_FALSE(none->listed);
    EXPECT_TRUE(none->gpus.empty());
}

} // namespace gpuinit
