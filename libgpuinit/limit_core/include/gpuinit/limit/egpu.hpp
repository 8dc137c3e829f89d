// The eGPU environment interface (Aliyun's AMP_VGPU_ENABLE and friends, see
// gpulimit(7)): parsing every variable as hostile input, and the memory cap
// formulas, exact to the byte in 128-bit arithmetic.
//
// Freestanding (no heap, no exceptions): linked into libgpulimit.so.
#pragma once

#include "gpuinit/limit/problem.hpp"

#include <cstddef>
#include <cstdint>

namespace gpuinit::limit {

inline constexpr uint64_t kMiB = uint64_t{1} << 20; // "MB" in the eGPU variables
inline constexpr uint64_t kGiB = uint64_t{1} << 30; // "GB" in the eGPU variables
inline constexpr uint64_t kDefaultReservedMiB = 10;
inline constexpr int kMaxListedDevices = 64;
// GPU_UTIL_PER_DEVICE above this disables the compute cap (as in eGPU).
inline constexpr uint32_t kMaxComputePercent = 95;
inline constexpr size_t kUuidSize = 48;      // "GPU-" + 36 + NUL fits; longer is malformed
inline constexpr size_t kGroupNameSize = 65; // [A-Za-z0-9._-]{1,64}
inline constexpr size_t kPathSize = 4096;

// Looks one variable up; nullptr when unset. getenv in the library, a table
// in the tests.
using EnvLookup = const char* (*)(const char* name, void* context);

enum class MemoryRule : uint8_t {
    None,         // no memory variable: usage is counted, nothing is capped
    PerDevice,    // GPU_MEM_PER_DEVICE
    Ratio,        // ALIYUN_COM_GPU_MEM_DEV and ALIYUN_COM_GPU_MEM_CONTAINER
    ContainerGiB, // ALIYUN_COM_GPU_MEM_CONTAINER alone (DEV = total rounded up to GiB)
};

enum class OomPolicy : uint8_t {
    Return, // the allocation fails with CUDA_ERROR_OUT_OF_MEMORY (default)
    Kill,   // GPU_LIMIT_OOM_POLICY=kill: run the script, then end the process
};

// A PCI address as the driver names a GPU ("0000:3b:00.0" in
// /proc/driver/nvidia/gpus, "00000000:3B:00.0" from cuDeviceGetPCIBusId).
struct PciAddress {
    uint32_t domain = 0;
    uint32_t bus = 0;
    uint32_t device = 0;
    uint32_t function = 0;
};

// "[domain:]bus:device.function" in hex (domain up to 8 digits, bus and
// device 2, function 1), case-insensitive; the whole of text[0, length).
bool parse_pci_address(const char* text, size_t length, PciAddress& address);
bool same_pci_address(const PciAddress& a, const PciAddress& b);
// PCI bus order, the order nvidia-smi numbers GPUs in.
bool pci_address_before(const PciAddress& a, const PciAddress& b);

// "GPU-" (any case) and 8-4-4-4-12 hex digits, the whole of text[0,
// length): a GPU UUID as NVML prints it, the only form a device list takes.
bool is_gpu_uuid(const char* text, size_t length);

// One entry of a device list: an index (NVIDIA_VISIBLE_DEVICES only), a GPU
// UUID, or a PCI address (GPU_LIMIT_DEVICES only).
struct ListedDevice {
    enum class Kind : uint8_t { Index, Uuid, Pci } kind = Kind::Index;
    uint32_t index = 0;        // Kind::Index: the host's numbering (nvidia-smi's)
    char uuid[kUuidSize] = {}; // Kind::Uuid: "GPU-...", lower-cased
    PciAddress pci;            // Kind::Pci
};

struct VisibleDevices {
    // All: every GPU the process sees (unset, "all", and "void" or empty,
    // which NVIDIA's CDI specs and runtime write once they have injected the
    // devices themselves); None: "none".
    enum class Kind : uint8_t { All, None, List } kind = Kind::All;
    int count = 0;
    ListedDevice entries[kMaxListedDevices];
    bool has_index() const;
};

struct Settings {
    bool enabled = false; // AMP_VGPU_ENABLE is exactly "1"
    MemoryRule rule = MemoryRule::None;
    uint64_t mem_per_device = 0;                          // bytes, GPU_MEM_PER_DEVICE
    uint64_t ratio_dev = 0;                               // ALIYUN_COM_GPU_MEM_DEV
    uint64_t ratio_container = 0;                         // ALIYUN_COM_GPU_MEM_CONTAINER
    uint64_t reserved_bytes = kDefaultReservedMiB * kMiB; // ALIYUN_COM_GPU_MEM_RESERVED (MiB)
    VisibleDevices visible;                               // NVIDIA_VISIBLE_DEVICES
    // GPU_LIMIT_DEVICES, written by gpu-limit's OCI hook and runtime: the
    // GPUs the host gave the container, by UUID or PCI address, "all" or
    // "none". When set, it alone decides which GPUs are capped.
    bool host_devices_given = false;
    VisibleDevices host_devices;
    OomPolicy oom_policy = OomPolicy::Return;
    char oom_script[kPathSize] = {};        // ALIYUN_COM_GPU_OOM_SCRIPT, absolute path, or empty
    uint32_t oom_script_timeout_ms = 10000; // GPU_LIMIT_OOM_SCRIPT_TIMEOUT (seconds, 1..3600)
    char group[kGroupNameSize] = {};        // GPU_LIMIT_GROUP, default "default"
    char state_dir[kPathSize] = {}; // GPU_LIMIT_STATE_DIR (absolute), or empty: caller's default
    // GPU_UTIL_PER_DEVICE: the compute share in percent, 1..95; 0 when unset,
    // 0 or above 95 (no compute cap, as in eGPU).
    uint32_t compute_percent = 0;
    bool use_host_daemon = false; // AMP_USE_HOST_DAEMON is exactly "1"
};

// Reads every variable through `lookup`. With AMP_VGPU_ENABLE unset or not
// "1", returns true with enabled == false and reads nothing else. Any
// malformed value (not a decimal number, zero where a positive number is
// needed, overflow, conflicting variables, a relative script path, a bad
// group name or list entry) returns false with one line naming the variable,
// its value and the fix: the library then fails closed.
bool parse_settings(EnvLookup lookup, void* context, Settings& settings, Problem& problem);

// The cap of one device in bytes, given its physical total. PerDevice:
// GPU_MEM_PER_DEVICE - RESERVED. Ratio: total * CONTAINER / DEV - RESERVED.
// ContainerGiB: total * CONTAINER / ceil(total / GiB) - RESERVED. Products in
// 128 bits, division rounds down; the result never exceeds physical_total.
// MemoryRule::None gives physical_total. A share not above RESERVED is an
// error (the container could use nothing), as is a zero physical_total.
bool device_cap(const Settings& settings, uint64_t physical_total, uint64_t& cap, Problem& problem);

// The devices list that decides: GPU_LIMIT_DEVICES when the host gave one,
// else NVIDIA_VISIBLE_DEVICES.
const VisibleDevices& deciding_devices(const Settings& settings);

// One GPU as this process sees it through CUDA.
struct SeenDevice {
    const char* uuid = nullptr; // "GPU-...", or nullptr when unknown
    bool pci_known = false;
    PciAddress pci;
    int host_index = -1; // its index in the host's numbering, -1 unknown
};

// Whether the list caps the device (Kind::All: every device; None: none;
// List: its UUID, PCI address or host index is listed). UUIDs compare
// case-insensitively.
bool device_listed(const VisibleDevices& visible, const SeenDevice& device);

// Index entries name GPUs in the host's numbering (nvidia-smi's: PCI order
// of the driver's GPUs, /proc/driver/nvidia/gpus). A process matches them
// only when it sees every GPU the host lists: in a container given some
// GPUs, or under CUDA_VISIBLE_DEVICES, "1" may be the only GPU it sees.
// `host` is the driver's list (any order; `host_listed` false when it could
// not be read), `seen` the process's devices. Sets each seen device's
// host_index. Without index entries nothing is read and true is returned;
// otherwise a list that cannot be matched exactly fails with one line that
// says to list UUIDs.
bool match_host_indices(const VisibleDevices& visible, const PciAddress* host, int host_count,
                        bool host_listed, SeenDevice* seen, int seen_count, Problem& problem);

// The base directory of group state when GPU_LIMIT_STATE_DIR is unset:
// /run/gpu-limit for root, else $XDG_RUNTIME_DIR/gpu-limit when that is an
// absolute path, else /tmp/gpu-limit-<uid>. The group's files are in
// <base>/<group>/. False (with problem) when the result does not fit.
bool default_state_dir(uint32_t uid, const char* xdg_runtime_dir, char (&out)[kPathSize],
                       Problem& problem);

// Rounds bytes up to a multiple of granularity (a power of two or not; 0 or 1
// leaves it). Saturates instead of wrapping.
uint64_t round_up(uint64_t bytes, uint64_t granularity);

} // namespace gpuinit::limit
