// What the machine has: the driver's device numbers from /proc/devices, its
// GPUs from /proc/driver/nvidia/gpus, and the NVIDIA functions libpci sees.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuinit {

inline constexpr unsigned kClassicNvidiaMajor = 195;
inline constexpr unsigned kControlMinor = 255;
inline constexpr unsigned kModesetMinor = 254;

struct Gpu {
    std::string bdf; // canonical
    unsigned minor = 0;
    std::string uuid;
    std::string model;
};

// An NVIDIA GPU that PCI shows but that has no usable minor: not bound to the
// driver (vfio-pci, excluded) or with an unreadable information file.
struct UnusableGpu {
    std::string bdf;
    std::string reason;
    bool is_error = false; // true when the driver's own view is broken
};

struct Machine {
    // Major of "nvidia" (or legacy "nvidia-frontend"); absent: driver not loaded.
    std::optional<unsigned> nvidia_major;
    bool legacy_frontend = false;
    std::optional<unsigned> uvm_major;
    bool modeset_loaded = false;
    // False when /proc/driver/nvidia/gpus was absent and minors were
    // guessed from PCI order.
    bool minors_from_driver = true;
    std::vector<Gpu> gpus; // sorted by minor
    std::vector<UnusableGpu> unusable;
    std::vector<std::string> warnings;
    // Broken machine state that costs some GPU its check but not the run
    // (a malformed PCI entry): reported as errors, exit 2.
    std::vector<std::string> errors;
};

// Fails when /proc/devices is present but malformed, when
// /proc/driver/nvidia/gpus exists but cannot be listed, and when the minors
// must come from PCI order but PCI cannot be read. A missing /proc/devices or
// driver leaves nvidia_major empty.
Result<Machine> discover_machine(const Sysroot& root);

} // namespace gpuinit
