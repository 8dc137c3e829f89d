// PCI enumeration through libpci's sysfs method, rooted in the sysroot.
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

struct PciFunction {
    std::string bdf; // canonical "dddd:bb:dd.f" (the domain may have 5 digits)
    uint16_t vendor = 0;
    uint16_t device = 0;
    uint16_t device_class = 0; // base class and subclass, e.g. 0x0302
};

// An NVIDIA function whose base class is display (0x03xx): VGA 0x0300, 3D
// 0x0302 and 0x0380 are GPUs; audio, USB and NVSwitch functions are not.
constexpr bool is_nvidia_gpu(const PciFunction& function) {
    return function.vendor == kNvidiaVendor && (function.device_class >> 8) == 0x03;
}

// Every function under <root>/sys/bus/pci/devices, sorted by address (the
// order a directory listing shows). A malformed entry is an error, not exit(1).
Result<std::vector<PciFunction>> scan_pci(const Sysroot& root);

// "17:00.0" or "0000:17:00.0" (any case) -> "0000:17:00.0"; nullopt when the
// text is not a PCI address.
std::optional<std::string> normalize_bdf(std::string_view text);

} // namespace gpuinit
