// The NVIDIA GPUs on the PCI bus, read from sysfs under the sysroot.
//
// libpci's sysfs method opens vendor, device and class by path for every
// function, and cannot start from a directory fd; on a server with 96
// functions that was two thirds of a gpu-mknod run. This reader takes every
// function's vendor from one read of /proc/bus/pci/devices, and opens
// sysfs attributes (relative to the devices directory) only for the
// functions that listing cannot rule out: vendor, then class for NVIDIA's.
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

struct PciFunction {
    std::string bdf;        // canonical "dddd:bb:dd.f" (the domain may have 5 digits)
    uint32_t pci_class = 0; // class, subclass, prog-if: 0x030200
};

// Base class display (0x03): VGA 0x0300, 3D 0x0302 and 0x0380 are GPUs;
// an NVIDIA board's audio (0x0403) and USB (0x0c03) functions are not.
constexpr bool is_gpu_class(uint32_t pci_class) {
    return (pci_class >> 16) == 0x03;
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
// with `only`, just that function (when it is an NVIDIA GPU). A function
// whose bus and devfn /proc/bus/pci/devices lists only with other vendors
// is not opened; without that file (or with one that is not in the
// kernel's format) every function's vendor is read from sysfs. An entry
// that is not a PCI address, or a vendor or class file that is read and is
// missing or malformed, is an error that names it.
// Functions in `known` (addresses the driver already lists) are neither
// opened nor returned.
Result<std::vector<PciFunction>> scan_nvidia_gpus(const Sysroot& root,
                                                  const std::optional<std::string>& only = {},
                                                  const std::vector<std::string>& known = {});

// "17:00.0" or "0000:17:00.0" (any case) -> "0000:17:00.0"; nullopt when the
// text is not a PCI address.
std::optional<std::string> normalize_bdf(std::string_view text);

} // namespace gpuinit
