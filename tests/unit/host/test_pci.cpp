#include "gpuinit/host/pci.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <optional>
#include <sys/stat.h>
#include <thread>
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

void put(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
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
    EXPECT_EQ((*gpus)[2].pci_class, 0x0380u);
    auto one = scan_nvidia_gpus(*root, std::string("0000:27:00.0"));
    ASSERT_TRUE(one);
    EXPECT_EQ(addresses(*one), (std::vector<std::string>{"0000:27:00.0"}));
    auto audio = scan_nvidia_gpus(*root, std::string("0000:17:00.1"));
    ASSERT_TRUE(audio);
    EXPECT_TRUE(audio->empty());
}

TEST(Pci, ClassesThatCount) {
    EXPECT_TRUE(is_gpu_class(0x0300));
    EXPECT_TRUE(is_gpu_class(0x0302));
    EXPECT_TRUE(is_gpu_class(0x0380));
    EXPECT_FALSE(is_gpu_class(0x0403));
    EXPECT_FALSE(is_gpu_class(0x0c03));
    EXPECT_FALSE(is_gpu_class(0x0680));
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
    // A FIFO where sysfs has a file: refused, not read (or waited on). The
    // bridge is not NVIDIA's, so only a walk without the kernel's listing
    // opens its vendor.
    ASSERT_EQ(::unlink((dir / "proc/bus/pci/devices").c_str()), 0);
    ASSERT_EQ(::unlink((devices + "/0000:00:00.0/vendor").c_str()), 0);
    ASSERT_EQ(::mkfifo((devices + "/0000:00:00.0/vendor").c_str(), 0644), 0);
    auto fifo = scan_nvidia_gpus(*root);
    ASSERT_FALSE(fifo);
    EXPECT_NE(fifo.error().text().find("not a regular file"), std::string::npos);
}

TEST(Pci, ProcListingInTheKernelsFormat) {
    // Two lines as a 6.1 kernel writes them (drivers/pci/proc.c), one bound.
    std::string text = "0000\t80860d57\t0\t               0\t               0\t\n"
                       "1700\t10de20b5\tb1\t        fb000000\t       38000000c\tnvidia\n";
    auto listed = parse_proc_pci_devices(text);
    ASSERT_TRUE(listed);
    EXPECT_EQ(*listed, (std::vector<ProcPciFunction>{{0x0000, 0x8086}, {0x1700, 0x10de}}));
    EXPECT_TRUE(parse_proc_pci_devices("")->empty());
    EXPECT_EQ(parse_proc_pci_devices("00ff\t10de20b5")->front().bus_devfn, 0x00ff);
    for (const char* broken :
         {"000\t10de20b5\t0\n", "0000 10de20b5\t0\n", "0000\t10de20b\t0\n", "0000\t10de20b5 0\n",
          "0000\t10de20b5\t0\n\n", "0000\t10de20b5\t0\ngarbage\n", "00g0\t10de20b5\t0\n",
          "0000\t10dx20b5\t0\n"}) {
        EXPECT_FALSE(parse_proc_pci_devices(broken)) << ::testing::PrintToString(broken);
    }
}

// Builds a workstation whose Intel bridge's vendor file is a FIFO: a walk
// that opens it fails, so a passing scan shows the listing ruled it out.
struct TrappedBridge {
    TempDir dir;
    std::string listing = dir / "proc/bus/pci/devices";
    std::string trap = dir / "sys/bus/pci/devices/0000:00:00.0/vendor";

    explicit TrappedBridge(FakeMachine machine) {
        EXPECT_TRUE(write_fixture(machine, dir.path()));
        EXPECT_EQ(::unlink(trap.c_str()), 0);
        EXPECT_EQ(::mkfifo(trap.c_str(), 0644), 0);
    }
    Result<std::vector<PciFunction>> scan() const {
        auto root = Sysroot::open(dir.path());
        if (!root) {
            return root.error();
        }
        return scan_nvidia_gpus(*root);
    }
};

TEST(Pci, ProcListingRulesOutOtherVendorsWithoutOpeningThem) {
    TrappedBridge machine(workstation(2));
    auto gpus = machine.scan();
    ASSERT_TRUE(gpus) << gpus.error().text();
    EXPECT_EQ(addresses(*gpus), (std::vector<std::string>{"0000:17:00.0", "0000:27:00.0"}));
}

TEST(Pci, AListingNotInTheKernelsFormatIsNotTrusted) {
    TrappedBridge machine(workstation(1));
    put(machine.listing, "0000\t80860d57\t0\nnot the kernel's\n");
    auto gpus = machine.scan();
    ASSERT_FALSE(gpus);
    EXPECT_NE(gpus.error().text().find(machine.trap), std::string::npos);
}

TEST(Pci, AFunctionTheListingLacksIsRead) {
    // A GPU hotplugged between the listing and the walk: sysfs has it, the
    // listing has only the bridge.
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(2), dir.path()));
    put(dir / "proc/bus/pci/devices", "0000\t80861237\t0\t\n");
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    auto gpus = scan_nvidia_gpus(*root);
    ASSERT_TRUE(gpus) << gpus.error().text();
    EXPECT_EQ(addresses(*gpus), (std::vector<std::string>{"0000:17:00.0", "0000:27:00.0"}));
}

TEST(Pci, DomainsThatShareABusAndDevfnAreAllRead) {
    // The listing has no domains: 0000:00:00.0 (Intel) and 10000:00:00.0 (a
    // GPU behind VMD) are both "0000". Neither may be ruled out, so the
    // trapped bridge is opened, and the GPU is found once the trap is gone.
    FakeMachine machine = workstation(1);
    machine.pci.push_back({"10000:00:00.0", 0x10de, 0x2330, 0x030200, std::nullopt, "", ""});
    TrappedBridge trapped(machine);
    auto gpus = trapped.scan();
    ASSERT_FALSE(gpus);
    EXPECT_NE(gpus.error().text().find(trapped.trap), std::string::npos);
    ASSERT_EQ(::unlink(trapped.trap.c_str()), 0);
    put(trapped.trap, "0x8086\n");
    gpus = trapped.scan();
    ASSERT_TRUE(gpus) << gpus.error().text();
    EXPECT_EQ(addresses(*gpus), (std::vector<std::string>{"0000:17:00.0", "10000:00:00.0"}));
}

TEST(Pci, TwoDomainsListedTwiceWithoutNvidiaAreRuledOut) {
    FakeMachine machine = workstation(1);
    machine.pci.push_back({"0001:00:00.0", 0x8086, 0x1237, 0x060000, std::nullopt, "", ""});
    TrappedBridge trapped(machine);
    auto gpus = trapped.scan();
    ASSERT_TRUE(gpus) << gpus.error().text();
    EXPECT_EQ(addresses(*gpus), (std::vector<std::string>{"0000:17:00.0"}));
}

TEST(Pci, KnownFunctionsAreNeitherOpenedNorReturned) {
    // The driver lists 0000:17:00.0: its class file is a FIFO the walk would
    // refuse, so a passing scan shows it was not opened.
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(2), dir.path()));
    std::string trap = dir / "sys/bus/pci/devices/0000:17:00.0/class";
    ASSERT_EQ(::unlink(trap.c_str()), 0);
    ASSERT_EQ(::mkfifo(trap.c_str(), 0644), 0);
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    auto gpus = scan_nvidia_gpus(*root, std::nullopt, {"0000:17:00.0"});
    ASSERT_TRUE(gpus) << gpus.error().text();
    EXPECT_EQ(addresses(*gpus), (std::vector<std::string>{"0000:27:00.0"}));
    EXPECT_FALSE(scan_nvidia_gpus(*root));
}

// A copied tree is shaped like sysfs: devices/<address> is a relative
// symlink into sys/devices. libpci follows it, and so does the check.
TEST(Pci, RelativeLinksInsideTheRootAreWalked) {
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(2), dir.path()));
    std::string devices = dir / "sys/bus/pci/devices";
    std::string real = dir / "sys/devices/pci0000:00";
    std::filesystem::create_directories(real);
    for (const auto& entry : std::filesystem::directory_iterator(devices)) {
        std::string name = entry.path().filename();
        std::filesystem::rename(entry.path(), real + "/" + name);
        std::filesystem::create_directory_symlink("../../../devices/pci0000:00/" + name,
                                                  entry.path());
    }
    ASSERT_EQ(::unlink((dir / "proc/bus/pci/devices").c_str()), 0); // every function is read
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    auto gpus = scan_nvidia_gpus(*root);
    ASSERT_TRUE(gpus) << gpus.error().text();
    EXPECT_EQ(addresses(*gpus), (std::vector<std::string>{"0000:17:00.0", "0000:27:00.0"}));
}

// libpci opens by path and follows symlinks: a link out of the root would
// have it read the host's files. The check refuses it first, naming it.
TEST(Pci, ALinkOutOfTheRootIsRefused) {
    TempDir outside;
    put(outside / "class", "0x030200\n");
    put(outside / "vendor", "0x10de\n");
    put(outside / "device", "0x20b5\n");
    for (bool whole_function : {false, true}) {
        TempDir dir;
        ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
        std::string function = dir / "sys/bus/pci/devices/0000:17:00.0";
        std::string link = whole_function ? function : function + "/class";
        std::filesystem::remove_all(link);
        std::filesystem::create_symlink(whole_function ? outside.path() : outside / "class", link);
        auto root = Sysroot::open(dir.path());
        ASSERT_TRUE(root);
        auto gpus = scan_nvidia_gpus(*root);
        ASSERT_FALSE(gpus) << whole_function;
        EXPECT_NE(gpus.error().text().find(function + "/class resolves outside " + dir.path()),
                  std::string::npos)
            << gpus.error().text();
        // The same by address, without a walk.
        auto one = scan_nvidia_gpus(*root, std::string("0000:17:00.0"));
        ASSERT_FALSE(one);
        EXPECT_NE(one.error().text().find("resolves outside"), std::string::npos);
    }
    // ".." that climbs out of the root is refused the same way.
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
    std::string class_file = dir / "sys/bus/pci/devices/0000:17:00.0/class";
    ASSERT_EQ(::unlink(class_file.c_str()), 0);
    std::string up;
    for (const char c : class_file) {
        if (c == '/') {
            up += "../";
        }
    }
    ASSERT_EQ(::symlink((up + outside.path().substr(1) + "/class").c_str(), class_file.c_str()), 0);
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    auto gpus = scan_nvidia_gpus(*root);
    ASSERT_FALSE(gpus);
    EXPECT_NE(gpus.error().text().find("resolves outside"), std::string::npos)
        << gpus.error().text();
}

TEST(Pci, ADevicesDirectoryThatIsALinkIsRefused) {
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
    std::string devices = dir / "sys/bus/pci/devices";
    std::filesystem::rename(devices, devices + ".real");
    std::filesystem::create_directory_symlink("devices.real", devices);
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    auto gpus = scan_nvidia_gpus(*root);
    ASSERT_FALSE(gpus);
    EXPECT_NE(gpus.error().text().find(devices + " is not a directory"), std::string::npos)
        << gpus.error().text();
}

// Every attribute libpci opens is checked first: a FIFO would block its
// open() (no O_NONBLOCK in sysfs.c), here or by address.
TEST(Pci, AFifoLibpciWouldOpenIsRefusedNotWaitedOn) {
    for (const char* trap : {"0000:00:00.0/device", "0000:17:00.0/class"}) {
        TempDir dir;
        ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
        ASSERT_EQ(::unlink((dir / "proc/bus/pci/devices").c_str()), 0);
        std::string path = dir / "sys/bus/pci/devices/" + trap;
        ASSERT_EQ(::unlink(path.c_str()), 0);
        ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
        auto root = Sysroot::open(dir.path());
        ASSERT_TRUE(root);
        auto gpus = scan_nvidia_gpus(*root);
        ASSERT_FALSE(gpus) << trap;
        EXPECT_NE(gpus.error().text().find(path + " is not a regular file"), std::string::npos)
            << gpus.error().text();
        if (std::string(trap).starts_with("0000:17:00.0")) {
            auto one = scan_nvidia_gpus(*root, std::string("17:00.0"));
            ASSERT_FALSE(one);
            EXPECT_NE(one.error().text().find(path + " is not a regular file"), std::string::npos)
                << one.error().text();
            auto absent = scan_nvidia_gpus(*root, std::string("0000:99:00.0"));
            ASSERT_TRUE(absent) << absent.error().text();
            EXPECT_TRUE(absent->empty());
        }
    }
}

// libpci's walk keeps a record of every entry before anything is checked:
// a copied tree (not sysfs) with more entries than a PCI domain has
// functions is refused before libpci sees it.
TEST(Pci, ACopiedTreeWithMoreEntriesThanAnyBusIsRefused) {
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
    std::string devices = dir / "sys/bus/pci/devices";
    char name[32];
    for (size_t domain = 1; domain <= kPciMaxFunctions; ++domain) {
        std::snprintf(name, sizeof name, "/%04zx:00:00.0", domain);
        ASSERT_EQ(::symlink("0000:00:00.0", (devices + name).c_str()), 0) << name;
    }
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    auto gpus = scan_nvidia_gpus(*root);
    ASSERT_FALSE(gpus);
    EXPECT_NE(gpus.error().text().find(devices + " has more than 65536 entries"), std::string::npos)
        << gpus.error().text();
    // --device looks at one function and never walks.
    auto one = scan_nvidia_gpus(*root, std::string("0000:17:00.0"));
    EXPECT_TRUE(one) << one.error().text();
}

// libpci's error handler must not return; ours leaves the walk with one
// line that names the entry, and the process goes on (libpci's own would
// exit(1)).
TEST(Pci, EntriesLibpciRefusesAreErrorsNotExits) {
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
    std::string devices = dir / "sys/bus/pci/devices";
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    ASSERT_EQ(::mkdir((devices + "/80000000:00:00.0").c_str(), 0755), 0);
    auto big_domain = scan_nvidia_gpus(*root);
    ASSERT_FALSE(big_domain);
    EXPECT_NE(big_domain.error().text().find(devices + ": libpci: sysfs_scan: Invalid domain"),
              std::string::npos)
        << big_domain.error().text();
    ASSERT_EQ(::rmdir((devices + "/80000000:00:00.0").c_str()), 0);
    ASSERT_EQ(::mkdir((devices + "/0000:00:00.9").c_str(), 0755), 0);
    auto function_9 = scan_nvidia_gpus(*root);
    ASSERT_FALSE(function_9);
    EXPECT_NE(function_9.error().text().find(devices + "/0000:00:00.9: not a PCI address"),
              std::string::npos)
        << function_9.error().text();
    ASSERT_EQ(::rmdir((devices + "/0000:00:00.9").c_str()), 0);
    ASSERT_EQ(::mkdir((devices + "/bad\nname").c_str(), 0755), 0);
    auto control = scan_nvidia_gpus(*root);
    ASSERT_FALSE(control);
    EXPECT_EQ(control.error().text().find('\n'), std::string::npos) << control.error().text();
    EXPECT_NE(control.error().text().find("not a PCI address"), std::string::npos);
}

constexpr const char* kFixturePciIds = "# pci.ids as the test writes it\n"
                                       "10de  NVIDIA Corporation\n"
                                       "\t20b5  GA100 [A100 PCIe 80GB]\n"
                                       "\t2331  GH100 [H100 PCIe]\n"
                                       "8086  Intel Corporation\n"
                                       "\t1237  440FX - 82441FX PMC [Natoma]\n";

FakeMachine with_unlisted_gpus() {
    FakeMachine machine = workstation(1);
    machine.pci.push_back({"0000:a0:00.0", 0x10de, 0x2331, 0x030200, std::nullopt, "", ""});
    machine.pci.push_back({"10000:00:01.0", 0x10de, 0x2336, 0x030200, std::nullopt, "", ""});
    return machine;
}

// The fixture with unlisted GPUs in `dir`, with `pci_ids` as its pci.ids
// unless nullopt.
void write_names_fixture(const TempDir& dir, const std::optional<std::string>& pci_ids) {
    ASSERT_TRUE(write_fixture(with_unlisted_gpus(), dir.path()));
    if (pci_ids) {
        std::filesystem::create_directories(dir / "usr/share/misc");
        put(dir / "usr/share/misc/pci.ids", *pci_ids);
    }
}

// The names of `bdfs` under the root `dir`, with what was said about them.
std::vector<std::string> names_under(const TempDir& dir, const std::vector<std::string>& bdfs,
                                     Diagnostics& diagnostics) {
    auto root = Sysroot::open(dir.path());
    EXPECT_TRUE(root) << root.error().text();
    if (!root) {
        return {};
    }
    return pci_device_names(*root, bdfs, diagnostics);
}

// The one warning of `diagnostics` contains `reason`.
void expect_one_warning(const Diagnostics& diagnostics, std::string_view reason) {
    ASSERT_EQ(diagnostics.count(Severity::Warning), 1u);
    EXPECT_NE(diagnostics.items()[0].text().find(reason), std::string::npos)
        << diagnostics.items()[0].text();
}

TEST(PciNames, FromTheRootsPciIds) {
    TempDir dir;
    write_names_fixture(dir, kFixturePciIds);
    Diagnostics diagnostics;
    auto names = names_under(
        dir, {"0000:17:00.0", "0000:a0:00.0", "10000:00:01.0", "0000:99:00.0", "garbage"},
        diagnostics);
    // 10de:2336 is not in this pci.ids, 0000:99:00.0 is not on the bus.
    EXPECT_EQ(names, (std::vector<std::string>{"GA100 [A100 PCIe 80GB]", "GH100 [H100 PCIe]", "",
                                               "", ""}));
    EXPECT_TRUE(diagnostics.empty());
}

TEST(PciNames, NoPciIdsIsNoNamesAndNoError) {
    TempDir dir;
    write_names_fixture(dir, std::nullopt);
    Diagnostics diagnostics;
    auto names = names_under(dir, {"0000:17:00.0", "0000:a0:00.0"}, diagnostics);
    EXPECT_EQ(names, (std::vector<std::string>{"", ""}));
    EXPECT_TRUE(diagnostics.empty());
}

TEST(PciNames, APciIdsLibpciCannotParseIsAWarning) {
    TempDir dir;
    write_names_fixture(dir, "10de  NVIDIA Corporation\n\t\t\t\t2331  deep\n");
    Diagnostics diagnostics;
    auto names = names_under(dir, {"0000:a0:00.0"}, diagnostics);
    EXPECT_EQ(names, (std::vector<std::string>{""}));
    expect_one_warning(diagnostics, dir / "usr/share/misc/pci.ids: libpci: Parse error");
}

// pci.ids is parsed whole into libpci's hash, every entry an allocation: a
// tree's owner could hand a root tool gigabytes to parse. One larger than
// any real pci.ids (Debian's is 1.3 MB) gives no names, and a warning.
TEST(PciNames, APciIdsLargerThanAnyRealOneIsRefused) {
    TempDir dir;
    std::string text = kFixturePciIds;
    std::string comment = "# " + std::string(1000, 'x') + "\n";
    while (text.size() <= kPciIdsMaxBytes) {
        text += comment;
    }
    write_names_fixture(dir, text);
    Diagnostics diagnostics;
    auto names = names_under(dir, {"0000:a0:00.0"}, diagnostics);
    EXPECT_EQ(names, (std::vector<std::string>{""}));
    expect_one_warning(diagnostics, "larger than");
}

// A dynamic libpci built with zlib (Debian's) inflates a gzip-compressed
// pci.ids as it reads it, so its size says nothing of what is parsed; the
// static one cannot read it at all. Refused in both, the same way.
TEST(PciNames, ACompressedPciIdsIsRefused) {
    TempDir dir;
    // gzip -n of "10de  NVIDIA Corporation\n\t2331  GH100 [H100 PCIe]\n".
    constexpr unsigned char kGzip[] = {
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x33, 0x34, 0x48, 0x49,
        0x55, 0x50, 0xf0, 0x0b, 0xf3, 0x74, 0xf1, 0x74, 0x54, 0x70, 0xce, 0x2f, 0x2a, 0xc8,
        0x2f, 0x4a, 0x2c, 0xc9, 0xcc, 0xcf, 0xe3, 0xe2, 0x34, 0x32, 0x36, 0x36, 0x54, 0x50,
        0x70, 0xf7, 0x30, 0x34, 0x30, 0x50, 0x88, 0x06, 0x93, 0x01, 0xce, 0x9e, 0xa9, 0xb1,
        0x5c, 0x00, 0x61, 0xf1, 0x54, 0x7e, 0x32, 0x00, 0x00, 0x00};
    write_names_fixture(dir, std::string(reinterpret_cast<const char*>(kGzip), sizeof kGzip));
    Diagnostics diagnostics;
    auto names = names_under(dir, {"0000:a0:00.0"}, diagnostics);
    EXPECT_EQ(names, (std::vector<std::string>{""}));
    expect_one_warning(diagnostics, "compressed");
}

// pci.ids as a FIFO a writer waits on: opening it for reading, even with
// O_NONBLOCK, would let the writer's open() return. It is refused without
// being opened.
TEST(PciNames, APciIdsThatIsAFifoIsNotOpened) {
    TempDir dir;
    write_names_fixture(dir, std::nullopt);
    std::filesystem::create_directories(dir / "usr/share/misc");
    std::string fifo = dir / "usr/share/misc/pci.ids";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
    std::atomic<bool> writer_opened{false};
    std::thread writer([&] {
        int fd = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC); // waits for a reader
        writer_opened = true;
        if (fd >= 0) {
            ::close(fd);
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200)); // the writer waits
    Diagnostics diagnostics;
    auto names = names_under(dir, {"0000:a0:00.0"}, diagnostics);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    bool opened_by_us = writer_opened.load();
    // Let the writer go: open it for reading here.
    int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    writer.join();
    if (reader >= 0) {
        ::close(reader);
    }
    EXPECT_FALSE(opened_by_us) << "pci.ids (a FIFO) was opened";
    EXPECT_EQ(names, (std::vector<std::string>{""}));
    expect_one_warning(diagnostics, "not a regular file");
}

} // namespace gpuinit
