// What the machine has: the driver's device numbers from /proc/devices, its
// GPUs from /proc/driver/nvidia/gpus, and the NVIDIA GPUs on the PCI bus.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/gpu_selector.hpp"
#include "gpuinit/host/mig_topology.hpp"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpuinit {

inline constexpr unsigned kClassicNvidiaMajor = 195;
inline constexpr unsigned kControlMinor = 255;
inline constexpr unsigned kModesetMinor = 254;
inline constexpr std::string_view kDriverGpusPath = "proc/driver/nvidia/gpus";

struct Gpu {
    std::string bdf; // canonical
    unsigned minor = 0;
    std::string uuid;
    std::string model;

    GpuIdentity identity() const { return {minor, bdf, uuid}; }
    // "GPU 0 (0000:17:00.0)", for messages.
    std::string subject() const;
};

// An NVIDIA GPU that gets no node: not bound to the driver (vfio-pci,
// excluded), or one whose driver entry is broken (an error then).
struct UnusableGpu {
    std::string bdf;
    std::string reason;
    Severity severity = Severity::Warning;
};

struct Machine {
    // Major of "nvidia" (or an older driver's "nvidia-frontend"); absent:
    // the driver is not loaded.
    std::optional<unsigned> nvidia_major;
    std::optional<unsigned> uvm_major;
    std::optional<unsigned> caps_major; // nvidia-caps, for MIG
    bool modeset_loaded = false;
    // False when /proc/driver/nvidia/gpus was absent and minors were
    // guessed from PCI order.
    bool minors_from_driver = true;
    std::vector<Gpu> gpus; // sorted by minor
    std::vector<UnusableGpu> unusable;
    // pci.ids names ("GH100 [H100 PCIe]") by canonical address, of the GPUs
    // and unusable GPUs that have one; filled only when asked
    // (PciNeed::names).
    std::map<std::string, std::string> pci_names;
    // The pci.ids name of `bdf`, "" without one.
    const std::string& pci_name(const std::string& bdf) const;
    // MIG capabilities; read only by the callers that need them
    // (read_mig_topology), empty otherwise.
    MigTopology mig;
};

// Which PCI functions discovery must read: the driver's own list comes
// first, and the bus is walked only to find GPUs the driver does not list.
struct PciNeed {
    enum class Scope { All, One, None };
    Scope scope = Scope::All;
    std::string bdf; // with One: canonical
    // Names from pci.ids for every GPU found (pci_device_names): for reports
    // only, since parsing pci.ids costs milliseconds.
    bool names = false;
};

// The driver's own view only, /proc/driver/nvidia/gpus: the GPUs it lists
// (sorted by minor), and as unusable the excluded ones, broken entries, a
// minor listed twice and GPUs that share a UUID. nvidia_major stays empty;
// minors_from_driver is false when the directory is absent (the driver is
// not loaded). Fails when it exists but cannot be listed.
Result<Machine> read_driver_gpus(const Sysroot& root, Diagnostics& diagnostics);

// Fails (nothing can be done) when /proc/devices is malformed or names an
// impossible major, when /proc/driver/nvidia/gpus exists but cannot be
// listed, and when the minors must come from PCI order but PCI cannot be
// read. A missing /proc/devices or driver leaves nvidia_major empty. Other
// problems go to `diagnostics`.
Result<Machine> discover_machine(const Sysroot& root, Diagnostics& diagnostics,
                                 const PciNeed& pci = {});

} // namespace gpuinit
