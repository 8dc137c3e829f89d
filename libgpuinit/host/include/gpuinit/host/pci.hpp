// The NVIDIA GPUs on the PCI bus, read from sysfs under the sysroot.
//
// libpci's sysfs method opens vendor, device and class by path for every
// function, and cannot start from a directory fd; on a server with 96
// functions that was two thirds of a gpu-mknod run. This reader opens one
// file (vendor) per function, relative to the devices directory, and class
// for the NVIDIA ones only.
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

struct PciFunction {
    std::string bdf;        // canonical "dddd:bb:dd.f" (the domain may have 5 digits)
    uint32_t pci_class = 0; // class, subclass, prog-if: 0x030200
};

// Base class display (0x03): VGA 0x0300, 3D 0x0302 and 0x0380 are GPUs;
// an NVIDIA board's audio (0x0403) and USB (0x0c03) functions are not.
constexpr bool is_gpu_class(uint32_t pci_class) {
    return (pci_class >> 16) == 0x03;
}

// The NVIDIA GPUs under <root>/sys/bus/pci/devices, sorted by address;
// with `only`, just that function (when it is an NVIDIA GPU). An entry that
// is not a PCI address, or a vendor or class file that is missing or
// malformed, is an error that names it.
Result<std::vector<PciFunction>> scan_nvidia_gpus(const Sysroot& root,
                                                  const std::optional<std::string>& only = {});

// "17:00.0" or "0000:17:00.0" (any case) -> "0000:17:00.0"; nullopt when the
// text is not a PCI address.
std::optional<std::string> normalize_bdf(std::string_view text);

} // namespace gpuinit
