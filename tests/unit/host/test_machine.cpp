// Discovery of the driver's GPUs and majors on generated fixture roots.
#include "gpuinit/base/text.hpp"
#include "gpuinit/host/machine.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <fstream>
#include <gtest/gtest.h>

namespace gpuinit {

using testing::FakeMachine;
using testing::TempDir;
using testing::workstation;
using testing::write_fixture;

namespace {

struct Found {
    Result<Machine> machine;
    Diagnostics diagnostics;
};

Found discover(const FakeMachine& fake, const TempDir& dir) {
    EXPECT_TRUE(write_fixture(fake, dir.path()));
    auto root = Sysroot::open(dir.path());
    Diagnostics diagnostics;
    auto machine = discover_machine(*root, diagnostics);
    return {std::move(machine), std::move(diagnostics)};
}

std::string all(const Diagnostics& diagnostics) {
    std::string text;
    for (const Diagnostic& d : diagnostics.items()) {
        text += d.text() + "\n";
    }
    return text;
}

std::string proc_devices(const std::string& character_lines) {
    return "Character devices:\n  1 mem\n" + character_lines + "\nBlock devices:\n  8 sd\n";
}

} // namespace

// Two GPUs reporting one UUID: a UUID rule would match both, silently.
TEST(Machine, DuplicateUuidsCostBothGpusTheirNodes) {
    TempDir dir;
    FakeMachine fake = workstation(3);
    fake.pci[4].uuid = fake.pci[1].uuid; // GPUs 0 and 2 (the audio function sits between)
    fake.pci[4].uuid[7] = 'C';           // differing only in case
    auto found = discover(fake, dir);
    ASSERT_TRUE(found.machine) << found.machine.error().text();
    ASSERT_EQ(found.machine->gpus.size(), 1u);
    EXPECT_EQ(found.machine->gpus[0].minor, 1u);
    ASSERT_EQ(found.machine->unusable.size(), 2u);
    for (const UnusableGpu& gpu : found.machine->unusable) {
        EXPECT_EQ(gpu.severity, Severity::Error);
        EXPECT_NE(gpu.reason.find("as does"), std::string::npos) << gpu.reason;
    }
}

// Majors no driver gets: nvidia-uvm on nvidia's 195 would make
// /dev/nvidia-uvm c 195:0 0666, GPU 0 open to everyone.
TEST(Machine, ImpossibleMajorsAreRejected) {
    struct Case {
        const char* lines;
        const char* expected;
    } cases[] = {
        {"195 nvidia\n195 nvidia-uvm\n", "nvidia-uvm has major 195, the GPUs' own"},
        {"195 nvidia\n195 nvidia-caps\n", "nvidia-caps has major 195"},
        {"0 nvidia\n", "nvidia has major 0"},
        {"195 nvidia\n1 nvidia-uvm\n", "nvidia-uvm has major 1"},
        {"1 nvidia-frontend\n", "nvidia-frontend has major 1"},
    };
    for (const Case& c : cases) {
        TempDir dir;
        FakeMachine fake = workstation(1);
        fake.proc_devices_override = proc_devices(c.lines);
        auto found = discover(fake, dir);
        ASSERT_FALSE(found.machine) << c.lines;
        EXPECT_NE(found.machine.error().text().find(c.expected), std::string::npos)
            << found.machine.error().text();
        EXPECT_NE(found.machine.error().text().find(dir / "proc/devices:"), std::string::npos);
    }
}

// Without the driver's view, minors come from PCI order; 254 and 255 are
// nvidia-modeset's and nvidiactl's, so the 255th GPU on gets no guess (it
// once got 255, and its /dev/char link flipped every run).
TEST(Machine, GuessedMinorsStopAt253) {
    TempDir dir;
    FakeMachine fake = workstation(1);
    fake.pci.clear();
    for (unsigned i = 0; i < 256; ++i) {
        testing::FakePciFunction gpu;
        gpu.bdf = format("%04x:%02x:00.0", i / 200, i % 200);
        gpu.minor = i;
        fake.pci.push_back(gpu);
    }
    fake.driver_gpus_dir = false;
    auto found = discover(fake, dir);
    ASSERT_TRUE(found.machine) << found.machine.error().text();
    ASSERT_EQ(found.machine->gpus.size(), 254u);
    EXPECT_EQ(found.machine->gpus.back().minor, 253u);
    ASSERT_EQ(found.machine->unusable.size(), 2u);
    EXPECT_EQ(found.machine->unusable[0].severity, Severity::Error);
    EXPECT_NE(found.machine->unusable[0].reason.find("more than 254 GPUs"), std::string::npos);
}

TEST(Machine, BusLocationThatDisagreesWithItsDirectoryIsAWarning) {
    TempDir dir;
    FakeMachine fake = workstation(1);
    ASSERT_TRUE(write_fixture(fake, dir.path()));
    std::string info = dir / "proc/driver/nvidia/gpus/0000:17:00.0/information";
    std::ofstream(info) << "Model: \t\t X\nBus Location: \t 0000:18:00.0\nDevice Minor: \t 0\n";
    auto root = Sysroot::open(dir.path());
    Diagnostics diagnostics;
    auto machine = discover_machine(*root, diagnostics);
    ASSERT_TRUE(machine);
    EXPECT_EQ(machine->gpus.size(), 1u);
    ASSERT_EQ(diagnostics.count(Severity::Warning), 1u) << all(diagnostics);
    EXPECT_NE(all(diagnostics).find(info + ":2: Bus Location is '0000:18:00.0', not 0000:17:00.0"),
              std::string::npos)
        << all(diagnostics);
}

TEST(Machine, PciIsWalkedOnlyWhereNeeded) {
    TempDir dir;
    FakeMachine fake = workstation(2);
    fake.pci[3].minor.reset(); // the second GPU is not bound to nvidia
    ASSERT_TRUE(write_fixture(fake, dir.path()));
    auto root = Sysroot::open(dir.path());
    Diagnostics diagnostics;
    auto all_of_it = discover_machine(*root, diagnostics);
    ASSERT_TRUE(all_of_it);
    EXPECT_EQ(all_of_it->unusable.size(), 1u);
    auto none = discover_machine(*root, diagnostics, {PciNeed::Scope::None, {}});
    ASSERT_TRUE(none);
    EXPECT_TRUE(none->unusable.empty());
    auto one = discover_machine(*root, diagnostics, {PciNeed::Scope::One, "0000:27:00.0"});
    ASSERT_TRUE(one);
    EXPECT_EQ(one->unusable.size(), 1u);
    auto other = discover_machine(*root, diagnostics, {PciNeed::Scope::One, "0000:17:00.0"});
    ASSERT_TRUE(other);
    EXPECT_TRUE(other->unusable.empty());
}

} // namespace gpuinit

namespace gpuinit {

// gpu-persist reads only the driver's view: no majors, no PCI walk, and an
// absent directory (driver not loaded) is no GPU rather than guessed minors.
TEST(Machine, DriverGpusAloneSkipExcludedAndNeverGuess) {
    TempDir dir;
    FakeMachine fake = workstation(3);
    fake.pci[3].excluded = true; // GPU minor 1 (pci[0] a bridge, pci[2] the audio function)
    ASSERT_TRUE(write_fixture(fake, dir.path()));
    auto root = Sysroot::open(dir.path());
    Diagnostics diagnostics;
    auto view = read_driver_gpus(*root, diagnostics);
    ASSERT_TRUE(view) << view.error().message;
    EXPECT_TRUE(view->minors_from_driver);
    EXPECT_FALSE(view->nvidia_major);
    ASSERT_EQ(view->gpus.size(), 2u);
    EXPECT_EQ(view->gpus[0].minor, 0u);
    EXPECT_EQ(view->gpus[1].minor, 2u);
    ASSERT_EQ(view->unusable.size(), 1u) << "the audio function is not the driver's to list";
    EXPECT_NE(view->unusable[0].reason.find("excluded"), std::string::npos);

    TempDir unloaded;
    fake.driver_gpus_dir = false;
    ASSERT_TRUE(write_fixture(fake, unloaded.path()));
    auto bare = Sysroot::open(unloaded.path());
    auto none = read_driver_gpus(*bare, diagnostics);
    ASSERT_TRUE(none);
    EXPECT_FALSE(none->minors_from_driver);
    EXPECT_TRUE(none->gpus.empty()) << "no minor is guessed from PCI order";
}

} // namespace gpuinit
