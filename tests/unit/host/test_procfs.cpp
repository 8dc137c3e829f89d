// The driver's procfs files, on the one key:value reader.
#include "gpuinit/host/driver_params.hpp"
#include "gpuinit/host/gpu_information.hpp"
#include "gpuinit/host/kv_reader.hpp"
#include "gpuinit/host/proc_devices.hpp"

#include <gtest/gtest.h>
#include <string>

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
    EXPECT_EQ(bad_major.error().text().rfind("/proc/devices:3:", 0), 0u)
        << bad_major.error().text();

    auto extra_word = parse_proc_devices("Character devices:\n195 nvidia extra\n", "f");
    ASSERT_FALSE(extra_word);
    EXPECT_NE(extra_word.error().text().find("f:2:"), std::string::npos);

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
    EXPECT_NE(info.error().text().find("gpus/x/information:2: no 'Device Minor:'"),
              std::string::npos)
        << info.error().text();
}

TEST(GpuInformation, RejectsBadMinors) {
    EXPECT_FALSE(parse_gpu_information("Device Minor: \t 254\n", "f")); // modeset's minor
    EXPECT_FALSE(parse_gpu_information("Device Minor: \t -1\n", "f"));
    EXPECT_FALSE(parse_gpu_information("Device Minor: \t 1\nDevice Minor: \t 2\n", "f"));
    auto no_colon = parse_gpu_information("Device Minor 1\n", "f");
    ASSERT_FALSE(no_colon);
    EXPECT_NE(no_colon.error().text().find("f:1:"), std::string::npos);
    auto bad_uuid = parse_gpu_information("GPU UUID: \t GPU-xyz\nDevice Minor: 0\n", "f");
    ASSERT_FALSE(bad_uuid);
    EXPECT_NE(bad_uuid.error().text().find("f:1: GPU UUID 'GPU-xyz'"), std::string::npos);
}

TEST(GpuInformation, BusLocationIsKeptWithItsLine) {
    auto info = parse_gpu_information(kInformation, "information");
    ASSERT_TRUE(info);
    EXPECT_EQ(info->bus_location_line, 8u);
}

TEST(DriverParams, DecimalValues) {
    auto params = parse_driver_params("ModifyDeviceFiles: 1\nDeviceFileMode: 438\n"
                                      "RegistryDwords: \"\"\n",
                                      "params");
    ASSERT_TRUE(params) << params.error().message;
    EXPECT_EQ(params->number("DeviceFileMode").value_or(std::nullopt), 0666u);
    EXPECT_EQ(params->number("ModifyDeviceFiles").value_or(std::nullopt), 1u);
    auto missing = params->number("Missing");
    ASSERT_TRUE(missing);
    EXPECT_FALSE(*missing);
    ASSERT_NE(params->raw("RegistryDwords"), nullptr);
}

// A quoted number is still the number (it was once reported "missing" and
// counted with the driver's default); a string where a number belongs is
// an error naming its line, never "absent".
TEST(DriverParams, QuotedNumbersAreNumbersAndStringsAreNot) {
    auto params =
        parse_driver_params("DeviceFileMode: \"432\"\nDeviceFileGID: \"video\"\n", "params");
    ASSERT_TRUE(params) << params.error().text();
    EXPECT_EQ(params->number("DeviceFileMode").value_or(std::nullopt), 0660u);
    auto gid = params->number("DeviceFileGID");
    ASSERT_FALSE(gid);
    EXPECT_NE(gid.error().text().find("params:2: DeviceFileGID is '\"video\"', not a number"),
              std::string::npos)
        << gid.error().text();
}

TEST(DriverParams, RejectsMalformed) {
    auto octal_text = parse_driver_params("DeviceFileMode: 0x1b6\n", "params");
    ASSERT_FALSE(octal_text);
    EXPECT_NE(octal_text.error().text().find("params:1:"), std::string::npos);
    EXPECT_FALSE(parse_driver_params("DeviceFileMode 438\n", "params"));
    EXPECT_FALSE(parse_driver_params("A: 1\nA: 2\n", "params"));
}

TEST(KeyValues, OneReaderForEveryDriverFile) {
    auto entries =
        read_key_values("Name: value one\n\nGPU UUID:\t GPU-1\nEmpty:\n", "f", KeyStyle::Words);
    ASSERT_TRUE(entries) << entries.error().message;
    ASSERT_EQ(entries->size(), 3u);
    EXPECT_EQ(find_key(*entries, "GPU UUID")->value, "GPU-1");
    EXPECT_EQ(find_key(*entries, "GPU UUID")->line, 3u);
    EXPECT_EQ(find_key(*entries, "Empty")->value, "");
    EXPECT_EQ(find_key(*entries, "Nope"), nullptr);
    // The MIG access files come next; they are identifiers too.
    auto access = read_key_values("DeviceFileMinor: 337\nDeviceFileMode: 292\n"
                                  "DeviceFileModify: 1\n",
                                  "access", KeyStyle::Identifier);
    ASSERT_TRUE(access);
    EXPECT_EQ(find_key(*access, "DeviceFileMode")->value, "292");
}

TEST(KeyValues, HostileLinesNameFileAndLine) {
    struct Case {
        const char* text;
        KeyStyle style;
        const char* expected;
    } cases[] = {
        {"no colon here\n", KeyStyle::Words, "f:1: expected 'Name: value'"},
        {"ok: 1\n: no key\n", KeyStyle::Words, "f:2: expected"},
        {"A: 1\nA: 2\n", KeyStyle::Identifier, "f:2: A given twice"},
        {"Two Words: 1\n", KeyStyle::Identifier, "f:1: name 'Two Words' has an invalid"},
        {"Key: a\x1b[2Jb\n", KeyStyle::Words, "f:1: value of Key has control characters"},
        {"K\x1b: 1\n", KeyStyle::Words, "f:1: name 'K\\x1b' has an invalid character"},
    };
    for (const Case& c : cases) {
        auto entries = read_key_values(c.text, "f", c.style);
        ASSERT_FALSE(entries) << c.text;
        EXPECT_EQ(entries.error().text().rfind(c.expected, 0), 0u)
            << "got: " << entries.error().text() << "\nwanted: " << c.expected;
    }
}

} // namespace gpuinit
