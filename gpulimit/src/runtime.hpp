// The limiter's runtime inside a foreign process: one-time settings and
// device discovery, the group's shared state, and the per-device facts the
// hooks need (cap, granularity, group index).
//
// Nothing happens at load time: the first hooked call (cuInit, or any other
// once the switch is on) initializes. Every function here is safe to call
// from any thread, with or without a current context.
#pragma once

#include "allocations.hpp"
#include "cuda_abi.hpp"
#include "gpuinit/limit/compute.hpp"
#include "gpuinit/limit/egpu.hpp"
#include "gpuinit/limit/group_state.hpp"
#include "real.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpulimit {

// The real driver's functions (real.hpp): CUDA's and NVML's tables.
inline const RealCuda& real() {
    return real_cuda();
}

// NVML's "function not found".
inline constexpr nvmlReturn_t kNvmlFunctionNotFound = NVML_ERROR_FUNCTION_NOT_FOUND;

namespace limit = gpuinit::limit;

// One device the driver shows this process.
struct DeviceInfo {
    CUdevice handle = 0;
    int ordinal = 0;
    int group_index = -1; // in the group's state
    uint64_t cap = 0;     // bytes; 0 for a device NVIDIA_VISIBLE_DEVICES does not list
    uint64_t physical_total = 0;
    uint64_t granularity = 0; // cuMemGetAllocationGranularity (MINIMUM), 2 MiB fallback
    std::atomic<uint64_t> graph_counted{0}; // graph memory reserve charged so far
    char uuid[limit::kUuidSize] = {};       // "GPU-...", lower case
    // The compute cap (GPU_UTIL_PER_DEVICE, 0: none; 0 too for a device
    // NVIDIA_VISIBLE_DEVICES does not list) and the device's compute record
    // in the group's state, set with it.
    uint32_t compute_percent = 0;
    limit::ComputeRecord* compute = nullptr;

    // What this process may be told the device has: the cap, never above physical.
    uint64_t reported_total() const { return cap < physical_total ? cap : physical_total; }
    uint64_t round(uint64_t bytes) const { return limit::round_up(bytes, granularity); }
};

struct Runtime {
    limit::Settings settings;
    limit::GroupState state;
    int device_count = 0;
    DeviceInfo devices[limit::kMaxGroupDevices];
    AllocationTable table;
    // Serializes a pool allocation's admit-call-reconcile sequence against
    // other pool work of this process (reconciles included); order: pools
    // before the table's own lock.
    pthread_mutex_t pool_mutex = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_t graph_mutex = PTHREAD_MUTEX_INITIALIZER;
    std::atomic<uint64_t> last_pool_reconcile_ns{0};
    std::atomic<bool> oom_episode{false};
    // Whether some device has a compute cap: without one a launch costs one
    // load of this flag after enter(). Fixed once the runtime is ready.
    bool compute_capped = false;
    // The compute devices' records, for the launch fast path (all open: pass).
    int compute_count = 0;
    limit::ComputeRecord* compute_records[limit::kMaxGroupDevices] = {};
    // Context -> device, for launches on streams of other contexts than the
    // current one (filled on first use; never emptied: a context address
    // reused for a context on another device is not noticed).
    struct ContextDevice {
        std::atomic<CUcontext> context{nullptr};
        std::atomic<DeviceInfo*> device{nullptr};
    };
    static constexpr int kContextCache = 64;
    ContextDevice context_devices[kContextCache];

    DeviceInfo* by_handle(CUdevice handle);
    DeviceInfo* by_ordinal(int ordinal);
    DeviceInfo* by_uuid(const char* uuid);
    DeviceInfo* by_group_index(int group_index);
    // The current context's device; nullptr without a context (or one on a
    // device we do not know). Never creates or changes a context.
    DeviceInfo* current();
    // The device of a stream's context, leaving the caller's current
    // context as it was; falls back to the current context's device.
    DeviceInfo* of_stream(CUstream stream, bool per_thread);
    // The device a launch on `stream` runs on: the only device when there is
    // one, else the stream's context's (cached per context).
    DeviceInfo* launch_device(CUstream stream, bool per_thread);

    // Admission before a real allocation: charges `bytes` (already rounded)
    // or, over the cap, reconciles pools once and retries, then refuses:
    // notes the refusal, runs the OOM script / policy and returns false.
    // pools_locked: the caller holds pool_mutex.
    bool admit(DeviceInfo& device, uint64_t bytes, bool pools_locked = false);
    void release(DeviceInfo& device, uint64_t bytes);

    // Sets every known pool's charge to the driver's reserve figure.
    void reconcile_pools(bool pools_locked);
    // Same, at most every 250 ms (cheap when no pool is known).
    void reconcile_pools_throttled(bool pools_locked);
    // Sets each device's graph memory charge to the driver's reserve figure.
    void reconcile_graph_memory();
    // Before reporting: dead processes' charges back, pools and graph current.
    void refresh_for_report();
};

// The gate every hook passes. SUCCESS with runtime set: count. SUCCESS with
// runtime nullptr: pass straight through (limiter off, or a call made from
// inside our own initialization). Anything else: return it (fail closed).
// Initializes on first use, calling the real cuInit(0) when needed.
CUresult enter(Runtime*& runtime);

// cuInit's own path: initializes with the caller's flags, calling `init`
// (the cuInit the caller reached: libcuda's export, or the pointer
// cuGetProcAddress returned).
CUresult initialize_from_cuinit(hook::cuInit_fn init, unsigned int flags);

// The compute gate of a kernel or graph launch on `stream` (hooks_launch.cpp):
// returns at once when no device has a compute cap or every capped device's
// gate is open; else finds the launch's device and, unless the stream is
// capturing a graph (capture is never disturbed), waits at its gate.
void gate_launch(Runtime& runtime, CUstream stream, bool per_thread);

// The in-process compute driver (compute_driver.cpp): one thread per
// process, started on the first capped launch (never at load time) and again
// in a fork child. Cheap to call on every capped launch.
void ensure_compute_driver(Runtime& runtime);
// In a fork child (the thread did not survive fork): the next capped launch
// starts one.
void compute_driver_after_fork();

// What a hook returns for a refused allocation (never returns under the
// kill policy).
inline constexpr CUresult kRefused = CUDA_ERROR_OUT_OF_MEMORY;

// After a successful real allocation whose `bytes` were admitted: remembers
// it so that its free uncharges exactly that. When the table cannot grow the
// allocation is undone (undo() frees it) and the hook reports out of memory.
template <typename Undo>
CUresult remember(Runtime& runtime, const DeviceInfo& device, Kind kind, uint64_t handle,
                  uint64_t bytes, Undo&& undo) {
    Allocation replaced;
    if (!runtime.table.insert(kind, handle, Allocation{device.group_index, bytes}, replaced)) {
        undo();
        runtime.state.uncharge(device.group_index, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (replaced.bytes != 0) {
        runtime.state.uncharge(replaced.device, replaced.bytes);
    }
    return CUDA_SUCCESS;
}

// A free: the entry leaves the table before the real call (so that a new
// allocation at the same address cannot be mistaken for it) and comes back
// if the driver refuses the free. Unknown handles pass through uncounted.
template <typename RealFree>
CUresult forget(Runtime& runtime, Kind kind, uint64_t handle, RealFree&& real_free) {
    Allocation allocation;
    const bool known = runtime.table.take(kind, handle, allocation);
    const CUresult result = real_free();
    if (!known) {
        return result;
    }
    if (result == CUDA_SUCCESS) {
        if (allocation.bytes != 0) {
            runtime.state.uncharge(allocation.device, allocation.bytes);
        }
    } else {
        Allocation replaced;
        runtime.table.insert(kind, handle, allocation, replaced);
    }
    return result;
}

} // namespace gpulimit

// Calls the real function or answers "not found" when the driver lacks it.
#define GPULIMIT_CALL_REAL(name, ...)                                                              \
    (::gpulimit::real().name ? ::gpulimit::real().name(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND)
#define GPULIMIT_CALL_REAL_NVML(name, ...)                                                         \
    (::gpulimit::real_nvml().name ? ::gpulimit::real_nvml().name(__VA_ARGS__)                      \
                                  : ::gpulimit::kNvmlFunctionNotFound)
