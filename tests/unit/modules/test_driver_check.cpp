#include "gpuinit/modules/driver_check.hpp"
#include "gpuinit/modules/failures.hpp"
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

using testing::FakeMachine;
using testing::TempDir;
using testing::workstation;
using testing::write_fixture;

namespace {

// What check_driver() found: its values and its dangers' messages.
struct Checked : DriverCheck {
    std::vector<std::string> dangers;
};

Checked check_with(FakeMachine machine, const std::string& params, const TempDir& dir) {
    machine.params = params;
    EXPECT_TRUE(write_fixture(machine, dir.path()));
    auto root = Sysroot::open(dir.path());
    Diagnostics diagnostics;
    auto check = check_driver(*root, diagnostics);
    EXPECT_TRUE(check) << check.error().text();
    Checked checked;
    if (check) {
        static_cast<DriverCheck&>(checked) = *check;
    }
    for (const Diagnostic& d : diagnostics.items()) {
        if (d.reason == static_cast<int>(ModuleFailure::CheckDanger)) {
            checked.dangers.push_back(d.message);
        }
    }
    return checked;
}

Result<DriverCheck> check_as_is(const TempDir& dir) {
    Diagnostics diagnostics;
    return check_driver(*Sysroot::open(dir.path()), diagnostics);
}

std::string all(const Checked& check) {
    std::string text;
    for (const std::string& danger : check.dangers) {
        text += danger + "\n";
    }
    return text;
}

} // namespace

TEST(DriverCheck, ShippedParamsAreSafe) {
    TempDir dir;
    Checked check = check_with(workstation(4),
                               "ModifyDeviceFiles: 0\nDeviceFileUID: 0\nDeviceFileGID: 0\n"
                               "DeviceFileMode: 432\n",
                               dir);
    EXPECT_TRUE(check.driver_loaded);
    EXPECT_EQ(check.mode, 0660u);
    EXPECT_TRUE(check.dangers.empty()) << all(check);
}

TEST(DriverCheck, ModifyDeviceFilesWipesPerGpuGroups) {
    TempDir dir;
    Checked check = check_with(workstation(2),
                               "ModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 0\n"
                               "DeviceFileMode: 432\n",
                               dir);
    ASSERT_EQ(check.dangers.size(), 1u) << all(check);
    EXPECT_NE(check.dangers[0].find("ModifyDeviceFiles is 1"), std::string::npos);
    EXPECT_NE(check.dangers[0].find("NVreg_ModifyDeviceFiles=0"), std::string::npos);
}

TEST(DriverCheck, ModeWiderThanThePolicy) {
    TempDir dir;
    // The classic 0777 (511): any user could open a node nvidia-modprobe makes.
    Checked check = check_with(workstation(2),
                               "ModifyDeviceFiles: 0\nDeviceFileUID: 0\nDeviceFileGID: 0\n"
                               "DeviceFileMode: 511\n",
                               dir);
    ASSERT_EQ(check.dangers.size(), 1u) << all(check);
    EXPECT_NE(check.dangers[0].find("NVreg_DeviceFileMode=0777 lets every user"), std::string::npos)
        << all(check);
}

TEST(DriverCheck, GroupTheDriverUsesIsNotThePolicysGroup) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    Checked check = check_with(machine,
                               "ModifyDeviceFiles: 0\nDeviceFileUID: 0\nDeviceFileGID: 1000\n"
                               "DeviceFileMode: 432\n",
                               dir);
    // gid 1000 is nvidia0: fine for GPU 0, too much for GPU 1.
    ASSERT_EQ(check.dangers.size(), 1u) << all(check);
    EXPECT_NE(check.dangers[0].find("group 1000 access to GPU 1"), std::string::npos) << all(check);
}

TEST(DriverCheck, ModifyDeviceFilesIsFlaggedUnderTheClassicSchemeEvenWhenOneGpuMatches) {
    TempDir dir;
    FakeMachine machine = workstation(1);
    // The driver's values happen to be GPU 0's rule (root:nvidia0 0660), but
    // the classic scheme gives each GPU its own group: the next GPU would lose it.
    Checked check =
        check_with(machine,
                   "ModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: " +
                       std::to_string(machine.gid_of("nvidia0")) + "\nDeviceFileMode: 432\n",
                   dir);
    ASSERT_EQ(check.dangers.size(), 1u) << all(check);
    EXPECT_NE(check.dangers[0].find("ModifyDeviceFiles is 1"), std::string::npos) << all(check);
}

TEST(DriverCheck, ModifyDeviceFilesIsFineWhenThePolicyIsExactlyTheDrivers) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.groups.emplace_back("gpuusers");
    machine.policy = "gpu=* group=gpuusers mode=0660\n";
    Checked check =
        check_with(machine,
                   "ModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: " +
                       std::to_string(machine.gid_of("gpuusers")) + "\nDeviceFileMode: 432\n",
                   dir);
    EXPECT_TRUE(check.dangers.empty()) << all(check);
}

TEST(DriverCheck, UnresolvableGroupFailsClosed) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.policy = "gpu=* group=hpcusers mode=0660\n"; // not in etc/group
    Checked check = check_with(machine,
                               "ModifyDeviceFiles: 0\nDeviceFileUID: 0\nDeviceFileGID: 5000\n"
                               "DeviceFileMode: 432\n",
                               dir);
    ASSERT_EQ(check.dangers.size(), 1u) << all(check);
    EXPECT_NE(check.dangers[0].find("hpcusers"), std::string::npos) << all(check);
    EXPECT_NE(check.dangers[0].find("cannot be resolved"), std::string::npos) << all(check);
    EXPECT_NE(check.dangers[0].find("groupadd hpcusers"), std::string::npos) << all(check);
}

TEST(DriverCheck, ParamsMissingFromTheFileAreNamed) {
    TempDir dir;
    Checked check = check_with(workstation(1), "ModifyDeviceFiles: 0\nDeviceFileUID: 0\n", dir);
    EXPECT_EQ(check.not_in_params, (std::vector<std::string>{"DeviceFileGID", "DeviceFileMode"}));
    // Counted with the driver's default 0666, which the policy forbids.
    EXPECT_EQ(check.mode, 0666u);
    EXPECT_FALSE(check.dangers.empty());
}

TEST(DriverCheck, DriverNotLoaded) {
    TempDir dir;
    FakeMachine machine = workstation(1);
    machine.driver_loaded = false;
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    auto check = check_as_is(dir);
    ASSERT_TRUE(check);
    EXPECT_FALSE(check->driver_loaded);
}

TEST(DriverCheck, MalformedParamsNameTheLine) {
    TempDir dir;
    FakeMachine machine = workstation(1);
    machine.params = "ModifyDeviceFiles: 0\nDeviceFileMode: 0x1b6\n";
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    auto check = check_as_is(dir);
    ASSERT_FALSE(check);
    EXPECT_NE(check.error().text().find("params:2:"), std::string::npos) << check.error().text();
}

// The check dropped a discovery error and judged an imaginary GPU 0: with a
// malformed /proc/devices gpu-mknod stopped (exit 3) but --check said 0.
TEST(DriverCheck, WhatItCannotReadFailsTheCheck) {
    struct Case {
        const char* what;
        void (*breaks)(FakeMachine& machine);
        const char* expected;
    } cases[] = {
        {"/proc/devices",
         [](FakeMachine& m) { m.proc_devices_override = "Character devices:\nx\n"; },
         "proc/devices:2:"},
        {"information", [](FakeMachine& m) { m.pci[1].information_has_minor = false; },
         "no 'Device Minor:'"},
        {"params", [](FakeMachine& m) { m.params = "DeviceFileMode: \"wide\"\n"; },
         "DeviceFileMode is '\"wide\"', not a number"},
        {"policy", [](FakeMachine& m) { m.policy = "gpu=0 group=x mode=9\n"; },
         "gpu-restriction.conf:1: mode=9"},
    };
    for (const Case& c : cases) {
        TempDir dir;
        FakeMachine machine = workstation(1);
        c.breaks(machine);
        ASSERT_TRUE(write_fixture(machine, dir.path()));
        auto check = check_as_is(dir);
        ASSERT_FALSE(check) << c.what;
        EXPECT_NE(check.error().text().find(c.expected), std::string::npos)
            << c.what << ": " << check.error().text();
        std::string output;
        // 3: nothing could be done (gpuinit(8)), not 4: nothing was judged.
        EXPECT_EQ(testing::run_process({GPU_MODLOAD_BIN, "--root", dir.path(), "--check"}, &output),
                  3)
            << c.what << ": " << output;
        EXPECT_EQ(output.find("cannot undo or widen"), std::string::npos) << output;
    }
}

// The control rules count too: nvidia-modprobe creates and (with
// ModifyDeviceFiles) resets nvidiactl and the uvm nodes with the driver's
// uid, gid and mode.
TEST(DriverCheck, ControlRulesAreChecked) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.groups.emplace_back("video");
    machine.policy = "gpu=* group=video mode=0660\ncontrol=* group=root mode=0600\n";
    Checked check =
        check_with(machine,
                   "ModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: " +
                       std::to_string(machine.gid_of("video")) + "\nDeviceFileMode: 432\n",
                   dir);
    EXPECT_FALSE(check.dangers.empty());
    EXPECT_NE(all(check).find("access to /dev/nvidiactl"), std::string::npos) << all(check);
    EXPECT_NE(all(check).find("access to /dev/nvidia-uvm"), std::string::npos) << all(check);
    EXPECT_NE(all(check).find("gpu-restriction.conf:2"), std::string::npos) << all(check);
}

// It said "ModifyDeviceFiles is 1" whatever the value.
TEST(DriverCheck, TheValueShownIsTheDriversValue) {
    TempDir dir;
    Checked check = check_with(workstation(2),
                               "ModifyDeviceFiles: 2\nDeviceFileUID: 0\nDeviceFileGID: 0\n"
                               "DeviceFileMode: 432\n",
                               dir);
    ASSERT_FALSE(check.dangers.empty());
    EXPECT_NE(check.dangers[0].find("ModifyDeviceFiles is 2:"), std::string::npos) << all(check);
}

} // namespace gpuinit
