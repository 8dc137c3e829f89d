// The driver's /proc files from a real H100 (driver 580.159.04, open kernel
// modules; tests/fixture/captures/h100-580.159.04/proc, README.md there):
// nv-procfs.c's information and params, the kernel's /proc/devices, and
// nv-caps.c's access files, each read by the parser that reads the live one.
#include "gpuinit/host/driver_params.hpp"
#include "gpuinit/host/gpu_information.hpp"
#include "gpuinit/host/mig_topology.hpp"
#include "gpuinit/host/proc_devices.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>

namespace gpuinit {

namespace {

const std::string kProc = std::string(GPUINIT_TESTS_DIR) + "/fixture/captures/h100-580.159.04/proc";

std::string read(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

} // namespace

TEST(ProcCaptures, H100Information) {
    auto information =
        parse_gpu_information(read(kProc + "/driver/nvidia/gpus/0000:00:06.0/information"), "info");
    ASSERT_TRUE(information) << information.error().text();
    EXPECT_EQ(information->model, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(information->uuid, "GPU-f74deb4d-58ba-953e-b767-c696562f25c0");
    EXPECT_EQ(information->bus_location, "0000:00:06.0");
    EXPECT_EQ(information->minor, 0u);
    EXPECT_FALSE(information->excluded);
}

TEST(ProcCaptures, H100Params) {
    auto params = parse_driver_params(read(kProc + "/driver/nvidia/params"), "params");
    ASSERT_TRUE(params) << params.error().text();
    auto number = [&](const char* name) -> uint64_t {
        auto value = params->number(name);
        return value && *value ? **value : UINT64_MAX;
    };
    EXPECT_EQ(number("DeviceFileMode"), 438u); // 0666, printed in decimal
    EXPECT_EQ(number("ModifyDeviceFiles"), 1u);
    EXPECT_EQ(number("DeviceFileGID"), 0u);
    ASSERT_NE(params->raw("RegistryDwords"), nullptr);
    EXPECT_EQ(*params->raw("RegistryDwords"), "\"\"");
}

TEST(ProcCaptures, H100CharacterDevices) {
    auto devices = parse_proc_devices(read(kProc + "/devices"), "devices");
    ASSERT_TRUE(devices) << devices.error().text();
    EXPECT_EQ(devices->major("nvidia"), 195u);
    EXPECT_EQ(devices->major("nvidiactl"), 195u);
    EXPECT_EQ(devices->major("nvidia-uvm"), 238u);
    EXPECT_EQ(devices->major("nvidia-caps"), 241u);
    EXPECT_EQ(devices->major("nvidia-caps-imex-channels"), 242u);
    EXPECT_FALSE(devices->major("loop")); // a block device
}

// nv-caps.c (NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-caps.c,
// 595.45.04) prints each access file as "%s: %d\n" x 3 and numbers the caps
// in table order: nvlink fabric-mgmt 0, mig config 1 and monitor 2, then 32
// GPUs x 15 GIs x (access + 8 CIs), then fabric-imex-mgmt. The real
// fabric-imex-mgmt minor, 4323, is one past the last MIG cap the fixture's
// mig-minors lists: the fixture numbers caps as the driver does.
TEST(ProcCaptures, H100CapabilityAccessFilesAndTheirNumbering) {
    std::string caps = kProc + "/driver/nvidia/capabilities";
    auto config = parse_mig_access(read(caps + "/mig/config"), "config");
    ASSERT_TRUE(config) << config.error().text();
    EXPECT_EQ(config->minor, 1u);
    EXPECT_EQ(config->mode, 0400u);
    EXPECT_TRUE(config->modify);
    auto monitor = parse_mig_access(read(caps + "/mig/monitor"), "monitor");
    ASSERT_TRUE(monitor) << monitor.error().text();
    EXPECT_EQ(monitor->minor, 2u);
    EXPECT_EQ(monitor->mode, 0444u);
    auto imex = parse_mig_access(read(caps + "/fabric-imex-mgmt"), "fabric-imex-mgmt");
    ASSERT_TRUE(imex) << imex.error().text();
    EXPECT_EQ(imex->mode, 0400u);
    EXPECT_EQ(imex->minor, testing::oracle_ci_minor(31, 14, 7) + 1);

    testing::TempDir dir;
    testing::FakeMachine fake = testing::workstation(1);
    fake.mig_caps = true;
    ASSERT_TRUE(testing::write_fixture(fake, dir.path()));
    auto minors =
        parse_mig_minors(read(dir / std::string(kMigMinorsPath)), std::string(kMigMinorsPath));
    ASSERT_TRUE(minors) << minors.error().text();
    EXPECT_EQ(minors->at("config"), config->minor);
    EXPECT_EQ(minors->at("monitor"), monitor->minor);
    unsigned last = 0;
    for (const auto& [name, minor] : *minors) {
        last = std::max(last, minor);
    }
    EXPECT_EQ(minors->at("gpu31/gi14/ci7"), last);
    EXPECT_EQ(last + 1, imex->minor);
}

} // namespace gpuinit
