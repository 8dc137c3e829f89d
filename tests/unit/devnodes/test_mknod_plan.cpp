// gpu-mknod's planning on generated fixture roots. These run as any user:
// a dry run only inspects the tree.
#include "gpuinit/devnodes/mknod.hpp"
#include "json_check.hpp"
#include "machine_fixture.hpp"
#include "render/mknod_report.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit {

using testing::FakeMachine;
using testing::FakePciFunction;
using testing::run_process;
using testing::TempDir;
using testing::workstation;
using testing::write_fixture;
using tools::MknodReportContext;
using tools::render_mknod_json;
using tools::render_mknod_text;

namespace {

PlanRequest device(const char* text) {
    return {PlanRequest::Scope::Device, *GpuSelector::parse(text)};
}

// A dry run on a fixture already written (and then broken) by the test.
MknodOutcome dry_run_as_is(const TempDir& dir, PlanRequest request = PlanRequest()) {
    MknodOptions options;
    options.dry_run = true;
    options.request = std::move(request);
    return run_mknod(*Sysroot::open(dir.path()), options);
}

MknodOutcome dry_run(const FakeMachine& machine, const TempDir& dir,
                     PlanRequest request = PlanRequest()) {
    EXPECT_TRUE(write_fixture(machine, dir.path()));
    return dry_run_as_is(dir, std::move(request));
}

const NodeSpec* find_node(const MknodOutcome& outcome, const std::string& name) {
    for (const NodeSpec& node : outcome.plan.nodes) {
        if (node.name == name) {
            return &node;
        }
    }
    return nullptr;
}

bool has_problem(const MknodOutcome& outcome, const std::string& text, bool error) {
    const auto& items = outcome.diagnostics.items();
    return std::any_of(items.begin(), items.end(), [&](const Diagnostic& d) {
        return d.text().find(text) != std::string::npos && (d.severity == Severity::Error) == error;
    });
}

std::string problems_of(const MknodOutcome& outcome) {
    std::string all;
    for (const Diagnostic& d : outcome.diagnostics.items()) {
        all += "\n" + d.text();
    }
    return all;
}

// Creates, counted without the /dev/char directory.
size_t created_entries(const MknodOutcome& outcome) {
    size_t n = 0;
    for (const Change& change : outcome.result.changes) {
        n += change.kind == Change::Kind::Create && change.target != Change::Target::Directory;
    }
    return n;
}

std::string text_of(const MknodOutcome& outcome, int verbosity, const TempDir& dir) {
    tools::Rendered rendered =
        render_mknod_text(outcome, MknodReportContext{dir.path(), 0}, verbosity);
    return rendered.out + rendered.err;
}

} // namespace

class GpuCount : public ::testing::TestWithParam<unsigned> {};

TEST_P(GpuCount, EveryGpuGetsItsOwnGroup) {
    unsigned gpus = GetParam();
    TempDir dir;
    FakeMachine machine = workstation(gpus);
    MknodOutcome outcome = dry_run(machine, dir);
    ASSERT_EQ(outcome.status, MknodStatus::Done) << problems_of(outcome);
    ASSERT_EQ(outcome.machine.gpus.size(), gpus);
    // nvidiaN for each GPU plus nvidiactl, nvidia-uvm and nvidia-uvm-tools.
    EXPECT_EQ(outcome.plan.nodes.size(), gpus + 3);
    EXPECT_EQ(outcome.plan.links.size(), gpus + 3);
    for (unsigned i = 0; i < gpus; ++i) {
        const NodeSpec* node = find_node(outcome, "nvidia" + std::to_string(i));
        ASSERT_NE(node, nullptr) << i;
        EXPECT_EQ(node->major, 195u);
        EXPECT_EQ(node->minor, i);
        EXPECT_EQ(node->uid, 0u);
        EXPECT_EQ(node->gid, machine.gid_of("nvidia" + std::to_string(i)));
        EXPECT_EQ(node->mode, 0660u);
    }
    const NodeSpec* ctl = find_node(outcome, "nvidiactl");
    ASSERT_NE(ctl, nullptr);
    EXPECT_EQ(ctl->minor, 255u);
    EXPECT_EQ(ctl->mode, 0666u);
    const NodeSpec* uvm_tools = find_node(outcome, "nvidia-uvm-tools");
    ASSERT_NE(uvm_tools, nullptr);
    EXPECT_EQ(uvm_tools->major, 510u);
    EXPECT_EQ(uvm_tools->minor, 1u);
    EXPECT_EQ(created_entries(outcome), 2 * (gpus + 3));
}

INSTANTIATE_TEST_SUITE_P(Machines, GpuCount, ::testing::Values(1u, 4u, 8u, 16u));

TEST(MknodPlan, MinorsComeFromTheDriverNotPciOrder) {
    TempDir dir;
    FakeMachine machine = workstation(4);
    // The driver probed in another order than the PCI listing.
    unsigned minors[] = {2, 0, 3, 1};
    unsigned next = 0;
    for (FakePciFunction& f : machine.pci) {
        if (f.minor) {
            f.minor = minors[next++];
        }
    }
    MknodOutcome outcome = dry_run(machine, dir);
    ASSERT_EQ(outcome.status, MknodStatus::Done) << problems_of(outcome);
    EXPECT_EQ(outcome.machine.gpus[0].bdf, "0000:27:00.0");
    EXPECT_EQ(outcome.machine.gpus[0].minor, 0u);
    const NodeSpec* first_in_pci = find_node(outcome, "nvidia2");
    ASSERT_NE(first_in_pci, nullptr);
    EXPECT_EQ(first_in_pci->subject, "GPU 2 (0000:17:00.0)");
    EXPECT_EQ(first_in_pci->gid, machine.gid_of("nvidia2"));
}

TEST(MknodPlan, Class0380GpuCountsAndAudioDoesNot) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.pci[3].pci_class = 0x038000; // the second GPU
    MknodOutcome outcome = dry_run(machine, dir);
    ASSERT_EQ(outcome.status, MknodStatus::Done) << problems_of(outcome);
    EXPECT_EQ(outcome.machine.gpus.size(), 2u);
    EXPECT_TRUE(outcome.machine.unusable.empty()); // the audio function is not a GPU
    EXPECT_NE(find_node(outcome, "nvidia1"), nullptr);
}

TEST(MknodPlan, AGpuNotBoundToTheDriverIsReported) {
    TempDir dir;
    FakeMachine machine = workstation(3);
    machine.pci[3].minor.reset(); // second GPU: bound to vfio-pci
    machine.pci[4].minor = 1;
    MknodOutcome outcome = dry_run(machine, dir);
    EXPECT_EQ(outcome.status, MknodStatus::Done) << problems_of(outcome);
    ASSERT_EQ(outcome.machine.unusable.size(), 1u);
    EXPECT_EQ(outcome.machine.unusable[0].bdf, "0000:27:00.0");
    EXPECT_TRUE(has_problem(outcome, "0000:27:00.0 gets no node", false));
    EXPECT_EQ(find_node(outcome, "nvidia2"), nullptr);

    TempDir by_device;
    EXPECT_EQ(dry_run(machine, by_device, device("27:00.0")).status, MknodStatus::Partial);
}

// The driver gives no model for a GPU it does not list; pci.ids does, for
// --verbose and --json only (options.names).
TEST(MknodPlan, PciIdsNamesOnlyWhenAsked) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.pci[3].minor.reset(); // second GPU: bound to vfio-pci
    machine.pci[3].device = 0x2331;
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    std::filesystem::create_directories(dir / "usr/share/misc");
    std::ofstream(dir / "usr/share/misc/pci.ids") << "10de  NVIDIA Corporation\n"
                                                     "\t20b5  GA100 [A100 PCIe 80GB]\n"
                                                     "\t2331  GH100 [H100 PCIe]\n";
    MknodOutcome quiet = dry_run_as_is(dir);
    ASSERT_EQ(quiet.machine.unusable.size(), 1u);
    EXPECT_TRUE(quiet.machine.pci_names.empty());

    MknodOptions options;
    options.dry_run = true;
    options.names = true;
    MknodOutcome named = run_mknod(*Sysroot::open(dir.path()), options);
    ASSERT_EQ(named.machine.unusable.size(), 1u);
    EXPECT_EQ(named.machine.unusable[0].bdf, "0000:27:00.0");
    EXPECT_EQ(named.machine.pci_name("0000:27:00.0"), "GH100 [H100 PCIe]");
    ASSERT_EQ(named.machine.gpus.size(), 1u);
    EXPECT_EQ(named.machine.pci_name(named.machine.gpus[0].bdf), "GA100 [A100 PCIe 80GB]");
    std::string json = render_mknod_json(named, MknodReportContext{dir.path(), 0});
    EXPECT_NE(json.find("\"bdf\":\"0000:27:00.0\",\"reason\":\"not bound to the nvidia driver"
                        " (vfio-pci, or excluded)\",\"pci_name\":\"GH100 [H100 PCIe]\""),
              std::string::npos)
        << json;
    EXPECT_TRUE(testing::valid_json(json)) << json;
    std::string text = render_mknod_text(named, MknodReportContext{dir.path(), 0}, 1).out;
    EXPECT_NE(text.find("no node  0000:27:00.0   GH100 [H100 PCIe]"), std::string::npos) << text;

    std::string output;
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--dry-run", "--json"}, &output),
              0);
    EXPECT_NE(output.find("\"pci_name\":\"GH100 [H100 PCIe]\""), std::string::npos) << output;
}

TEST(MknodPlan, LegacyFrontendName) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.legacy_frontend = true;
    MknodOutcome outcome = dry_run(machine, dir);
    ASSERT_EQ(outcome.status, MknodStatus::Done) << problems_of(outcome);
    ASSERT_NE(find_node(outcome, "nvidia1"), nullptr);
    EXPECT_EQ(find_node(outcome, "nvidia1")->major, 195u);
    EXPECT_NE(find_node(outcome, "nvidiactl"), nullptr);
}

TEST(MknodPlan, UvmNotLoadedMeansNoUvmNodes) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.uvm_loaded = false;
    MknodOutcome outcome = dry_run(machine, dir);
    ASSERT_EQ(outcome.status, MknodStatus::Done);
    EXPECT_EQ(find_node(outcome, "nvidia-uvm"), nullptr);
    EXPECT_EQ(find_node(outcome, "nvidia-uvm-tools"), nullptr);
    EXPECT_EQ(outcome.plan.nodes.size(), 3u);
}

TEST(MknodPlan, ModesetNodeWhenLoaded) {
    TempDir dir;
    FakeMachine machine = workstation(1);
    machine.modeset_loaded = true;
    MknodOutcome outcome = dry_run(machine, dir);
    const NodeSpec* modeset = find_node(outcome, "nvidia-modeset");
    ASSERT_NE(modeset, nullptr);
    EXPECT_EQ(modeset->minor, 254u);
}

TEST(MknodPlan, DriverNotLoadedDoesNothing) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.driver_loaded = false;
    MknodOutcome outcome = dry_run(machine, dir);
    EXPECT_EQ(outcome.status, MknodStatus::NothingDone);
    EXPECT_TRUE(has_problem(outcome, "not loaded", true)) << problems_of(outcome);
    EXPECT_TRUE(has_problem(outcome, "gpu-modload", true));
}

TEST(MknodPlan, MalformedProcDevicesNamesTheLine) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.proc_devices_override = "Character devices:\n  1 mem\n195 nvidia\nbogus\n";
    MknodOutcome outcome = dry_run(machine, dir);
    EXPECT_EQ(outcome.status, MknodStatus::NothingDone);
    EXPECT_TRUE(has_problem(outcome, dir / "proc/devices:4:", true)) << problems_of(outcome);
    EXPECT_TRUE(outcome.plan.nodes.empty());
}

TEST(MknodPlan, InformationWithoutMinorSkipsOnlyThatGpu) {
    TempDir dir;
    FakeMachine machine = workstation(3);
    machine.pci[3].information_has_minor = false;
    MknodOutcome outcome = dry_run(machine, dir);
    EXPECT_EQ(outcome.status, MknodStatus::Partial);
    EXPECT_TRUE(has_problem(outcome, "0000:27:00.0/information:", true)) << problems_of(outcome);
    EXPECT_NE(find_node(outcome, "nvidia0"), nullptr);
    EXPECT_EQ(find_node(outcome, "nvidia1"), nullptr);
    EXPECT_NE(find_node(outcome, "nvidia2"), nullptr);
}

TEST(MknodPlan, NoDriverViewFallsBackToPciOrderWithAWarning) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.driver_gpus_dir = false;
    MknodOutcome outcome = dry_run(machine, dir);
    EXPECT_EQ(outcome.status, MknodStatus::Done);
    EXPECT_FALSE(outcome.machine.minors_from_driver);
    EXPECT_TRUE(has_problem(outcome, "minors guessed from PCI order", false));
    EXPECT_EQ(outcome.machine.gpus[1].bdf, "0000:27:00.0");
}

TEST(MknodPlan, MissingGroupGetsARootOnlyNodeAndTheFix) {
    TempDir dir;
    FakeMachine machine = workstation(3);
    machine.groups.pop_back(); // no nvidia2
    MknodOutcome outcome = dry_run(machine, dir);
    EXPECT_EQ(outcome.status, MknodStatus::Partial);
    EXPECT_TRUE(has_problem(outcome, "group nvidia2 does not exist", true));
    EXPECT_TRUE(has_problem(outcome, "groupadd nvidia2", true));
    const NodeSpec* node = find_node(outcome, "nvidia2");
    ASSERT_NE(node, nullptr);
    EXPECT_EQ(node->gid, 0u);
    EXPECT_EQ(node->mode, 0600u);
    EXPECT_EQ(find_node(outcome, "nvidia1")->mode, 0660u); // the others proceed
}

TEST(MknodPlan, BadPolicyLineChangesNothing) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.policy = "gpu=0 group=nvidia0\ngpu=1 group=nvidia1 mode=0999\n";
    MknodOutcome outcome = dry_run(machine, dir);
    EXPECT_EQ(outcome.status, MknodStatus::NothingDone);
    EXPECT_TRUE(has_problem(outcome, "gpu-restriction.conf:2: mode=0999", true))
        << problems_of(outcome);
    EXPECT_TRUE(outcome.result.changes.empty());
}

TEST(MknodPlan, PolicyNamingAnUnknownGpuWarns) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.groups.push_back("ml");
    machine.policy = "gpu=0 group=ml mode=0640\ngpu=5 group=ml\n";
    MknodOutcome outcome = dry_run(machine, dir);
    EXPECT_EQ(outcome.status, MknodStatus::Done);
    EXPECT_TRUE(has_problem(outcome, "gpu-restriction.conf:2: gpu=5 matches no GPU", false))
        << problems_of(outcome);
    EXPECT_EQ(find_node(outcome, "nvidia0")->gid, machine.gid_of("ml"));
    EXPECT_EQ(find_node(outcome, "nvidia0")->mode, 0640u);
    EXPECT_EQ(find_node(outcome, "nvidia1")->gid, machine.gid_of("nvidia1"));
}

TEST(MknodPlan, DeviceAndControlScopes) {
    TempDir dir;
    FakeMachine machine = workstation(4);
    MknodOutcome one = dry_run(machine, dir, device("0000:37:00.0"));
    ASSERT_EQ(one.plan.nodes.size(), 1u);
    EXPECT_EQ(one.plan.nodes[0].name, "nvidia2");
    MknodOutcome by_minor = dry_run(machine, dir, device("3"));
    ASSERT_EQ(by_minor.plan.nodes.size(), 1u);
    EXPECT_EQ(by_minor.plan.nodes[0].name, "nvidia3");
    MknodOutcome control = dry_run(machine, dir, {PlanRequest::Scope::Control, {}});
    EXPECT_EQ(control.plan.nodes.size(), 3u);
    // A GPU that is not there: nothing to plan, one error (gpu-mknod exits 3).
    MknodOutcome missing = dry_run(machine, dir, device("9"));
    EXPECT_EQ(missing.status, MknodStatus::NothingDone);
    EXPECT_EQ(missing.diagnostics.count(Severity::Error), 1u);
    EXPECT_TRUE(missing.plan.nodes.empty());
    MknodOutcome by_uuid = dry_run(machine, dir, device(testing::fake_uuid(1).c_str()));
    ASSERT_EQ(by_uuid.plan.nodes.size(), 1u);
    EXPECT_EQ(by_uuid.plan.nodes[0].name, "nvidia1");
}

TEST(MknodPlan, ReportsRenderForPeopleAndScripts) {
    TempDir dir;
    MknodOutcome outcome = dry_run(workstation(1), dir);
    std::string text = text_of(outcome, 0, dir);
    EXPECT_NE(text.find("would create"), std::string::npos) << text;
    size_t start = text.find("/dev/nvidia0 ");
    ASSERT_NE(start, std::string::npos) << text;
    std::string line = text.substr(start, text.find('\n', start) - start);
    EXPECT_TRUE(line.ends_with(" c 195:0 root:nvidia0 0660")) << line;
    std::string json = render_mknod_json(outcome, MknodReportContext{dir.path(), 0});
    EXPECT_NE(json.find("\"path\":\"/dev/nvidia0\""), std::string::npos) << json;
    EXPECT_NE(json.find("\"exit_code\":0"), std::string::npos);
    EXPECT_TRUE(testing::valid_json(json)) << json;
}

// A malformed sysfs entry makes libpci give up on the whole scan. The GPUs
// the driver lists still get their nodes, but the check for GPUs it does not
// list is lost: that is an error (exit 2), even under -q, not a warning.
TEST(MknodPlan, MalformedPciEntryIsAnErrorAndTheOtherGpusProceed) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    ASSERT_EQ(::mkdir((dir / "sys/bus/pci/devices/garbage").c_str(), 0755), 0);
    MknodOutcome outcome = dry_run_as_is(dir);
    EXPECT_EQ(outcome.status, MknodStatus::Partial) << problems_of(outcome);
    EXPECT_TRUE(has_problem(outcome, dir / "sys/bus/pci/devices/garbage: not a PCI address", true))
        << problems_of(outcome);
    EXPECT_TRUE(has_problem(outcome, "garbage", true)) << problems_of(outcome);
    EXPECT_TRUE(has_problem(outcome, "not bound to the nvidia driver cannot be checked", true));
    EXPECT_NE(find_node(outcome, "nvidia0"), nullptr);
    EXPECT_NE(find_node(outcome, "nvidia1"), nullptr);

    std::string output;
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--dry-run", "-q"}, &output), 2);
    EXPECT_NE(output.find("gpu-mknod: error: " + dir / "sys/bus/pci/devices/garbage"),
              std::string::npos)
        << output;
}

TEST(MknodPlan, PciDeviceWithoutClassIsAnErrorWithItsPath) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    // The audio function: NVIDIA's and not listed by the driver, so the
    // walk needs its class (the GPUs the driver lists are not read again).
    ASSERT_EQ(::unlink((dir / "sys/bus/pci/devices/0000:17:00.1/class").c_str()), 0);
    MknodOutcome outcome = dry_run_as_is(dir);
    EXPECT_EQ(outcome.status, MknodStatus::Partial) << problems_of(outcome);
    EXPECT_TRUE(has_problem(outcome, "0000:17:00.1/class", true)) << problems_of(outcome);
    EXPECT_EQ(outcome.machine.gpus.size(), 2u);
}

// Only a missing proc/driver/nvidia/gpus means "old driver, guess from PCI
// order"; one that is there but cannot be listed stops the run.
TEST(MknodPlan, UnlistableDriverGpusDirIsAnErrorNotAPciOrderGuess) {
    struct Case {
        const char* what;
        void (*breaks)(const std::string& gpus);
        const char* expected;
    } cases[] = {
        {"a regular file",
         [](const std::string& gpus) { std::ofstream(gpus) << "not a directory\n"; },
         "Not a directory"},
        {"a symlink loop",
         [](const std::string& gpus) { ASSERT_EQ(::symlink("gpus", gpus.c_str()), 0); },
         "Too many levels of symbolic links"},
    };
    for (const Case& c : cases) {
        TempDir dir;
        FakeMachine machine = workstation(2);
        ASSERT_TRUE(write_fixture(machine, dir.path()));
        std::string gpus = dir / "proc/driver/nvidia/gpus";
        std::filesystem::remove_all(gpus);
        c.breaks(gpus);
        MknodOutcome outcome = dry_run_as_is(dir);
        EXPECT_EQ(outcome.status, MknodStatus::NothingDone)
            << c.what << ": " << problems_of(outcome);
        EXPECT_TRUE(has_problem(outcome, "cannot list " + gpus + ": " + c.expected, true))
            << problems_of(outcome);
        EXPECT_FALSE(has_problem(outcome, "guessed from PCI order", false));
        EXPECT_TRUE(outcome.machine.gpus.empty()) << c.what;
    }
}

// A run that can do nothing must leave nothing behind, not even the lock.
TEST(MknodPlan, NoDriverOrBadPolicyTakesNoLock) {
    for (bool bad_policy : {false, true}) {
        TempDir dir;
        FakeMachine machine = workstation(2);
        if (bad_policy) {
            machine.policy = "gpu=0 group=nvidia0 mode=0999\n";
        } else {
            machine.driver_loaded = false;
        }
        ASSERT_TRUE(write_fixture(machine, dir.path()));
        MknodOutcome outcome = run_mknod(*Sysroot::open(dir.path()), MknodOptions{}); // real run
        EXPECT_EQ(outcome.status, MknodStatus::NothingDone) << problems_of(outcome);
        struct stat st {};
        EXPECT_NE(::lstat((dir / "run/gpuinit/lock").c_str(), &st), 0) << problems_of(outcome);
        EXPECT_NE(::lstat((dir / "run/gpuinit").c_str(), &st), 0) << problems_of(outcome);
    }
}

} // namespace gpuinit

namespace gpuinit {

// MIG caps: config, monitor and every existing GI and CI get a node in
// /dev/nvidia-caps (root:root with the driver's mode unless a MIG rule
// says otherwise), a /dev/char link, and DeviceFileModify 1 becomes 0.
TEST(MknodPlan, MigCapNodesWithTheDriversModesAndTheirRules) {
    TempDir dir;
    FakeMachine machine = testing::a100_mig_box();
    machine.groups.push_back("vision");
    machine.policy = "gpu=2 gi=9 group=vision\n"
                     "gpu=3 gi=13 ci=0 group=nosuch\n";
    MknodOutcome outcome = dry_run(machine, dir);
    size_t caps = std::count_if(
        outcome.plan.nodes.begin(), outcome.plan.nodes.end(),
        [](const NodeSpec& node) { return node.name.starts_with("nvidia-caps/nvidia-cap"); });
    EXPECT_EQ(caps, 2u + 42u);
    const NodeSpec* config = find_node(outcome, "nvidia-caps/nvidia-cap1");
    ASSERT_NE(config, nullptr);
    EXPECT_EQ(config->major, 235u);
    EXPECT_EQ(config->mode, 0400u);
    EXPECT_EQ(config->group, "root");
    const NodeSpec* gi = find_node(outcome, cap_node_name(testing::oracle_gi_minor(1, 7)));
    ASSERT_NE(gi, nullptr);
    EXPECT_EQ(gi->mode, 0444u);
    EXPECT_EQ(gi->origin, "the driver's mode");
    const NodeSpec* ruled = find_node(outcome, cap_node_name(testing::oracle_ci_minor(2, 9, 0)));
    ASSERT_NE(ruled, nullptr);
    EXPECT_EQ(ruled->group, "vision");
    EXPECT_EQ(ruled->mode, 0440u);
    EXPECT_EQ(find_node(outcome, cap_node_name(testing::oracle_gi_minor(2, 9)))->group, "vision");
    // A missing group: root-only, never the driver's wider 0444.
    const NodeSpec* missing = find_node(outcome, cap_node_name(testing::oracle_ci_minor(3, 13, 0)));
    ASSERT_NE(missing, nullptr);
    EXPECT_EQ(missing->mode, 0600u);
    EXPECT_TRUE(has_problem(outcome, "group nosuch does not exist", true)) << problems_of(outcome);
    EXPECT_EQ(outcome.plan.modify_off.size(), 44u);
    ASSERT_EQ(outcome.plan.prune.size(), 1u);
    EXPECT_EQ(outcome.plan.prune[0].dir, "nvidia-caps");
    // --mig plans the caps alone.
    MknodOutcome mig_only = dry_run_as_is(dir, PlanRequest{PlanRequest::Scope::Mig, {}});
    EXPECT_EQ(mig_only.plan.nodes.size(), 44u);
    EXPECT_EQ(find_node(mig_only, "nvidia0"), nullptr);
}

TEST(MknodPlan, NoMigCapabilitiesNoCapNodes) {
    TempDir dir;
    MknodOutcome outcome = dry_run(workstation(2), dir);
    EXPECT_TRUE(outcome.plan.prune.empty());
    EXPECT_TRUE(outcome.plan.modify_off.empty());
    EXPECT_EQ(find_node(outcome, "nvidia-caps/nvidia-cap1"), nullptr);
}

} // namespace gpuinit
