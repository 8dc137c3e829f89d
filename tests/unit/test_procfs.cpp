#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/procfs.hpp"
#include "temp_dir.hpp"

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace gpuinit {

constexpr const char* kDevices = "Character devices:\n"
                                 "  1 mem\n"
                                 "195 nvidia\n"
                                 "195 nvidiactl\n"
                                 "195 nvidia-modeset\n"
                                 "235 nvidia-caps\n"
                                 "510 nvidia-uvm\n"
                                 "\n"
                                 "Block devices:\n"
                                 "  8 sd\n"
                                 "259 nvidia\n";

TEST(ProcDevices, OnlyTheCharacterSectionWithExactNames) {
    auto devices = parse_proc_devices(kDevices, "/proc/devices");
    ASSERT_TRUE(devices) << devices.error().message;
    EXPECT_EQ(devices->major("nvidia"), 195u); // not 259 from the block section
    EXPECT_EQ(devices->major("nvidia-uvm"), 510u);
    EXPECT_EQ(devices->major("nvidia-caps"), 235u);
    EXPECT_FALSE(devices->major("nvidia-uvm-tools"));
    EXPECT_FALSE(devices->major("nvidia-"));
    EXPECT_FALSE(devices->major("sd"));
}

TEST(ProcDevices, LegacyFrontendName) {
    auto devices = parse_proc_devices("Character devices:\n195 nvidia-frontend\n", "d");
    ASSERT_TRUE(devices);
    EXPECT_EQ(devices->major("nvidia-frontend"), 195u);
    EXPECT_FALSE(devices->major("nvidia"));
}

TEST(ProcDevices, MalformedLinesNameFileAndLine) {
    auto bad_major =
        parse_proc_devices("Character devices:\n  1 mem\nxyz nvidia\n", "/proc/devices");
    ASSERT_FALSE(bad_major);
    EXPECT_EQ(bad_major.error().message.rfind("/proc/devices:3:", 0), 0u)
        << bad_major.error().message;

    auto extra_word = parse_proc_devices("Character devices:\n195 nvidia extra\n", "f");
    ASSERT_FALSE(extra_word);
    EXPECT_NE(extra_word.error().message.find("f:2:"), std::string::npos);

    auto too_big = parse_proc_devices("Character devices:\n4096 nvidia\n", "f");
    EXPECT_FALSE(too_big);

    auto no_section = parse_proc_devices("195 nvidia\n", "f");
    EXPECT_FALSE(no_section);
}

constexpr const char* kInformation = "Model: \t\t NVIDIA A100 80GB PCIe\n"
                                     "IRQ:   \t\t 142\n"
                                     "GPU UUID: \t GPU-558ce120-5b8b-16a1-87d4-ce157bba3e9d\n"
                                     "Video BIOS: \t 92.00.36.00.01\n"
                                     "Bus Type: \t PCIe\n"
                                     "DMA Size: \t 47 bits\n"
                                     "DMA Mask: \t 0x7fffffffffff\n"
                                     "Bus Location: \t 0000:17:00.0\n"
                                     "Device Minor: \t 3\n"
                                     "GPU Firmware: \t 535.129.03\n"
                                     "GPU Excluded:\t No\n";

TEST(GpuInformation, ParsesTheDriverFields) {
    auto info = parse_gpu_information(kInformation, "information");
    ASSERT_TRUE(info) << info.error().message;
    EXPECT_EQ(info->minor, 3u);
    EXPECT_EQ(info->model, "NVIDIA A100 80GB PCIe");
    EXPECT_EQ(info->uuid, "GPU-558ce120-5b8b-16a1-87d4-ce157bba3e9d");
    EXPECT_EQ(info->bus_location, "0000:17:00.0");
    EXPECT_FALSE(info->excluded);
}

TEST(GpuInformation, MissingMinorIsAnError) {
    auto info = parse_gpu_information("Model: \t\t X\nGPU UUID: \t GPU-1\n", "gpus/x/information");
    ASSERT_FALSE(info);
    EXPECT_NE(info.error().message.find("gpus/x/information:2: no 'Device Minor:'"),
              std::string::npos)
        << info.error().message;
}

TEST(GpuInformation, RejectsBadMinors) {
    EXPECT_FALSE(parse_gpu_information("Device Minor: \t 254\n", "f")); // modeset's minor
    EXPECT_FALSE(parse_gpu_information("Device Minor: \t -1\n", "f"));
    EXPECT_FALSE(parse_gpu_information("Device Minor: \t 1\nDevice Minor: \t 2\n", "f"));
    auto no_colon = parse_gpu_information("Device Minor 1\n", "f");
    ASSERT_FALSE(no_colon);
    EXPECT_NE(no_colon.error().message.find("f:1:"), std::string::npos);
}

TEST(DriverParams, DecimalValues) {
    auto params = parse_driver_params("ModifyDeviceFiles: 1\nDeviceFileMode: 438\n"
                                      "RegistryDwords: \"\"\n",
                                      "params");
    ASSERT_TRUE(params) << params.error().message;
    EXPECT_EQ(params->number("DeviceFileMode"), 0666u);
    EXPECT_EQ(params->number("ModifyDeviceFiles"), 1u);
    EXPECT_FALSE(params->number("Missing"));
    ASSERT_NE(params->raw("RegistryDwords"), nullptr);
}

TEST(DriverParams, RejectsMalformed) {
    auto octal_text = parse_driver_params("DeviceFileMode: 0x1b6\n", "params");
    ASSERT_FALSE(octal_text);
    EXPECT_NE(octal_text.error().message.find("params:1:"), std::string::npos);
    EXPECT_FALSE(parse_driver_params("DeviceFileMode 438\n", "params"));
    EXPECT_FALSE(parse_driver_params("A: 1\nA: 2\n", "params"));
}

namespace {

size_t open_fds() {
    size_t n = 0;
    if (DIR* dir = ::opendir("/proc/self/fd")) {
        while (::readdir(dir) != nullptr) {
            ++n;
        }
        ::closedir(dir);
    }
    return n;
}

} // namespace

TEST(SysrootListDir, SortedWithoutDotsAndClosesItsDirectory) {
    testing::TempDir dir;
    ASSERT_EQ(::mkdir((dir / "d").c_str(), 0755), 0);
    for (const char* name : {"b", "a", "c"}) {
        ::close(::open((dir / ("d/" + std::string(name))).c_str(), O_CREAT | O_WRONLY, 0644));
    }
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root) << root.error().message;
    size_t before = open_fds();
    for (int i = 0; i < 50; ++i) {
        auto names = root->list_dir("d");
        ASSERT_TRUE(names) << names.error().message;
        EXPECT_EQ(*names, (std::vector<std::string>{"a", "b", "c"}));
        auto missing = root->list_dir("nope");
        ASSERT_FALSE(missing);
        EXPECT_EQ(missing.error().code, ENOENT);
        EXPECT_NE(missing.error().message.find(dir / "nope"), std::string::npos);
    }
    EXPECT_EQ(open_fds(), before); // no DIR* leaked on either path
}

} // namespace gpuinit
