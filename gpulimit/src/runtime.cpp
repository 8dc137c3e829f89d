#include "runtime.hpp"

#include "daemon_client.hpp"
#include "gpuinit/limit/daemon_protocol.hpp"
#include "oom.hpp"
#include "switch.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <new>
#include <pthread.h>
#include <strings.h>
#include <unistd.h>

namespace gpulimit {
namespace {

constexpr uint64_t kFallbackGranularity = uint64_t{2} << 20;
constexpr uint64_t kPoolReconcileIntervalNs = 250ULL * 1000 * 1000;

enum Phase : int { kUninitialized, kDisabled, kReady, kFailed };

// The runtime is built in place on first use: a global with a constructor
// would run code at load time, in every process the library is preloaded
// into, and a destructor at exit.
alignas(Runtime) unsigned char g_storage[sizeof(Runtime)];
Runtime* g_runtime = nullptr;
std::atomic<int> g_phase{kUninitialized};
pthread_mutex_t g_init_mutex = PTHREAD_MUTEX_INITIALIZER;
// Set while this thread runs the initialization: a hooked call made from
// inside the real cuInit (or from our own discovery) passes through instead
// of waiting for itself.
thread_local bool t_initializing = false;

uint64_t now_ns() {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    return static_cast<uint64_t>(now.tv_sec) * 1000000000ULL + static_cast<uint64_t>(now.tv_nsec);
}

const char* env_lookup(const char* name, void* /*context*/) {
    return secure_getenv(name);
}

void say_problem(const limit::Problem& problem) {
    char line[sizeof(problem.text) + 16];
    const int length = snprintf(line, sizeof(line), "gpulimit: %s\n", problem.text);
    if (length > 0) {
        (void)!write(STDERR_FILENO, line,
                     static_cast<size_t>(length) < sizeof(line) ? static_cast<size_t>(length)
                                                                : sizeof(line) - 1);
    }
}

// AMP_USE_HOST_DAEMON=1: tells the host daemon which slot this process owns,
// so that it measures and polices the process by its host pid. Without a
// daemon (or when it refuses) the process still runs, counted in-process;
// the reason goes to stderr once per process.
void register_with_host_daemon(const Runtime& runtime) {
    if (!runtime.settings.use_host_daemon) {
        return;
    }
    char reason[128] = {};
    // GPU_LIMIT_DAEMON_SOCKET: a daemon elsewhere than /run/gpu-limit (tests,
    // a second instance).
    const char* socket_path = daemon_socket_path(secure_getenv(kDaemonSocketVariable));
    if (!register_with_daemon_at(socket_path, runtime.settings.group, runtime.state.own_slot(),
                                 runtime.state.lock_fd(), reason, sizeof(reason))) {
        limit::Problem problem;
        limit::fail(problem, 0,
                    "AMP_USE_HOST_DAEMON=1, but the host daemon did not register this process "
                    "(%s); it is counted in-process only; start gpu-limit daemon on the host",
                    reason[0] != '\0' ? reason : "no answer");
        say_problem(problem);
    }
}

void format_uuid(const CUuuid& uuid, char (&out)[limit::kUuidSize]) {
    const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
    snprintf(out, sizeof(out),
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
}

void adjust_charge(limit::GroupState& state, int group_index, uint64_t& counted,
                   uint64_t reserved) {
    if (reserved > counted) {
        state.charge_forced(group_index, reserved - counted);
    } else if (reserved < counted) {
        state.uncharge(group_index, counted - reserved);
    }
    counted = reserved;
}

class Locked {
  public:
    explicit Locked(pthread_mutex_t& mutex) : mutex_(mutex) { pthread_mutex_lock(&mutex_); }
    ~Locked() { pthread_mutex_unlock(&mutex_); }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

  private:
    pthread_mutex_t& mutex_;
};

// A fork child shares the parent's open file description and so its slot
// lock: it takes a slot of its own with nothing charged. Its copies of the
// parent's allocations are not its own (CUDA does not survive fork).
void after_fork_in_child() {
    pthread_mutex_init(&g_init_mutex, nullptr);
    if (g_phase.load(std::memory_order_acquire) != kReady) {
        return;
    }
    Runtime& runtime = *g_runtime;
    runtime.table.reset_after_fork();
    pthread_mutex_init(&runtime.pool_mutex, nullptr);
    pthread_mutex_init(&runtime.graph_mutex, nullptr);
    for (int i = 0; i < runtime.device_count; ++i) {
        runtime.devices[i].graph_counted.store(0, std::memory_order_relaxed);
    }
    runtime.oom_episode.store(false, std::memory_order_relaxed);
    compute_driver_after_fork();
    limit::Problem problem;
    if (!runtime.state.reopen_after_fork(problem)) {
        say_problem(problem);
        g_phase.store(kFailed, std::memory_order_release);
        return;
    }
    register_with_host_daemon(runtime);
}

// Everything the driver tells us about one device, and its cap.
bool discover_device(Runtime& runtime, int ordinal, limit::Problem& problem) {
    const RealCuda& r = real();
    DeviceInfo& device = runtime.devices[ordinal];
    device.ordinal = ordinal;
    if (r.cuDeviceGet == nullptr || r.cuDeviceGet(&device.handle, ordinal) != CUDA_SUCCESS) {
        return limit::fail(problem, 0, "cuDeviceGet(%d) failed; the driver is not usable", ordinal);
    }
    CUuuid uuid{};
    const auto get_uuid =
        r.cuDeviceGetUuid_v2 != nullptr ? r.cuDeviceGetUuid_v2 : r.cuDeviceGetUuid;
    if (get_uuid == nullptr || get_uuid(&uuid, device.handle) != CUDA_SUCCESS) {
        return limit::fail(problem, 0,
                           "cannot read the UUID of CUDA device %d; devices are matched by UUID",
                           ordinal);
    }
    format_uuid(uuid, device.uuid);
    size_t total = 0;
    if (r.cuDeviceTotalMem_v2 == nullptr ||
        r.cuDeviceTotalMem_v2(&total, device.handle) != CUDA_SUCCESS) {
        return limit::fail(problem, 0, "cannot read the memory size of %s", device.uuid);
    }
    device.physical_total = total;
    size_t granularity = 0;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device.handle;
    if (r.cuMemGetAllocationGranularity == nullptr ||
        r.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
            CUDA_SUCCESS ||
        granularity == 0) {
        granularity = kFallbackGranularity;
    }
    device.granularity = granularity;
    return true;
}

// The host's GPUs as the driver lists them, /proc/driver/nvidia/gpus/<PCI
// address> (under $GPU_LIMIT_ROOT when set, for tests): what index entries
// of NVIDIA_VISIBLE_DEVICES count in. False when it cannot be listed.
bool read_host_gpus(limit::PciAddress (&host)[limit::kMaxListedDevices], int& count) {
    count = 0;
    char path[limit::kPathSize];
    const char* root = secure_getenv("GPU_LIMIT_ROOT");
    if (root == nullptr || root[0] != '/') {
        root = "";
    }
    const int length = snprintf(path, sizeof(path), "%s/proc/driver/nvidia/gpus", root);
    if (length < 0 || static_cast<size_t>(length) >= sizeof(path)) {
        return false;
    }
    DIR* dir = opendir(path);
    if (dir == nullptr) {
        return false;
    }
    bool complete = true;
    while (const dirent* entry = readdir(dir)) {
        limit::PciAddress address;
        if (!limit::parse_pci_address(entry->d_name, strlen(entry->d_name), address)) {
            continue; // ".", ".."
        }
        if (count == limit::kMaxListedDevices) {
            complete = false;
            break;
        }
        host[count++] = address;
    }
    closedir(dir);
    return complete;
}

bool set_up(Runtime& runtime, limit::Problem& problem) {
    const RealCuda& r = real();
    int count = 0;
    if (r.cuDeviceGetCount == nullptr || r.cuDeviceGetCount(&count) != CUDA_SUCCESS) {
        return limit::fail(problem, 0, "cuDeviceGetCount failed after cuInit");
    }
    if (count > limit::kMaxGroupDevices) {
        return limit::fail(problem, 0,
                           "%d CUDA devices are visible, the limiter handles at most %d; narrow "
                           "CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES",
                           count, limit::kMaxGroupDevices);
    }
    runtime.device_count = count;
    limit::SeenDevice seen[limit::kMaxGroupDevices];
    for (int ordinal = 0; ordinal < count; ++ordinal) {
        if (!discover_device(runtime, ordinal, problem)) {
            return false;
        }
        seen[ordinal].uuid = runtime.devices[ordinal].uuid;
        char bus_id[32] = {};
        // Without a bus id, UUID entries still match; index and PCI entries do not.
        seen[ordinal].pci_known =
            r.cuDeviceGetPCIBusId != nullptr &&
            r.cuDeviceGetPCIBusId(bus_id, sizeof(bus_id), runtime.devices[ordinal].handle) ==
                CUDA_SUCCESS &&
            limit::parse_pci_address(bus_id, strnlen(bus_id, sizeof(bus_id)), seen[ordinal].pci);
    }
    const limit::VisibleDevices& listed = limit::deciding_devices(runtime.settings);
    if (listed.has_index()) {
        limit::PciAddress host[limit::kMaxListedDevices];
        int host_count = 0;
        const bool host_listed = read_host_gpus(host, host_count);
        if (!limit::match_host_indices(listed, host, host_count, host_listed, seen, count,
                                       problem)) {
            return false;
        }
    }
    int capped = 0;
    for (int ordinal = 0; ordinal < count; ++ordinal) {
        DeviceInfo& device = runtime.devices[ordinal];
        if (limit::device_listed(listed, seen[ordinal])) {
            ++capped;
            if (!limit::device_cap(runtime.settings, device.physical_total, device.cap, problem)) {
                return false;
            }
            device.compute_percent = runtime.settings.compute_percent;
        } else {
            device.cap = 0;
            device.compute_percent = 0;
        }
    }
    if (capped == 0 && count > 0 && listed.kind == limit::VisibleDevices::Kind::List) {
        // Not an error (a list may name GPUs of another container), but
        // every allocation will be refused: say why once.
        limit::Problem notice;
        limit::fail(notice, 0,
                    "%s lists none of the %d GPUs this process sees (%s), so every allocation "
                    "is refused; list their UUIDs",
                    runtime.settings.host_devices_given ? "GPU_LIMIT_DEVICES"
                                                        : "NVIDIA_VISIBLE_DEVICES",
                    count, runtime.devices[0].uuid);
        say_problem(notice);
    }

    char state_dir[limit::kPathSize];
    if (runtime.settings.state_dir[0] != '\0') {
        snprintf(state_dir, sizeof(state_dir), "%s", runtime.settings.state_dir);
    } else if (!limit::default_state_dir(static_cast<uint32_t>(getuid()),
                                         secure_getenv("XDG_RUNTIME_DIR"), state_dir, problem)) {
        return false;
    }
    if (!runtime.state.open(state_dir, runtime.settings.group, problem) ||
        !runtime.state.register_process(problem)) {
        return false;
    }
    register_with_host_daemon(runtime);
    for (int ordinal = 0; ordinal < count; ++ordinal) {
        DeviceInfo& device = runtime.devices[ordinal];
        device.group_index = runtime.state.attach_device(
            device.uuid, device.cap, device.physical_total, device.compute_percent, problem);
        if (device.group_index < 0) {
            return false;
        }
        if (device.compute_percent != 0) {
            device.compute = runtime.state.compute(device.group_index);
            if (device.compute != nullptr) {
                runtime.compute_records[runtime.compute_count++] = device.compute;
                runtime.compute_capped = true;
            }
        }
    }
    return true;
}

// Runs once to a final phase (or leaves kUninitialized when the real cuInit
// fails, so that a later cuInit can try again). Returns the real cuInit's
// (`init`'s) result when it was called, else CUDA_SUCCESS.
CUresult initialize(hook::cuInit_fn init, unsigned int flags) {
    Locked lock(g_init_mutex);
    const int phase = g_phase.load(std::memory_order_acquire);
    if (phase != kUninitialized) {
        return CUDA_SUCCESS;
    }
    t_initializing = true;
    struct Done {
        ~Done() { t_initializing = false; }
    } done;

    if (g_runtime == nullptr) {
        g_runtime = new (g_storage) Runtime();
    }
    Runtime& runtime = *g_runtime;
    limit::Problem problem;
    if (!limit::parse_settings(env_lookup, nullptr, runtime.settings, problem)) {
        say_problem(problem);
        g_phase.store(kFailed, std::memory_order_release);
        return CUDA_ERROR_NOT_PERMITTED;
    }
    if (!limiter_enabled() || !runtime.settings.enabled) {
        g_phase.store(kDisabled, std::memory_order_release);
        return CUDA_SUCCESS;
    }
    const CUresult initialized = init != nullptr ? init(flags) : CUDA_ERROR_NOT_FOUND;
    if (initialized != CUDA_SUCCESS) {
        return initialized;
    }
    if (!set_up(runtime, problem)) {
        say_problem(problem);
        runtime.state.close();
        g_phase.store(kFailed, std::memory_order_release);
        return CUDA_ERROR_NOT_PERMITTED;
    }
    static bool fork_handler_registered = false;
    if (!fork_handler_registered) {
        fork_handler_registered = pthread_atfork(nullptr, nullptr, after_fork_in_child) == 0;
    }
    g_phase.store(kReady, std::memory_order_release);
    return CUDA_SUCCESS;
}

} // namespace

CUresult enter(Runtime*& runtime) {
    runtime = nullptr;
    if (!limiter_enabled()) {
        return CUDA_SUCCESS;
    }
    switch (g_phase.load(std::memory_order_acquire)) {
    case kReady:
        runtime = g_runtime;
        return CUDA_SUCCESS;
    case kDisabled:
        return CUDA_SUCCESS;
    case kFailed:
        return CUDA_ERROR_NOT_PERMITTED;
    default:
        break;
    }
    if (t_initializing) {
        return CUDA_SUCCESS;
    }
    const CUresult result = initialize(real().cuInit, 0);
    switch (g_phase.load(std::memory_order_acquire)) {
    case kReady:
        runtime = g_runtime;
        return CUDA_SUCCESS;
    case kFailed:
        return CUDA_ERROR_NOT_PERMITTED;
    default:
        // Disabled, or the real cuInit failed: the real call answers for itself.
        (void)result;
        return CUDA_SUCCESS;
    }
}

CUresult initialize_from_cuinit(hook::cuInit_fn init, unsigned int flags) {
    switch (g_phase.load(std::memory_order_acquire)) {
    case kFailed:
        return CUDA_ERROR_NOT_PERMITTED;
    case kUninitialized:
        if (!t_initializing) {
            const CUresult result = initialize(init, flags);
            const int phase = g_phase.load(std::memory_order_acquire);
            if (phase == kFailed) {
                return CUDA_ERROR_NOT_PERMITTED;
            }
            if (phase == kReady || result != CUDA_SUCCESS) {
                return result;
            }
        }
        break;
    default:
        break;
    }
    // Disabled, already initialized, or called from inside our own
    // initialization: the real cuInit is idempotent.
    return init != nullptr ? init(flags) : CUDA_ERROR_NOT_FOUND;
}

DeviceInfo* Runtime::by_handle(CUdevice handle) {
    for (int i = 0; i < device_count; ++i) {
        if (devices[i].handle == handle) {
            return &devices[i];
        }
    }
    return nullptr;
}

DeviceInfo* Runtime::by_ordinal(int ordinal) {
    return ordinal >= 0 && ordinal < device_count ? &devices[ordinal] : nullptr;
}

DeviceInfo* Runtime::by_uuid(const char* uuid) {
    for (int i = 0; i < device_count; ++i) {
        if (strcasecmp(devices[i].uuid, uuid) == 0) {
            return &devices[i];
        }
    }
    return nullptr;
}

DeviceInfo* Runtime::by_group_index(int group_index) {
    for (int i = 0; i < device_count; ++i) {
        if (devices[i].group_index == group_index) {
            return &devices[i];
        }
    }
    return nullptr;
}

DeviceInfo* Runtime::current() {
    CUdevice handle = 0;
    if (real().cuCtxGetDevice == nullptr || real().cuCtxGetDevice(&handle) != CUDA_SUCCESS) {
        return nullptr;
    }
    return by_handle(handle);
}

DeviceInfo* Runtime::of_stream(CUstream stream, bool per_thread) {
    const RealCuda& r = real();
    const auto get_ctx =
        per_thread && r.cuStreamGetCtx_ptsz != nullptr ? r.cuStreamGetCtx_ptsz : r.cuStreamGetCtx;
    CUcontext context = nullptr;
    if (get_ctx == nullptr || get_ctx(stream, &context) != CUDA_SUCCESS || context == nullptr ||
        r.cuCtxPushCurrent_v2 == nullptr || r.cuCtxPopCurrent_v2 == nullptr) {
        return current();
    }
    if (r.cuCtxPushCurrent_v2(context) != CUDA_SUCCESS) {
        return current();
    }
    DeviceInfo* device = current();
    CUcontext popped = nullptr;
    r.cuCtxPopCurrent_v2(&popped);
    return device;
}

DeviceInfo* Runtime::launch_device(CUstream stream, bool per_thread) {
    if (device_count == 1) {
        return &devices[0];
    }
    const RealCuda& r = real();
    const auto get_ctx =
        per_thread && r.cuStreamGetCtx_ptsz != nullptr ? r.cuStreamGetCtx_ptsz : r.cuStreamGetCtx;
    CUcontext context = nullptr;
    if (get_ctx == nullptr || get_ctx(stream, &context) != CUDA_SUCCESS || context == nullptr) {
        return current();
    }
    for (ContextDevice& entry : context_devices) {
        const CUcontext known = entry.context.load(std::memory_order_acquire);
        if (known == nullptr) {
            break; // filled in order
        }
        if (known == context) {
            DeviceInfo* device = entry.device.load(std::memory_order_acquire);
            if (device != nullptr) {
                return device;
            }
        }
    }
    DeviceInfo* device = of_stream(stream, per_thread);
    if (device == nullptr) {
        return nullptr;
    }
    for (ContextDevice& entry : context_devices) {
        CUcontext expected = nullptr;
        if (entry.context.compare_exchange_strong(expected, context, std::memory_order_acq_rel)) {
            entry.device.store(device, std::memory_order_release);
            break;
        }
        if (expected == context) {
            break; // another thread adds it
        }
    }
    return device;
}

bool Runtime::admit(DeviceInfo& device, uint64_t bytes, bool pools_locked) {
    reconcile_pools_throttled(pools_locked);
    if (state.charge(device.group_index, bytes) == limit::Admission::Admitted) {
        if (oom_episode.load(std::memory_order_relaxed)) {
            oom_episode.store(false, std::memory_order_relaxed);
        }
        return true;
    }
    // A pool may have given memory back at a synchronization point we did
    // not see: count that before refusing.
    if (table.count(Kind::Pool) > 0) {
        reconcile_pools(pools_locked);
        if (state.charge(device.group_index, bytes) == limit::Admission::Admitted) {
            oom_episode.store(false, std::memory_order_relaxed);
            return true;
        }
    }
    state.note_refusal(device.group_index);
    if (pools_locked) {
        // The OOM script may take seconds: do not hold up the process's pools.
        pthread_mutex_unlock(&pool_mutex);
        handle_refusal(*this, device, bytes);
        pthread_mutex_lock(&pool_mutex);
    } else {
        handle_refusal(*this, device, bytes);
    }
    return false;
}

void Runtime::release(DeviceInfo& device, uint64_t bytes) {
    if (bytes != 0) {
        state.uncharge(device.group_index, bytes);
    }
}

void Runtime::reconcile_pools(bool pools_locked) {
    if (table.count(Kind::Pool) == 0 || real().cuMemPoolGetAttribute == nullptr) {
        return;
    }
    if (!pools_locked) {
        pthread_mutex_lock(&pool_mutex);
    }
    table.for_each(Kind::Pool, [this](uint64_t handle, Allocation& pool) {
        cuuint64_t reserved = 0;
        // The table keys every kind by a 64-bit number; this one was a pool handle.
        // NOLINTNEXTLINE(performance-no-int-to-ptr)
        if (real().cuMemPoolGetAttribute(reinterpret_cast<CUmemoryPool>(handle),
                                         CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                                         &reserved) == CUDA_SUCCESS) {
            adjust_charge(state, pool.device, pool.bytes, reserved);
        }
    });
    if (!pools_locked) {
        pthread_mutex_unlock(&pool_mutex);
    }
    last_pool_reconcile_ns.store(now_ns(), std::memory_order_relaxed);
}

void Runtime::reconcile_pools_throttled(bool pools_locked) {
    if (table.count(Kind::Pool) == 0) {
        return;
    }
    const uint64_t now = now_ns();
    if (now - last_pool_reconcile_ns.load(std::memory_order_relaxed) >= kPoolReconcileIntervalNs) {
        reconcile_pools(pools_locked);
    }
}

void Runtime::reconcile_graph_memory() {
    const auto query = real().cuDeviceGetGraphMemAttribute;
    if (query == nullptr) {
        return;
    }
    Locked lock(graph_mutex);
    for (int i = 0; i < device_count; ++i) {
        DeviceInfo& device = devices[i];
        cuuint64_t reserved = 0;
        if (query(device.handle, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) !=
            CUDA_SUCCESS) {
            continue;
        }
        uint64_t counted = device.graph_counted.load(std::memory_order_relaxed);
        adjust_charge(state, device.group_index, counted, reserved);
        device.graph_counted.store(counted, std::memory_order_relaxed);
    }
}

void Runtime::refresh_for_report() {
    state.reclaim_dead();
    reconcile_pools(false);
    reconcile_graph_memory();
}

} // namespace gpulimit
