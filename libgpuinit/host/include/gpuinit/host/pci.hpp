// The NVIDIA GPUs on the PCI bus, walked with libpci (pciutils) over the
// sysroot's sys/bus/pci, and their names from pci.ids.
//
// libpci's sysfs method lists the devices directory and opens each
// attribute by path, following symlinks. Before it opens anything the walk
// checks it through the root (beneath it, a regular file, nothing that
// would block or be a device), and hands libpci the checked sys/bus/pci as
// /proc/self/fd/N. To read as little as possible, every function's vendor
// comes from one read of /proc/bus/pci/devices, and libpci fills (and so
// opens attributes of) only the functions that listing cannot rule out:
// class for NVIDIA's, vendor and device first where the listing is silent.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

inline constexpr uint16_t kNvidiaVendor = 0x10de;
inline constexpr std::string_view kPciDevicesPath = "sys/bus/pci/devices";
inline constexpr std::string_view kProcPciDevicesPath = "proc/bus/pci/devices";

inline constexpr std::string_view kPciIdsPath = "usr/share/misc/pci.ids";
// The most of pci.ids read (Debian's is 1.3 MB and grows by about 0.1 MB a
// year): libpci parses the whole file into memory.
inline constexpr size_t kPciIdsMaxBytes = size_t{16} << 20;
// The most entries a copied tree's sys/bus/pci/devices may have: one PCI
// domain has at most 65536 functions (256 buses of 256), and real machines
// have a few hundred. libpci keeps a 424-byte record of every entry.
inline constexpr size_t kPciMaxFunctions = size_t{1} << 16;

struct PciFunction {
    std::string bdf;        // canonical "dddd:bb:dd.f" (the domain may have 5 digits)
    uint16_t pci_class = 0; // class and subclass, libpci's device_class: 0x0302
};

// Base class display (0x03): VGA 0x0300, 3D 0x0302 and 0x0380 are GPUs;
// an NVIDIA board's audio (0x0403) and USB (0x0c03) functions are not.
constexpr bool is_gpu_class(uint16_t pci_class) {
    return (pci_class >> 8) == 0x03;
}

// One function as /proc/bus/pci/devices lists it. The kernel names it by
// bus and devfn ("%02x%02x") without its domain, so functions of two
// domains can share a key.
struct ProcPciFunction {
    uint16_t bus_devfn = 0; // bus << 8 | device << 3 | function
    uint16_t vendor = 0;
    bool operator==(const ProcPciFunction&) const = default;
};

// Every line of /proc/bus/pci/devices, in file order; nullopt when any line
// does not start the kernel's way: four hex digits, a tab, eight hex digits
// (vendor and device), then a tab or the end of the line.
std::optional<std::vector<ProcPciFunction>> parse_proc_pci_devices(std::string_view text);

// The NVIDIA GPUs under <root>/sys/bus/pci/devices, sorted by address;
// with `only`, just that function (when it is an NVIDIA GPU; no walk). A
// function whose bus and devfn /proc/bus/pci/devices lists only with other
// vendors is not opened; one it lists alone as NVIDIA's has only its class
// read; without that file (or with one that is not in the kernel's format)
// every function's vendor and device are read from sysfs. An entry that
// libpci cannot parse as an address, an attribute that is missing, not a
// regular file or outside the root, or a value libpci cannot read, is an
// error that names it (libpci never exits the process).
// Functions in `known` (addresses the driver already lists) are neither
// opened nor returned.
Result<std::vector<PciFunction>> scan_nvidia_gpus(const Sysroot& root,
                                                  const std::optional<std::string>& only = {},
                                                  const std::vector<std::string>& known = {});

// pci.ids names (libpci's pci_lookup_name, PCI_LOOKUP_DEVICE: "GH100 [H100
// PCIe]") of the functions at `bdfs`, in the same order; "" where the
// function, or pci.ids, has none. pci.ids is the root's
// usr/share/misc/pci.ids (Debian's pci.ids package); reading and parsing it
// costs milliseconds, so only reports ask. No pci.ids is no names, not an
// error; one libpci cannot parse, larger than kPciIdsMaxBytes or
// gzip-compressed, or a function whose IDs cannot be read, is a warning.
std::vector<std::string> pci_device_names(const Sysroot& root, const std::vector<std::string>& bdfs,
                                          Diagnostics& diagnostics);

// "17:00.0" or "0000:17:00.0" (any case) -> "0000:17:00.0"; nullopt when the
// text is not a PCI address.
std::optional<std::string> normalize_bdf(std::string_view text);

} // namespace gpuinit
