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

// One NVIDIA_VISIBLE_DEVICES entry: a GPU UUID or an index.
struct ListedDevice {
    bool is_uuid = false;
    uint32_t index = 0;        // when !is_uuid
    char uuid[kUuidSize] = {}; // when is_uuid: "GPU-...", lower-cased
};

struct VisibleDevices {
    enum class Kind : uint8_t { All, None, List } kind = Kind::All; // unset means All
    int count = 0;
    ListedDevice entries[kMaxListedDevices];
};

struct Settings {
    bool enabled = false; // AMP_VGPU_ENABLE is exactly "1"
    MemoryRule rule = MemoryRule::None;
    uint64_t mem_per_device = 0;                          // bytes, GPU_MEM_PER_DEVICE
    uint64_t ratio_dev = 0;                               // ALIYUN_COM_GPU_MEM_DEV
    uint64_t ratio_container = 0;                         // ALIYUN_COM_GPU_MEM_CONTAINER
    uint64_t reserved_bytes = kDefaultReservedMiB * kMiB; // ALIYUN_COM_GPU_MEM_RESERVED (MiB)
    VisibleDevices visible;
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

// Whether a device the driver shows is one the settings cap (Kind::All: all;
// None: no device; List: its UUID is listed, or its index is, where index is
// its position among the visible devices in PCI bus order, the order
// nvidia-smi numbers them in). UUIDs compare case-insensitively.
bool device_listed(const VisibleDevices& visible, const char* uuid, uint32_t pci_order_index);

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
