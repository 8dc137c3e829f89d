// The stand-in libcuda.so.1 (tests only): simulated GPUs that the real
// CUDA runtime (Debian's libcudart 11.8) and libgpulimit run on, with no GPU.
//
// What it simulates: devices from GPULIMIT_STANDIN_DEVICES (see
// standin_devices.hpp); per-thread current contexts over primary and created
// contexts; process-local device memory where every allocation rounds up to
// 2 MiB, pools that keep freed memory reserved until a synchronization, VMM
// handles that need no context, arrays sized like
// cuArrayGetMemoryRequirements says, and a graph memory reserve a test sets;
// what each process holds per device is published for the stand-in NVML's
// process list (standin_memory.hpp, with GPULIMIT_STANDIN_DIR).
// Kernels are no-ops unless a test gives them a duration: then they run on
// per-stream worker threads, time-slice devices shared between processes and
// are captured into graphs (standin_compute.hpp, standin_control.h).
//
// cuGetProcAddress / _v2 follow the driver's rules (see kProcs below), with
// GPULIMIT_STANDIN_INTERNAL_PROCS=1 answering internal pointers, and
// cuGetExportTable answers the five private tables that cudart 11.8 cannot
// start without (see "Private export tables" below).
//
// Every exported function is counted under its ABI name (standin_control.h);
// the library is linked with -Bsymbolic so that the addresses cuGetProcAddress
// hands out are this library's own, equal to what dlsym on it returns, even
// when libgpulimit.so (which exports the same names) is preloaded.
#include "cuda_abi.hpp"
#include "standin_compute.hpp"
#include "standin_control.h"
#include "standin_devices.hpp"
#include "standin_memory.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <mutex>
#include <pthread.h>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

#define STANDIN_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" {
// Driver types beyond what libgpulimit needs (cuda_abi.hpp).
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUevent = struct CUevent_st*;
using CUhostFn = void (*)(void* userData);
using CUstreamCallback = void (*)(CUstream hStream, CUresult status, void* userData);
using CUmemAccessDesc = struct {
    CUmemLocation location;
    int flags;
};
}

namespace {

constexpr CUresult kInvalidHandle = 400; // CUDA_ERROR_INVALID_HANDLE
constexpr uint64_t kGranularity = 2ULL << 20;
constexpr uint64_t kPitchAlignment = 512;
constexpr uintptr_t kStreamLegacy = 0x1;
constexpr uintptr_t kStreamPerThread = 0x2;

uint64_t round_up(uint64_t bytes, uint64_t unit) {
    return bytes == 0 ? 0 : ((bytes - 1) / unit + 1) * unit;
}

// ---- Call counting and fault injection (standin_control.h) -----------------

struct CallSite {
    explicit CallSite(const char* abi_name);
    const char* name;
    std::atomic<unsigned long long> count{0};
    CallSite* next = nullptr;
};
std::atomic<CallSite*> g_sites{nullptr};
std::atomic<const char*> g_last_call{""};
std::atomic<int> g_armed_faults{0};
std::mutex g_fault_mutex;
std::map<std::string, CUresult> g_faults;

CallSite::CallSite(const char* abi_name) : name(abi_name) {
    CallSite* head = g_sites.load();
    do {
        next = head;
    } while (!g_sites.compare_exchange_weak(head, this));
}

bool trace_enabled() {
    static const bool enabled = [] {
        const char* v = std::getenv("GPULIMIT_STANDIN_TRACE");
        return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
    }();
    return enabled;
}

void trace(const char* format, ...) __attribute__((format(printf, 1, 2)));
void trace(const char* format, ...) {
    if (!trace_enabled()) {
        return;
    }
    char line[512];
    va_list args;
    va_start(args, format);
    std::vsnprintf(line, sizeof line, format, args);
    va_end(args);
    std::fprintf(stderr, "standin: %s\n", line);
}

int reported_driver_version() {
    const char* env = std::getenv("GPULIMIT_STANDIN_DRIVER_VERSION");
    return env != nullptr && *env != '\0' ? std::atoi(env) : 13000;
}

// Returns the injected result, or -1 to go on.
CUresult enter(CallSite& site) {
    site.count.fetch_add(1, std::memory_order_relaxed);
    g_last_call.store(site.name, std::memory_order_relaxed);
    trace("%s", site.name);
    if (g_armed_faults.load(std::memory_order_acquire) == 0) {
        return -1;
    }
    std::lock_guard lock(g_fault_mutex);
    auto it = g_faults.find(site.name);
    if (it == g_faults.end()) {
        return -1;
    }
    const CUresult result = it->second;
    g_faults.erase(it);
    g_armed_faults.fetch_sub(1, std::memory_order_release);
    trace("%s: injected result %d", site.name, result);
    return result;
}

// ---- Simulated machine --------------------------------------------------------

struct Pool;

struct Context {
    int device = 0;
    bool primary = false;
    unsigned flags = 0;
    std::map<int, size_t> limits;
    // cudart's per-context state (CONTEXT_LOCAL_STORAGE export table), by
    // cudart's manager key.
    std::map<void*, void*> local_storage;
};

struct Pool {
    int device = 0;
    bool is_default = false;
    bool destroyed = false; // destroy called; freed when its last allocation is
    uint64_t reserved = 0, reserved_high = 0;
    uint64_t used = 0, used_high = 0;
    uint64_t release_threshold = 0;
    int reuse[4] = {0, 1, 1, 1}; // CU_MEMPOOL_ATTR_REUSE_* (1..3)
};

enum class AllocKind { linear, managed, pool, v1 };

struct Allocation {
    int device = 0;
    uint64_t requested = 0;
    uint64_t charged = 0; // device bytes, or pool bytes for AllocKind::pool
    AllocKind kind = AllocKind::linear;
    Pool* pool = nullptr;
};

// Kernel durations of a graph, in launch order (captured launches).
struct Graph {
    std::vector<uint64_t> kernels;
};

struct GraphExec {
    standin::compute::Kernels kernels;
};

struct Stream {
    Context* ctx = nullptr;
    unsigned flags = 0;
    int priority = 0;
    standin::compute::WorkerPtr worker; // created at the first kernel
    Graph* capture = nullptr;           // while capturing: where launches go
    cuuint64_t capture_id = 0;
};

struct Event {
    Context* ctx = nullptr;
    unsigned flags = 0;
    standin::compute::WorkerPtr recorded; // the stream's worker at the last record
};

struct Array {
    int device = 0;
    uint64_t bytes = 0;   // unrounded
    uint64_t charged = 0; // counted on the device (0 for a mipmap level)
    CUDA_ARRAY3D_DESCRIPTOR desc{};
    bool is_level = false;
};

struct Mipmap {
    int device = 0;
    uint64_t bytes = 0;
    uint64_t charged = 0;
    CUDA_ARRAY3D_DESCRIPTOR desc{};
    unsigned levels = 0;
    std::vector<Array*> level_arrays;
};

struct VmmHandle {
    int device = -1; // -1: a host location, not counted
    uint64_t size = 0;
    CUmemAllocationProp prop{};
};

struct DeviceState {
    standin::Device info;
    uint64_t used = 0;
    uint64_t graph_reserved = 0, graph_reserved_high = 0, graph_used_high = 0;
    Context primary;
    int primary_refs = 0;
    unsigned primary_flags = 0;
    Pool* default_pool = nullptr;
    Pool* current_pool = nullptr;
};

struct Machine {
    std::vector<DeviceState> devices;
    std::map<CUdeviceptr, Allocation> allocations;
    std::set<Context*> contexts; // created ones; primaries live in DeviceState
    std::set<Pool*> pools;
    std::set<Stream*> streams;
    std::set<Event*> events;
    std::set<Array*> arrays;
    std::set<Mipmap*> mipmaps;
    std::map<CUmemGenericAllocationHandle, VmmHandle> vmm;
    std::set<void*> graphs, graph_execs, modules;    // Graph*, GraphExec*, char*
    std::vector<standin::compute::WorkerPtr> legacy; // legacy default stream, per device
    cuuint64_t next_capture_id = 1;
    CUdeviceptr next_va = 0x7f0000000000ULL;
    CUdeviceptr next_va_v1 = 0x10000000ULL;
    CUmemGenericAllocationHandle next_vmm = 1;
};

std::mutex g_mutex;
std::atomic<bool> g_initialized{false};

Machine& machine() {
    static Machine* m = [] {
        auto* created = new Machine;
        for (auto& d : standin::load_devices("standin libcuda")) {
            DeviceState state;
            state.info = d;
            created->devices.push_back(state);
        }
        for (size_t i = 0; i < created->devices.size(); ++i) {
            DeviceState& d = created->devices[i];
            d.primary.device = static_cast<int>(i);
            d.primary.primary = true;
            d.default_pool = new Pool;
            d.default_pool->device = static_cast<int>(i);
            d.default_pool->is_default = true;
            d.current_pool = d.default_pool;
            created->pools.insert(d.default_pool);
        }
        created->legacy.resize(created->devices.size());
        return created;
    }();
    return *m;
}

thread_local std::vector<Context*> t_ctx_stack;
thread_local int t_capture_mode = 0;

bool valid_device(int dev) {
    return dev >= 0 && static_cast<size_t>(dev) < machine().devices.size();
}

bool valid_context(Context* ctx) {
    if (ctx == nullptr) {
        return false;
    }
    Machine& m = machine();
    if (m.contexts.count(ctx) != 0) {
        return true;
    }
    return std::any_of(m.devices.begin(), m.devices.end(),
                       [&](const DeviceState& d) { return &d.primary == ctx; });
}

Context* current_context() {
    return t_ctx_stack.empty() ? nullptr : t_ctx_stack.back();
}

// The context a stream belongs to; null for an unknown stream or, for the
// default streams, when the thread has no current context.
Context* stream_context(CUstream stream, CUresult* error) {
    const auto raw = reinterpret_cast<uintptr_t>(stream);
    if (raw == 0 || raw == kStreamLegacy || raw == kStreamPerThread) {
        Context* ctx = current_context();
        *error = ctx == nullptr ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS;
        return ctx;
    }
    auto* s = reinterpret_cast<Stream*>(stream);
    if (machine().streams.count(s) == 0) {
        *error = kInvalidHandle;
        return nullptr;
    }
    *error = CUDA_SUCCESS;
    return s->ctx;
}

// What this process holds on each device, in the table the stand-in NVML
// lists processes from (standin_memory.hpp; shared only with
// GPULIMIT_STANDIN_DIR). Called under g_mutex after `used` changes.
void publish_used() {
    namespace mem = standin::memory;
    static const mem::Table table = mem::open_table("standin libcuda");
    static pid_t owner = 0;
    static int fd = -1;
    static uint32_t slot = mem::kSlots;
    if (table.file == nullptr) {
        return;
    }
    const pid_t self = getpid();
    if (owner != self) {
        // First use, or a forked child: a description and a slot of its own
        // (the inherited description is the parent's lock).
        if (fd >= 0) {
            close(fd);
        }
        fd = open(table.path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        slot = fd >= 0 ? mem::take_slot(fd, *table.file, static_cast<uint32_t>(self)) : mem::kSlots;
        owner = self;
    }
    if (slot >= mem::kSlots) {
        return;
    }
    const auto& devices = machine().devices;
    for (size_t i = 0; i < devices.size() && i < mem::kMaxDevices; ++i) {
        table.file->slots[slot].used[i].store(devices[i].used, std::memory_order_relaxed);
    }
}

CUresult charge(int dev, uint64_t bytes) {
    DeviceState& d = machine().devices[static_cast<size_t>(dev)];
    if (bytes > d.info.total - d.used) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d.used += bytes;
    publish_used();
    return CUDA_SUCCESS;
}

void uncharge(int dev, uint64_t bytes) {
    DeviceState& d = machine().devices[static_cast<size_t>(dev)];
    d.used -= std::min(bytes, d.used);
    publish_used();
}

CUdeviceptr take_va(uint64_t bytes, uint64_t alignment) {
    Machine& m = machine();
    const CUdeviceptr va = round_up(m.next_va, alignment);
    m.next_va = va + std::max<uint64_t>(bytes, alignment);
    return va;
}

// Keeps what is in use and, of the rest, at most `keep` (in whole chunks).
void pool_shrink(Pool* pool, uint64_t keep) {
    uint64_t target = std::max(round_up(pool->used, kGranularity),
                               std::min(pool->reserved, round_up(keep, kGranularity)));
    if (keep >= pool->reserved) {
        target = pool->reserved;
    }
    if (target < pool->reserved) {
        uncharge(pool->device, pool->reserved - target);
        trace("pool %p on device %d gives back %llu bytes", static_cast<void*>(pool), pool->device,
              static_cast<unsigned long long>(pool->reserved - target));
        pool->reserved = target;
    }
}

void pool_release_if_destroyed(Pool* pool) {
    if (pool->destroyed && pool->used == 0) {
        uncharge(pool->device, pool->reserved);
        machine().pools.erase(pool);
        delete pool;
    }
}

// What a synchronization does on a real driver: pools give back what they
// hold above their release threshold.
void synchronize_pools() {
    for (Pool* pool : machine().pools) {
        pool_shrink(pool, pool->release_threshold);
    }
}

CUresult pool_alloc(Pool* pool, CUdeviceptr* dptr, size_t bytesize) {
    if (dptr == nullptr || bytesize == 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    const uint64_t bytes = round_up(bytesize, kPitchAlignment);
    if (pool->used + bytes > pool->reserved) {
        const uint64_t grow = round_up(pool->used + bytes - pool->reserved, kGranularity);
        if (CUresult r = charge(pool->device, grow); r != CUDA_SUCCESS) {
            return r;
        }
        pool->reserved += grow;
        pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
    }
    pool->used += bytes;
    pool->used_high = std::max(pool->used_high, pool->used);
    *dptr = take_va(bytes, kPitchAlignment);
    machine().allocations[*dptr] = Allocation{pool->device, bytesize, bytes, AllocKind::pool, pool};
    return CUDA_SUCCESS;
}

CUresult free_allocation(CUdeviceptr dptr) {
    Machine& m = machine();
    auto it = m.allocations.find(dptr);
    if (it == m.allocations.end()) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    const Allocation a = it->second;
    m.allocations.erase(it);
    if (a.kind == AllocKind::pool) {
        a.pool->used -= std::min(a.charged, a.pool->used);
        pool_release_if_destroyed(a.pool);
    } else {
        uncharge(a.device, a.charged);
    }
    return CUDA_SUCCESS;
}

CUresult linear_alloc(CUdeviceptr* dptr, uint64_t requested, uint64_t bytes, AllocKind kind) {
    Context* ctx = current_context();
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    const uint64_t charged = round_up(bytes, kGranularity);
    if (CUresult r = charge(ctx->device, charged); r != CUDA_SUCCESS) {
        return r;
    }
    Machine& m = machine();
    CUdeviceptr va = 0;
    if (kind == AllocKind::v1) {
        // The 32-bit ABI of pre-3.2 programs: the address must fit.
        va = round_up(m.next_va_v1, kGranularity);
        if (va + charged > 0xFFFFFFFFULL) {
            uncharge(ctx->device, charged);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        m.next_va_v1 = va + charged;
    } else {
        va = take_va(charged, kGranularity);
    }
    m.allocations[va] = Allocation{ctx->device, requested, charged, kind, nullptr};
    *dptr = va;
    return CUDA_SUCCESS;
}

// Bytes per element of a CUarray_format, 0 for one the stand-in does not know.
uint64_t format_bytes(int format) {
    switch (format) {
    case 0x01: // UNSIGNED_INT8
    case 0x08: // SIGNED_INT8
        return 1;
    case 0x02: // UNSIGNED_INT16
    case 0x09: // SIGNED_INT16
    case 0x10: // HALF
        return 2;
    case 0x03: // UNSIGNED_INT32
    case 0x0a: // SIGNED_INT32
    case 0x20: // FLOAT
        return 4;
    default:
        return 0;
    }
}

uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d) {
    const uint64_t element = format_bytes(d.Format);
    if (element == 0 || d.Width == 0 ||
        (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4)) {
        return 0;
    }
    return d.Width * std::max<size_t>(d.Height, 1) * std::max<size_t>(d.Depth, 1) * d.NumChannels *
           element;
}

CUDA_ARRAY3D_DESCRIPTOR level_desc(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned level) {
    CUDA_ARRAY3D_DESCRIPTOR l = d;
    l.Width = std::max<size_t>(d.Width >> level, 1);
    l.Height = d.Height == 0 ? 0 : std::max<size_t>(d.Height >> level, 1);
    l.Depth = d.Depth == 0 ? 0 : std::max<size_t>(d.Depth >> level, 1);
    return l;
}

CUresult array_create(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR& desc) {
    Context* ctx = current_context();
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (handle == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    const uint64_t bytes = array_bytes(desc);
    if (bytes == 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    const uint64_t charged = round_up(bytes, kGranularity);
    if (CUresult r = charge(ctx->device, charged); r != CUDA_SUCCESS) {
        return r;
    }
    auto* a = new Array{ctx->device, bytes, charged, desc, false};
    machine().arrays.insert(a);
    *handle = reinterpret_cast<CUarray>(a);
    return CUDA_SUCCESS;
}

unsigned long long clamp_u32(uint64_t v) {
    return std::min<uint64_t>(v, UINT_MAX);
}

// cuDeviceGetAttribute's answers: an H100's, give or take. Attributes the
// table does not name (up to the last one CUDA 13 defines) answer 0.
struct Attribute {
    int attr;
    int value;
};
constexpr Attribute kAttributes[] = {
    {1, 1024},       {2, 1024},        {3, 1024},   {4, 64},       {5, 2147483647},  {6, 65535},
    {7, 65535},      {8, 49152},       {9, 65536},  {10, 32},      {11, 2147483647}, {12, 65536},
    {13, 1980000},   {14, 512},        {15, 1},     {16, 132},     {19, 1},          {21, 131072},
    {22, 131072},    {23, 65536},      {24, 16384}, {25, 16384},   {26, 16384},      {27, 32768},
    {28, 32768},     {29, 2048},       {30, 512},   {31, 1},       {32, 1},          {36, 2619000},
    {37, 5120},      {38, 52428800},   {39, 2048},  {40, 3},       {41, 1},          {42, 32768},
    {43, 2048},      {45, 32768},      {46, 32768}, {47, 8192},    {48, 8192},       {49, 32768},
    {51, 32},        {52, 32768},      {53, 32768}, {54, 2046},    {55, 32768},      {56, 131072},
    {57, 65536},     {58, 16384},      {59, 16384}, {60, 16384},   {61, 32768},      {62, 2048},
    {63, 32768},     {64, 32768},      {65, 2048},  {66, 32768},   {67, 32768},      {68, 2046},
    {69, 268435456}, {70, 131072},     {71, 65000}, {72, 2097120}, {73, 32768},      {74, 32768},
    {75, 9},         {76, 0},          {77, 32768}, {78, 1},       {79, 1},          {80, 1},
    {81, 233472},    {82, 65536},      {83, 1},     {87, 2},       {89, 1},          {90, 1},
    {95, 1},         {97, 232448},     {99, 1},     {102, 1},      {103, 1},         {106, 32},
    {108, 32505856}, {109, 134213632}, {111, 1},    {115, 1},      {119, 1},         {120, 1},
    {121, 1},
};
// 75/76: compute capability 9.0; 83: managed memory; 102: VMM; 115: memory
// pools; 119: pool handle types (POSIX fd).

int device_attribute(const DeviceState& d, int attr, bool* known) {
    *known = attr > 0 && attr < 140;
    switch (attr) {
    case 33:
        return static_cast<int>(d.info.pci_bus); // PCI_BUS_ID
    case 34:
        return static_cast<int>(d.info.pci_device); // PCI_DEVICE_ID
    case 50:
        return static_cast<int>(d.info.pci_domain); // PCI_DOMAIN_ID
    case 85:
        return static_cast<int>(&d - machine().devices.data()); // MULTI_GPU_BOARD_GROUP_ID
    default:
        break;
    }
    for (const Attribute& a : kAttributes) {
        if (a.attr == attr) {
            return a.value;
        }
    }
    return 0;
}
} // namespace

// Counts the call under the function's ABI name and honours fault injection.
#define STANDIN_ENTER()                                                                            \
    static CallSite site_(__func__);                                                               \
    if (CUresult injected_ = enter(site_); injected_ >= 0)                                         \
    return injected_
// The same, for a function that needs cuInit first, taking the machine lock.
#define STANDIN_ENTER_LOCKED()                                                                     \
    STANDIN_ENTER();                                                                               \
    if (!g_initialized.load(std::memory_order_acquire))                                            \
        return CUDA_ERROR_NOT_INITIALIZED;                                                         \
    std::lock_guard machine_lock_(g_mutex)

// ---- Controls -------------------------------------------------------------------

STANDIN_EXPORT unsigned long long gpulimit_standin_calls(const char* abi_name) {
    unsigned long long total = 0;
    for (CallSite* s = g_sites.load(); s != nullptr; s = s->next) {
        if (abi_name != nullptr && std::strcmp(s->name, abi_name) == 0) {
            total += s->count.load(std::memory_order_relaxed);
        }
    }
    return total;
}

STANDIN_EXPORT void gpulimit_standin_reset_calls(void) {
    for (CallSite* s = g_sites.load(); s != nullptr; s = s->next) {
        s->count.store(0, std::memory_order_relaxed);
    }
    g_last_call.store("");
}

STANDIN_EXPORT const char* gpulimit_standin_last_call(void) {
    return g_last_call.load();
}

STANDIN_EXPORT unsigned long long gpulimit_standin_device_used(int ordinal) {
    std::lock_guard lock(g_mutex);
    return valid_device(ordinal) ? machine().devices[static_cast<size_t>(ordinal)].used : ~0ULL;
}

STANDIN_EXPORT unsigned long long gpulimit_standin_device_total(int ordinal) {
    std::lock_guard lock(g_mutex);
    return valid_device(ordinal) ? machine().devices[static_cast<size_t>(ordinal)].info.total : 0;
}

STANDIN_EXPORT void gpulimit_standin_fail_next(const char* abi_name, int result) {
    if (abi_name == nullptr) {
        return;
    }
    std::lock_guard lock(g_fault_mutex);
    if (g_faults.insert_or_assign(abi_name, result).second) {
        g_armed_faults.fetch_add(1, std::memory_order_release);
    }
}

STANDIN_EXPORT int gpulimit_standin_set_graph_reserved(int ordinal, unsigned long long bytes) {
    std::lock_guard lock(g_mutex);
    if (!valid_device(ordinal)) {
        return -1;
    }
    DeviceState& d = machine().devices[static_cast<size_t>(ordinal)];
    const uint64_t others = d.used - d.graph_reserved;
    if (bytes > d.info.total - others) {
        return -1;
    }
    d.used = others + bytes;
    publish_used();
    d.graph_reserved = bytes;
    d.graph_reserved_high = std::max<uint64_t>(d.graph_reserved_high, bytes);
    d.graph_used_high = std::max<uint64_t>(d.graph_used_high, bytes);
    return 0;
}

STANDIN_EXPORT void gpulimit_standin_set_kernel_ns(unsigned long long ns) {
    standin::compute::set_kernel_ns(ns);
}

STANDIN_EXPORT void gpulimit_standin_set_queue_depth(unsigned int depth) {
    standin::compute::set_queue_depth(depth);
}

STANDIN_EXPORT unsigned long long gpulimit_standin_busy_ns(int ordinal, int pid,
                                                           unsigned long long from_ns,
                                                           unsigned long long to_ns) {
    return standin::compute::busy_ns(ordinal, static_cast<uint32_t>(pid), from_ns, to_ns);
}

STANDIN_EXPORT void* gpulimit_standin_timeline(void) {
    return standin::compute::timeline_base();
}

// ---- Initialization, versions, errors ---------------------------------------------

STANDIN_EXPORT CUresult cuInit(unsigned int flags) {
    STANDIN_ENTER();
    if (flags != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    std::lock_guard lock(g_mutex);
    machine();
    g_initialized.store(true, std::memory_order_release);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDriverGetVersion(int* version) {
    STANDIN_ENTER();
    if (version == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *version = reported_driver_version();
    return CUDA_SUCCESS;
}

namespace {
struct ErrorText {
    CUresult code;
    const char* name;
    const char* text;
};
constexpr ErrorText kErrors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {300, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "primary context active"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};
const ErrorText* find_error(CUresult code) {
    for (const ErrorText& e : kErrors) {
        if (e.code == code) {
            return &e;
        }
    }
    return nullptr;
}
} // namespace

STANDIN_EXPORT CUresult cuGetErrorString(CUresult error, const char** str) {
    STANDIN_ENTER();
    const ErrorText* e = find_error(error);
    if (str == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *str = e != nullptr ? e->text : nullptr;
    return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

STANDIN_EXPORT CUresult cuGetErrorName(CUresult error, const char** str) {
    STANDIN_ENTER();
    const ErrorText* e = find_error(error);
    if (str == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *str = e != nullptr ? e->name : nullptr;
    return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- Devices -----------------------------------------------------------------------

STANDIN_EXPORT CUresult cuDeviceGetCount(int* count) {
    STANDIN_ENTER_LOCKED();
    if (count == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *count = static_cast<int>(machine().devices.size());
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
    STANDIN_ENTER_LOCKED();
    if (device == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(ordinal)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *device = ordinal;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    if (name == nullptr || len <= 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    std::snprintf(name, static_cast<size_t>(len), "gpulimit stand-in GPU %d", dev);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    if (bytes == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *bytes = machine().devices[static_cast<size_t>(dev)].info.total;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    if (bytes == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *bytes =
        static_cast<unsigned>(clamp_u32(machine().devices[static_cast<size_t>(dev)].info.total));
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceGetAttribute(int* value, int attrib, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    if (value == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    bool known = false;
    *value = device_attribute(machine().devices[static_cast<size_t>(dev)], attrib, &known);
    trace("cuDeviceGetAttribute(%d, dev %d) = %d%s", attrib, dev, *value,
          known ? "" : " (unknown)");
    return known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

STANDIN_EXPORT CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    if (major == nullptr || minor == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *major = 9;
    *minor = 0;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    if (uuid == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    std::memcpy(uuid->bytes, machine().devices[static_cast<size_t>(dev)].info.uuid_bytes, 16);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    if (uuid == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    std::memcpy(uuid->bytes, machine().devices[static_cast<size_t>(dev)].info.uuid_bytes, 16);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    if (pciBusId == nullptr || len <= 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    // The driver's form: upper-case hex, 8-digit domain.
    const standin::Device& d = machine().devices[static_cast<size_t>(dev)].info;
    std::snprintf(pciBusId, static_cast<size_t>(len), "%08X:%02X:%02X.0", d.pci_domain, d.pci_bus,
                  d.pci_device);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
    STANDIN_ENTER_LOCKED();
    if (dev == nullptr || pciBusId == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    unsigned domain = 0, bus = 0, device = 0;
    if (std::sscanf(pciBusId, "%x:%x:%x", &domain, &bus, &device) != 3) {
        domain = 0;
        if (std::sscanf(pciBusId, "%x:%x", &bus, &device) != 2) {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    const auto& devices = machine().devices;
    for (size_t i = 0; i < devices.size(); ++i) {
        const standin::Device& d = devices[i].info;
        if (d.pci_domain == domain && d.pci_bus == bus && d.pci_device == device) {
            *dev = static_cast<int>(i);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

STANDIN_EXPORT CUresult cuDeviceGetP2PAttribute(int* value, int attrib, CUdevice src,
                                                CUdevice dst) {
    STANDIN_ENTER_LOCKED();
    (void)attrib;
    if (value == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(src) || !valid_device(dst)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *value = 0;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peer) {
    STANDIN_ENTER_LOCKED();
    if (canAccessPeer == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev) || !valid_device(peer)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *canAccessPeer = 0;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t* maxWidth, int format,
                                                           unsigned numChannels, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    (void)format;
    (void)numChannels;
    if (maxWidth == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *maxWidth = 268435456;
    return CUDA_SUCCESS;
}

// ---- Primary and created contexts ---------------------------------------------------

STANDIN_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    if (pctx == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    DeviceState& d = machine().devices[static_cast<size_t>(dev)];
    ++d.primary_refs;
    *pctx = reinterpret_cast<CUcontext>(&d.primary);
    return CUDA_SUCCESS;
}

namespace {
CUresult primary_release(CUdevice dev) {
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    DeviceState& d = machine().devices[static_cast<size_t>(dev)];
    if (d.primary_refs == 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    --d.primary_refs;
    return CUDA_SUCCESS;
}

CUresult primary_set_flags(CUdevice dev, unsigned flags) {
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    machine().devices[static_cast<size_t>(dev)].primary_flags = flags;
    machine().devices[static_cast<size_t>(dev)].primary.flags = flags;
    return CUDA_SUCCESS;
}

CUresult primary_reset(CUdevice dev) {
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    machine().devices[static_cast<size_t>(dev)].primary_refs = 0;
    return CUDA_SUCCESS;
}
} // namespace

STANDIN_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    return primary_release(dev);
}

STANDIN_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    return primary_release(dev);
}

STANDIN_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
    STANDIN_ENTER_LOCKED();
    return primary_set_flags(dev, flags);
}

STANDIN_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
    STANDIN_ENTER_LOCKED();
    return primary_set_flags(dev, flags);
}

STANDIN_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
    STANDIN_ENTER_LOCKED();
    if (flags == nullptr || active == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    const DeviceState& d = machine().devices[static_cast<size_t>(dev)];
    *flags = d.primary_flags;
    *active = d.primary_refs > 0 ? 1 : 0;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    return primary_reset(dev);
}

STANDIN_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    return primary_reset(dev);
}

namespace {
CUresult ctx_create(CUcontext* pctx, unsigned flags, CUdevice dev) {
    if (pctx == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    auto* ctx = new Context;
    ctx->device = dev;
    ctx->flags = flags;
    machine().contexts.insert(ctx);
    t_ctx_stack.push_back(ctx);
    *pctx = reinterpret_cast<CUcontext>(ctx);
    return CUDA_SUCCESS;
}

CUresult ctx_destroy(CUcontext handle) {
    auto* ctx = reinterpret_cast<Context*>(handle);
    if (machine().contexts.count(ctx) == 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    std::erase(t_ctx_stack, ctx);
    machine().contexts.erase(ctx);
    delete ctx;
    return CUDA_SUCCESS;
}

CUresult ctx_push(CUcontext handle) {
    auto* ctx = reinterpret_cast<Context*>(handle);
    if (!valid_context(ctx)) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    t_ctx_stack.push_back(ctx);
    return CUDA_SUCCESS;
}

CUresult ctx_pop(CUcontext* pctx) {
    if (t_ctx_stack.empty()) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (pctx != nullptr) {
        *pctx = reinterpret_cast<CUcontext>(t_ctx_stack.back());
    }
    t_ctx_stack.pop_back();
    return CUDA_SUCCESS;
}
} // namespace

STANDIN_EXPORT CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    return ctx_create(pctx, flags, dev);
}

STANDIN_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    return ctx_create(pctx, flags, dev);
}

STANDIN_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, void* paramsArray, int numParams,
                                       unsigned int flags, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    (void)paramsArray;
    (void)numParams;
    return ctx_create(pctx, flags, dev);
}

// CUDA 12.5+/13: the parameters are a CUctxCreateParams*, which the stand-in ignores.
STANDIN_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, void* ctxCreateParams, unsigned int flags,
                                       CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    (void)ctxCreateParams;
    return ctx_create(pctx, flags, dev);
}

STANDIN_EXPORT CUresult cuCtxDestroy(CUcontext ctx) {
    STANDIN_ENTER_LOCKED();
    return ctx_destroy(ctx);
}

STANDIN_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
    STANDIN_ENTER_LOCKED();
    return ctx_destroy(ctx);
}

STANDIN_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
    STANDIN_ENTER_LOCKED();
    if (pctx == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pctx = reinterpret_cast<CUcontext>(current_context());
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuCtxSetCurrent(CUcontext handle) {
    STANDIN_ENTER_LOCKED();
    auto* ctx = reinterpret_cast<Context*>(handle);
    if (ctx == nullptr) {
        if (!t_ctx_stack.empty()) {
            t_ctx_stack.pop_back();
        }
        return CUDA_SUCCESS;
    }
    if (!valid_context(ctx)) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (t_ctx_stack.empty()) {
        t_ctx_stack.push_back(ctx);
    } else {
        t_ctx_stack.back() = ctx;
    }
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) {
    STANDIN_ENTER_LOCKED();
    return ctx_push(ctx);
}

STANDIN_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    STANDIN_ENTER_LOCKED();
    return ctx_push(ctx);
}

STANDIN_EXPORT CUresult cuCtxPopCurrent(CUcontext* pctx) {
    STANDIN_ENTER_LOCKED();
    return ctx_pop(pctx);
}

STANDIN_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
    STANDIN_ENTER_LOCKED();
    return ctx_pop(pctx);
}

STANDIN_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
    STANDIN_ENTER_LOCKED();
    if (device == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    Context* ctx = current_context();
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    *device = ctx->device;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuCtxGetFlags(unsigned int* flags) {
    STANDIN_ENTER_LOCKED();
    if (flags == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    Context* ctx = current_context();
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    *flags = ctx->flags;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuCtxGetApiVersion(CUcontext handle, unsigned int* version) {
    STANDIN_ENTER_LOCKED();
    if (version == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    auto* ctx = handle != nullptr ? reinterpret_cast<Context*>(handle) : current_context();
    if (!valid_context(ctx)) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    *version = 3020;
    return CUDA_SUCCESS;
}

// Waits for every stream of the context's device (the stand-in does not
// tell contexts of one device apart), without the machine lock.
STANDIN_EXPORT CUresult cuCtxSynchronize(void) {
    STANDIN_ENTER();
    if (!g_initialized.load(std::memory_order_acquire)) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    Context* ctx = current_context();
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    standin::compute::synchronize_device(ctx->device);
    std::lock_guard lock(g_mutex);
    synchronize_pools();
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuCtxGetLimit(size_t* value, int limit) {
    STANDIN_ENTER_LOCKED();
    if (value == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    Context* ctx = current_context();
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    static constexpr size_t kDefaults[] = {1024, 1048576, 8388608, 2, 2048, 64, 0};
    auto it = ctx->limits.find(limit);
    if (it != ctx->limits.end()) {
        *value = it->second;
    } else if (limit >= 0 && static_cast<size_t>(limit) < std::size(kDefaults)) {
        *value = kDefaults[limit];
    } else {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuCtxSetLimit(int limit, size_t value) {
    STANDIN_ENTER_LOCKED();
    Context* ctx = current_context();
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    ctx->limits[limit] = value;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuCtxGetCacheConfig(int* config) {
    STANDIN_ENTER_LOCKED();
    if (config == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *config = 0;
    return current_context() != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

STANDIN_EXPORT CUresult cuCtxSetCacheConfig(int config) {
    STANDIN_ENTER_LOCKED();
    (void)config;
    return current_context() != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

STANDIN_EXPORT CUresult cuCtxGetSharedMemConfig(int* config) {
    STANDIN_ENTER_LOCKED();
    if (config == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *config = 0;
    return current_context() != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

STANDIN_EXPORT CUresult cuCtxSetSharedMemConfig(int config) {
    STANDIN_ENTER_LOCKED();
    (void)config;
    return current_context() != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

STANDIN_EXPORT CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
    STANDIN_ENTER_LOCKED();
    if (leastPriority != nullptr) {
        *leastPriority = 0;
    }
    if (greatestPriority != nullptr) {
        *greatestPriority = -5;
    }
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuCtxResetPersistingL2Cache(void) {
    STANDIN_ENTER_LOCKED();
    return CUDA_SUCCESS;
}

// ---- Modules and launches (no code runs) ------------------------------------------

STANDIN_EXPORT CUresult cuModuleGetLoadingMode(int* mode) {
    STANDIN_ENTER();
    if (mode == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *mode = 1; // CU_MODULE_EAGER_LOADING
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
    STANDIN_ENTER_LOCKED();
    if (module == nullptr || image == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    auto* m = new char;
    machine().modules.insert(m);
    *module = reinterpret_cast<CUmodule>(m);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuModuleUnload(CUmodule module) {
    STANDIN_ENTER_LOCKED();
    auto* m = reinterpret_cast<char*>(module);
    if (machine().modules.erase(m) == 0) {
        return kInvalidHandle;
    }
    delete m;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule module, const char* name) {
    STANDIN_ENTER_LOCKED();
    (void)name;
    if (hfunc == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (machine().modules.count(reinterpret_cast<char*>(module)) == 0) {
        return kInvalidHandle;
    }
    // Any non-null handle works: launches do nothing.
    *hfunc = reinterpret_cast<CUfunction>(module);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuFuncGetAttribute(int* value, int attrib, CUfunction hfunc) {
    STANDIN_ENTER();
    (void)attrib;
    (void)hfunc;
    if (value == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *value = 0;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, int attrib, int value) {
    STANDIN_ENTER();
    (void)hfunc;
    (void)attrib;
    (void)value;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, int config) {
    STANDIN_ENTER();
    (void)hfunc;
    (void)config;
    return CUDA_SUCCESS;
}

// ---- Kernels ---------------------------------------------------------------------
//
// A launch with a kernel duration of 0 (the default) is a no-op and the hot
// path of the interposer's benchmark: no lock, no queue. Otherwise it goes to
// the stream's worker (standin_compute.hpp), or into the stream's graph while
// the stream captures.

namespace {

constexpr CUresult kNotReady = 600;           // CUDA_ERROR_NOT_READY
constexpr CUresult kIllegalState = 401;       // CUDA_ERROR_ILLEGAL_STATE
constexpr CUresult kCaptureUnsupported = 900; // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
constexpr int kCaptureActive = 1;             // CU_STREAM_CAPTURE_STATUS_ACTIVE
constexpr size_t kMaxDevices = 16;            // standin::timeline::kMaxDevices

std::atomic<int> g_capturing{0}; // streams capturing, for the no-op fast path
std::atomic<unsigned> g_fork_generation{0};

// The per-thread default stream of each device for this thread; its workers
// retire when the thread ends. A fork child's copy belongs to the parent.
struct PerThreadStreams {
    unsigned generation = 0;
    standin::compute::WorkerPtr workers[kMaxDevices];
    Graph* capture[kMaxDevices] = {};
    cuuint64_t capture_id[kMaxDevices] = {};
    PerThreadStreams(const PerThreadStreams&) = delete;
    PerThreadStreams& operator=(const PerThreadStreams&) = delete;
    PerThreadStreams() = default;
    ~PerThreadStreams() {
        if (generation != g_fork_generation.load()) {
            return;
        }
        for (auto& w : workers) {
            if (w) {
                standin::compute::retire(w);
            }
        }
    }
};
thread_local PerThreadStreams t_streams;

PerThreadStreams& per_thread_streams() {
    const unsigned generation = g_fork_generation.load(std::memory_order_relaxed);
    if (t_streams.generation != generation) {
        for (auto& w : t_streams.workers) {
            new (&w) standin::compute::WorkerPtr(); // the parent's: leave it alone
        }
        std::fill(std::begin(t_streams.capture), std::end(t_streams.capture), nullptr);
        t_streams.generation = generation;
    }
    return t_streams;
}

// After fork only the forking thread exists: the parent's workers have no
// thread here, so forget them (leaked, not touched).
void forget_workers_after_fork() {
    g_fork_generation.fetch_add(1);
    for (auto& w : machine().legacy) {
        new (&w) standin::compute::WorkerPtr();
    }
    for (Stream* s : machine().streams) {
        new (&s->worker) standin::compute::WorkerPtr();
    }
    for (Event* e : machine().events) {
        new (&e->recorded) standin::compute::WorkerPtr();
    }
}

bool is_per_thread(CUstream stream, bool ptsz) {
    const auto raw = reinterpret_cast<uintptr_t>(stream);
    return raw == kStreamPerThread || (raw == 0 && ptsz);
}

// Where work on a stream goes; the machine lock is held. `worker` is the
// slot of the stream's worker (maybe empty), `capture` set while capturing.
struct StreamSlots {
    int device = 0;
    standin::compute::WorkerPtr* worker = nullptr;
    Graph** capture = nullptr;
    cuuint64_t* capture_id = nullptr;
    Stream* stream = nullptr; // a created stream
};

CUresult stream_slots(CUstream stream, bool ptsz, StreamSlots* out) {
    static std::once_flag fork_handler;
    std::call_once(fork_handler,
                   [] { pthread_atfork(nullptr, nullptr, forget_workers_after_fork); });
    const auto raw = reinterpret_cast<uintptr_t>(stream);
    if (raw == 0 || raw == kStreamLegacy || raw == kStreamPerThread) {
        Context* ctx = current_context();
        if (ctx == nullptr) {
            return CUDA_ERROR_INVALID_CONTEXT;
        }
        out->device = ctx->device;
        if (is_per_thread(stream, ptsz)) {
            PerThreadStreams& pt = per_thread_streams();
            out->worker = &pt.workers[ctx->device];
            out->capture = &pt.capture[ctx->device];
            out->capture_id = &pt.capture_id[ctx->device];
        } else {
            out->worker = &machine().legacy[static_cast<size_t>(ctx->device)];
        }
        return CUDA_SUCCESS;
    }
    auto* s = reinterpret_cast<Stream*>(stream);
    if (machine().streams.count(s) == 0) {
        return kInvalidHandle;
    }
    out->device = s->ctx->device;
    out->worker = &s->worker;
    out->capture = &s->capture;
    out->capture_id = &s->capture_id;
    out->stream = s;
    return CUDA_SUCCESS;
}

// Runs `kernels` (one of ns, or a graph's) on the stream, or records them
// into the stream's capture.
CUresult submit(CUstream stream, bool ptsz, uint64_t ns, const standin::compute::Kernels& graph) {
    standin::compute::WorkerPtr worker;
    {
        std::lock_guard lock(g_mutex);
        StreamSlots slots;
        if (CUresult r = stream_slots(stream, ptsz, &slots); r != CUDA_SUCCESS) {
            return r;
        }
        if (slots.capture != nullptr && *slots.capture != nullptr) {
            auto& captured = (*slots.capture)->kernels;
            if (graph) {
                captured.insert(captured.end(), graph->begin(), graph->end());
            } else {
                captured.push_back(ns);
            }
            return CUDA_SUCCESS;
        }
        const bool work =
            graph ? std::any_of(graph->begin(), graph->end(), [](uint64_t k) { return k > 0; })
                  : ns > 0;
        if (!work) {
            return CUDA_SUCCESS;
        }
        if (!*slots.worker) {
            *slots.worker = standin::compute::make_worker(slots.device);
        }
        worker = *slots.worker;
    }
    standin::compute::enqueue(worker, ns, graph); // may wait for room: no lock held
    return CUDA_SUCCESS;
}

CUresult launch(CUfunction f, CUstream stream, bool ptsz) {
    if (f == nullptr) {
        return kInvalidHandle;
    }
    const uint64_t ns = standin::compute::kernel_ns();
    if (ns == 0 && g_capturing.load(std::memory_order_acquire) == 0) {
        return CUDA_SUCCESS;
    }
    if (!g_initialized.load(std::memory_order_acquire)) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return submit(stream, ptsz, ns, nullptr);
}

// cuda.h's CUlaunchConfig (CUDA 11.8+), up to the stream.
struct StandinLaunchConfig {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void* attrs;
    unsigned numAttrs;
};

CUresult launch_ex(const void* config, CUfunction f, bool ptsz) {
    if (config == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return launch(f, static_cast<const StandinLaunchConfig*>(config)->hStream, ptsz);
}
} // namespace

STANDIN_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gridDimX, unsigned gridDimY,
                                       unsigned gridDimZ, unsigned blockDimX, unsigned blockDimY,
                                       unsigned blockDimZ, unsigned sharedMemBytes,
                                       CUstream hStream, void** kernelParams, void** extra) {
    STANDIN_ENTER();
    (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY,
        (void)blockDimZ, (void)sharedMemBytes, (void)kernelParams, (void)extra;
    return launch(f, hStream, false);
}

STANDIN_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gridDimX, unsigned gridDimY,
                                            unsigned gridDimZ, unsigned blockDimX,
                                            unsigned blockDimY, unsigned blockDimZ,
                                            unsigned sharedMemBytes, CUstream hStream,
                                            void** kernelParams, void** extra) {
    STANDIN_ENTER();
    (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY,
        (void)blockDimZ, (void)sharedMemBytes, (void)kernelParams, (void)extra;
    return launch(f, hStream, true);
}

STANDIN_EXPORT CUresult cuLaunchKernelEx(const void* config, CUfunction f, void** kernelParams,
                                         void** extra) {
    STANDIN_ENTER();
    (void)kernelParams, (void)extra;
    return launch_ex(config, f, false);
}

STANDIN_EXPORT CUresult cuLaunchKernelEx_ptsz(const void* config, CUfunction f, void** kernelParams,
                                              void** extra) {
    STANDIN_ENTER();
    (void)kernelParams, (void)extra;
    return launch_ex(config, f, true);
}

STANDIN_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gridDimX,
                                                  unsigned gridDimY, unsigned gridDimZ,
                                                  unsigned blockDimX, unsigned blockDimY,
                                                  unsigned blockDimZ, unsigned sharedMemBytes,
                                                  CUstream hStream, void** kernelParams) {
    STANDIN_ENTER();
    (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY,
        (void)blockDimZ, (void)sharedMemBytes, (void)kernelParams;
    return launch(f, hStream, false);
}

STANDIN_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gridDimX,
                                                       unsigned gridDimY, unsigned gridDimZ,
                                                       unsigned blockDimX, unsigned blockDimY,
                                                       unsigned blockDimZ, unsigned sharedMemBytes,
                                                       CUstream hStream, void** kernelParams) {
    STANDIN_ENTER();
    (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY,
        (void)blockDimZ, (void)sharedMemBytes, (void)kernelParams;
    return launch(f, hStream, true);
}

// Host functions run at once on the caller's thread: streams complete at once.
STANDIN_EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
    STANDIN_ENTER();
    (void)hStream;
    if (fn == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    fn(userData);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void* userData) {
    STANDIN_ENTER();
    (void)hStream;
    if (fn == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    fn(userData);
    return CUDA_SUCCESS;
}

// ---- Linear memory ------------------------------------------------------------------

STANDIN_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
    STANDIN_ENTER_LOCKED();
    if (dptr == nullptr || bytesize == 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return linear_alloc(dptr, bytesize, bytesize, AllocKind::linear);
}

STANDIN_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
    STANDIN_ENTER_LOCKED();
    if (dptr == nullptr || bytesize == 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUdeviceptr va = 0;
    const CUresult r = linear_alloc(&va, bytesize, bytesize, AllocKind::v1);
    if (r == CUDA_SUCCESS) {
        *dptr = static_cast<CUdeviceptr_v1>(va);
    }
    return r;
}

namespace {
CUresult alloc_pitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                     unsigned element, AllocKind kind) {
    if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0 ||
        (element != 4 && element != 8 && element != 16)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    const size_t p = round_up(width, kPitchAlignment);
    const CUresult r = linear_alloc(dptr, p * height, p * height, kind);
    if (r == CUDA_SUCCESS) {
        *pitch = p;
    }
    return r;
}
} // namespace

STANDIN_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                           size_t Height, unsigned int ElementSizeBytes) {
    STANDIN_ENTER_LOCKED();
    return alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes, AllocKind::linear);
}

STANDIN_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch,
                                        unsigned int WidthInBytes, unsigned int Height,
                                        unsigned int ElementSizeBytes) {
    STANDIN_ENTER_LOCKED();
    if (dptr == nullptr || pPitch == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUdeviceptr va = 0;
    size_t pitch = 0;
    const CUresult r =
        alloc_pitch(&va, &pitch, WidthInBytes, Height, ElementSizeBytes, AllocKind::v1);
    if (r == CUDA_SUCCESS) {
        *dptr = static_cast<CUdeviceptr_v1>(va);
        *pPitch = static_cast<unsigned>(pitch);
    }
    return r;
}

STANDIN_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
    STANDIN_ENTER_LOCKED();
    if (dptr == nullptr || bytesize == 0 || (flags != 1 && flags != 2)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return linear_alloc(dptr, bytesize, bytesize, AllocKind::managed);
}

STANDIN_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    STANDIN_ENTER_LOCKED();
    if (dptr == 0) {
        return CUDA_SUCCESS;
    }
    return free_allocation(dptr);
}

STANDIN_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
    STANDIN_ENTER_LOCKED();
    if (dptr == 0) {
        return CUDA_SUCCESS;
    }
    return free_allocation(dptr);
}

STANDIN_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
    STANDIN_ENTER_LOCKED();
    if (free == nullptr || total == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    Context* ctx = current_context();
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    const DeviceState& d = machine().devices[static_cast<size_t>(ctx->device)];
    *free = d.info.total - d.used;
    *total = d.info.total;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
    STANDIN_ENTER_LOCKED();
    if (free == nullptr || total == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    Context* ctx = current_context();
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    const DeviceState& d = machine().devices[static_cast<size_t>(ctx->device)];
    *free = static_cast<unsigned>(clamp_u32(d.info.total - d.used));
    *total = static_cast<unsigned>(clamp_u32(d.info.total));
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize,
                                                CUdeviceptr dptr) {
    STANDIN_ENTER_LOCKED();
    const auto& allocations = machine().allocations;
    auto it = allocations.upper_bound(dptr);
    if (it == allocations.begin()) {
        return CUDA_ERROR_NOT_FOUND;
    }
    --it;
    if (dptr >= it->first + std::max<uint64_t>(it->second.requested, 1)) {
        return CUDA_ERROR_NOT_FOUND;
    }
    if (pbase != nullptr) {
        *pbase = it->first;
    }
    if (psize != nullptr) {
        *psize = it->second.requested;
    }
    return CUDA_SUCCESS;
}

// Page-locked host memory: real host memory, not counted on any device.
STANDIN_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags) {
    STANDIN_ENTER();
    (void)flags;
    if (pp == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pp = std::calloc(1, std::max<size_t>(bytesize, 1));
    return *pp != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

STANDIN_EXPORT CUresult cuMemFreeHost(void* p) {
    STANDIN_ENTER();
    std::free(p);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int flags) {
    STANDIN_ENTER();
    (void)bytesize;
    (void)flags;
    return p != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

STANDIN_EXPORT CUresult cuMemHostUnregister(void* p) {
    STANDIN_ENTER();
    return p != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- Stream-ordered allocation and pools --------------------------------------------

namespace {
CUresult alloc_async(CUdeviceptr* dptr, size_t bytesize, Pool* pool, CUstream stream) {
    CUresult error = CUDA_SUCCESS;
    Context* ctx = stream_context(stream, &error);
    if (ctx == nullptr) {
        return error;
    }
    if (pool == nullptr) {
        pool = machine().devices[static_cast<size_t>(ctx->device)].current_pool;
    } else if (machine().pools.count(pool) == 0 || pool->destroyed) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return pool_alloc(pool, dptr, bytesize);
}

CUresult free_async(CUdeviceptr dptr, CUstream stream) {
    CUresult error = CUDA_SUCCESS;
    if (stream_context(stream, &error) == nullptr) {
        return error;
    }
    return free_allocation(dptr);
}

Pool* pool_of(CUmemoryPool handle) {
    auto* pool = reinterpret_cast<Pool*>(handle);
    return machine().pools.count(pool) != 0 && !pool->destroyed ? pool : nullptr;
}
} // namespace

STANDIN_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return alloc_async(dptr, bytesize, nullptr, hStream);
}

STANDIN_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return alloc_async(dptr, bytesize, nullptr, hStream);
}

STANDIN_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                                CUmemoryPool pool, CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    if (pool == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return alloc_async(dptr, bytesize, reinterpret_cast<Pool*>(pool), hStream);
}

STANDIN_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                     CUmemoryPool pool, CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    if (pool == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return alloc_async(dptr, bytesize, reinterpret_cast<Pool*>(pool), hStream);
}

STANDIN_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return free_async(dptr, hStream);
}

STANDIN_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return free_async(dptr, hStream);
}

STANDIN_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
    STANDIN_ENTER_LOCKED();
    if (pool == nullptr || poolProps == nullptr ||
        poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(poolProps->location.id)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    auto* p = new Pool;
    p->device = poolProps->location.id;
    machine().pools.insert(p);
    *pool = reinterpret_cast<CUmemoryPool>(p);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool handle) {
    STANDIN_ENTER_LOCKED();
    Pool* pool = pool_of(handle);
    if (pool == nullptr || pool->is_default) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    DeviceState& d = machine().devices[static_cast<size_t>(pool->device)];
    if (d.current_pool == pool) {
        d.current_pool = d.default_pool;
    }
    pool->destroyed = true;
    pool_release_if_destroyed(pool);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool handle, size_t minBytesToKeep) {
    STANDIN_ENTER_LOCKED();
    Pool* pool = pool_of(handle);
    if (pool == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pool_shrink(pool, minBytesToKeep);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool handle, int attr, void* value) {
    STANDIN_ENTER_LOCKED();
    Pool* pool = pool_of(handle);
    if (pool == nullptr || value == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (attr >= 1 && attr <= 3) {
        *static_cast<int*>(value) = pool->reuse[attr];
        return CUDA_SUCCESS;
    }
    uint64_t v = 0;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        v = pool->release_threshold;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        v = pool->reserved;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        v = pool->reserved_high;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        v = pool->used;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        v = pool->used_high;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    *static_cast<cuuint64_t*>(value) = v;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool handle, int attr, void* value) {
    STANDIN_ENTER_LOCKED();
    Pool* pool = pool_of(handle);
    if (pool == nullptr || value == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (attr >= 1 && attr <= 3) {
        pool->reuse[attr] = *static_cast<int*>(value);
        return CUDA_SUCCESS;
    }
    const uint64_t v = *static_cast<cuuint64_t*>(value);
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->release_threshold = v;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (v != 0) {
            return CUDA_ERROR_INVALID_VALUE;
        }
        pool->reserved_high = pool->reserved;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (v != 0) {
            return CUDA_ERROR_INVALID_VALUE;
        }
        pool->used_high = pool->used;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

STANDIN_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map,
                                           size_t count) {
    STANDIN_ENTER_LOCKED();
    (void)map;
    (void)count;
    return pool_of(pool) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

STANDIN_EXPORT CUresult cuMemPoolGetAccess(int* flags, CUmemoryPool pool, CUmemLocation* location) {
    STANDIN_ENTER_LOCKED();
    if (flags == nullptr || location == nullptr || pool_of(pool) == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *flags = location->id == pool_of(pool)->device ? 3 : 0; // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    if (pool_out == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *pool_out =
        reinterpret_cast<CUmemoryPool>(machine().devices[static_cast<size_t>(dev)].default_pool);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
    STANDIN_ENTER_LOCKED();
    if (pool == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *pool =
        reinterpret_cast<CUmemoryPool>(machine().devices[static_cast<size_t>(dev)].current_pool);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool handle) {
    STANDIN_ENTER_LOCKED();
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    Pool* pool = pool_of(handle);
    if (pool == nullptr || pool->device != dev) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    machine().devices[static_cast<size_t>(dev)].current_pool = pool;
    return CUDA_SUCCESS;
}

// ---- Virtual memory management (no context needed, as on the real driver) --------

STANDIN_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                      const CUmemAllocationProp* prop, int option) {
    STANDIN_ENTER();
    if (granularity == nullptr || prop == nullptr ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *granularity = kGranularity;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                    const CUmemAllocationProp* prop, unsigned long long flags) {
    STANDIN_ENTER_LOCKED();
    if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 ||
        size % kGranularity != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    VmmHandle h{-1, size, *prop};
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!valid_device(prop->location.id)) {
            return CUDA_ERROR_INVALID_DEVICE;
        }
        if (CUresult r = charge(prop->location.id, size); r != CUDA_SUCCESS) {
            return r;
        }
        h.device = prop->location.id;
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    Machine& m = machine();
    *handle = m.next_vmm++;
    m.vmm[*handle] = h;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    STANDIN_ENTER_LOCKED();
    auto& vmm = machine().vmm;
    auto it = vmm.find(handle);
    if (it == vmm.end()) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (it->second.device >= 0) {
        uncharge(it->second.device, it->second.size);
    }
    vmm.erase(it);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(
    CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
    STANDIN_ENTER_LOCKED();
    auto it = machine().vmm.find(handle);
    if (prop == nullptr || it == machine().vmm.end()) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *prop = it->second.prop;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                            CUdeviceptr addr, unsigned long long flags) {
    STANDIN_ENTER_LOCKED();
    (void)addr;
    (void)flags;
    if (ptr == nullptr || size == 0 || size % kGranularity != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *ptr = take_va(size, std::max<uint64_t>(alignment, kGranularity));
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    STANDIN_ENTER_LOCKED();
    return ptr != 0 && size != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

STANDIN_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                 CUmemGenericAllocationHandle handle, unsigned long long flags) {
    STANDIN_ENTER_LOCKED();
    (void)offset;
    if (ptr == 0 || size == 0 || flags != 0 || machine().vmm.count(handle) == 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    STANDIN_ENTER_LOCKED();
    return ptr != 0 && size != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

STANDIN_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                       size_t count) {
    STANDIN_ENTER_LOCKED();
    return ptr != 0 && size != 0 && desc != nullptr && count != 0 ? CUDA_SUCCESS
                                                                  : CUDA_ERROR_INVALID_VALUE;
}

// ---- Arrays -------------------------------------------------------------------------

STANDIN_EXPORT CUresult cuArrayCreate_v2(CUarray* pHandle,
                                         const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
    STANDIN_ENTER_LOCKED();
    if (pAllocateArray == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUDA_ARRAY3D_DESCRIPTOR d{};
    d.Width = pAllocateArray->Width;
    d.Height = pAllocateArray->Height;
    d.Format = pAllocateArray->Format;
    d.NumChannels = pAllocateArray->NumChannels;
    return array_create(pHandle, d);
}

STANDIN_EXPORT CUresult cuArray3DCreate_v2(CUarray* pHandle,
                                           const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
    STANDIN_ENTER_LOCKED();
    if (pAllocateArray == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return array_create(pHandle, *pAllocateArray);
}

STANDIN_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
    STANDIN_ENTER_LOCKED();
    auto* a = reinterpret_cast<Array*>(hArray);
    if (machine().arrays.count(a) == 0 || a->is_level) {
        return kInvalidHandle;
    }
    uncharge(a->device, a->charged);
    machine().arrays.erase(a);
    delete a;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* desc, CUarray hArray) {
    STANDIN_ENTER_LOCKED();
    auto* a = reinterpret_cast<Array*>(hArray);
    if (desc == nullptr || machine().arrays.count(a) == 0) {
        return kInvalidHandle;
    }
    desc->Width = a->desc.Width;
    desc->Height = a->desc.Height;
    desc->Format = a->desc.Format;
    desc->NumChannels = a->desc.NumChannels;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* desc, CUarray hArray) {
    STANDIN_ENTER_LOCKED();
    auto* a = reinterpret_cast<Array*>(hArray);
    if (desc == nullptr || machine().arrays.count(a) == 0) {
        return kInvalidHandle;
    }
    *desc = a->desc;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle,
                                               const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                               unsigned int numMipmapLevels) {
    STANDIN_ENTER_LOCKED();
    Context* ctx = current_context();
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (pHandle == nullptr || pMipmappedArrayDesc == nullptr || numMipmapLevels == 0 ||
        numMipmapLevels > 32) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t bytes = 0;
    for (unsigned level = 0; level < numMipmapLevels; ++level) {
        const uint64_t b = array_bytes(level_desc(*pMipmappedArrayDesc, level));
        if (b == 0) {
            return CUDA_ERROR_INVALID_VALUE;
        }
        bytes += b;
    }
    const uint64_t charged = round_up(bytes, kGranularity);
    if (CUresult r = charge(ctx->device, charged); r != CUDA_SUCCESS) {
        return r;
    }
    auto* m = new Mipmap{ctx->device, bytes, charged, *pMipmappedArrayDesc, numMipmapLevels, {}};
    machine().mipmaps.insert(m);
    *pHandle = reinterpret_cast<CUmipmappedArray>(m);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMipmappedArrayGetLevel(CUarray* pLevelArray,
                                                 CUmipmappedArray hMipmappedArray,
                                                 unsigned int level) {
    STANDIN_ENTER_LOCKED();
    auto* m = reinterpret_cast<Mipmap*>(hMipmappedArray);
    if (machine().mipmaps.count(m) == 0) {
        return kInvalidHandle;
    }
    if (pLevelArray == nullptr || level >= m->levels) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    const CUDA_ARRAY3D_DESCRIPTOR d = level_desc(m->desc, level);
    auto* a = new Array{m->device, array_bytes(d), 0, d, true};
    m->level_arrays.push_back(a);
    machine().arrays.insert(a);
    *pLevelArray = reinterpret_cast<CUarray>(a);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
    STANDIN_ENTER_LOCKED();
    auto* m = reinterpret_cast<Mipmap*>(hMipmappedArray);
    if (machine().mipmaps.count(m) == 0) {
        return kInvalidHandle;
    }
    uncharge(m->device, m->charged);
    for (Array* a : m->level_arrays) {
        machine().arrays.erase(a);
        delete a;
    }
    machine().mipmaps.erase(m);
    delete m;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuArrayGetMemoryRequirements(
    CUDA_ARRAY_MEMORY_REQUIREMENTS* memoryRequirements, CUarray array, CUdevice device) {
    STANDIN_ENTER_LOCKED();
    auto* a = reinterpret_cast<Array*>(array);
    if (memoryRequirements == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (machine().arrays.count(a) == 0) {
        return kInvalidHandle;
    }
    if (!valid_device(device)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *memoryRequirements =
        CUDA_ARRAY_MEMORY_REQUIREMENTS{round_up(a->bytes, kGranularity), kPitchAlignment, {}};
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuMipmappedArrayGetMemoryRequirements(
    CUDA_ARRAY_MEMORY_REQUIREMENTS* memoryRequirements, CUmipmappedArray mipmap, CUdevice device) {
    STANDIN_ENTER_LOCKED();
    auto* m = reinterpret_cast<Mipmap*>(mipmap);
    if (memoryRequirements == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (machine().mipmaps.count(m) == 0) {
        return kInvalidHandle;
    }
    if (!valid_device(device)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *memoryRequirements = CUDA_ARRAY_MEMORY_REQUIREMENTS{m->charged, kPitchAlignment, {}};
    return CUDA_SUCCESS;
}

// ---- Streams and events (everything completes at once) -----------------------------

namespace {
CUresult stream_create(CUstream* phStream, unsigned flags, int priority) {
    Context* ctx = current_context();
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (phStream == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    auto* s = new Stream{ctx, flags, priority, nullptr, nullptr, 0};
    machine().streams.insert(s);
    *phStream = reinterpret_cast<CUstream>(s);
    return CUDA_SUCCESS;
}

// Work already queued still runs, as on a real driver; a capture in
// progress is dropped.
CUresult stream_destroy(CUstream hStream) {
    auto* s = reinterpret_cast<Stream*>(hStream);
    if (machine().streams.erase(s) == 0) {
        return kInvalidHandle;
    }
    if (s->worker) {
        standin::compute::retire(s->worker);
    }
    if (s->capture != nullptr) {
        delete s->capture;
        g_capturing.fetch_sub(1);
    }
    delete s;
    return CUDA_SUCCESS;
}

// Waits for the stream's kernels without the machine lock, then does what a
// synchronization does to pools.
CUresult stream_synchronize(CUstream hStream, bool ptsz) {
    standin::compute::WorkerPtr worker;
    {
        std::lock_guard lock(g_mutex);
        StreamSlots slots;
        if (CUresult r = stream_slots(hStream, ptsz, &slots); r != CUDA_SUCCESS) {
            return r;
        }
        worker = *slots.worker;
    }
    if (worker) {
        standin::compute::synchronize(worker);
    }
    std::lock_guard lock(g_mutex);
    synchronize_pools();
    return CUDA_SUCCESS;
}

CUresult stream_query(CUstream hStream, bool ptsz) {
    StreamSlots slots;
    if (CUresult r = stream_slots(hStream, ptsz, &slots); r != CUDA_SUCCESS) {
        return r;
    }
    return *slots.worker && !standin::compute::idle(*slots.worker) ? kNotReady : CUDA_SUCCESS;
}

CUresult stream_check(CUstream hStream) {
    CUresult error = CUDA_SUCCESS;
    stream_context(hStream, &error);
    return error;
}

CUresult stream_get_ctx(CUstream hStream, CUcontext* pctx) {
    if (pctx == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult error = CUDA_SUCCESS;
    Context* ctx = stream_context(hStream, &error);
    if (ctx == nullptr) {
        return error;
    }
    *pctx = reinterpret_cast<CUcontext>(ctx);
    return CUDA_SUCCESS;
}

CUresult stream_flags(CUstream hStream, unsigned* flags) {
    if (flags == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (CUresult r = stream_check(hStream); r != CUDA_SUCCESS) {
        return r;
    }
    const auto raw = reinterpret_cast<uintptr_t>(hStream);
    *flags = raw <= kStreamPerThread ? 0 : reinterpret_cast<Stream*>(hStream)->flags;
    return CUDA_SUCCESS;
}

CUresult stream_priority(CUstream hStream, int* priority) {
    if (priority == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (CUresult r = stream_check(hStream); r != CUDA_SUCCESS) {
        return r;
    }
    const auto raw = reinterpret_cast<uintptr_t>(hStream);
    *priority = raw <= kStreamPerThread ? 0 : reinterpret_cast<Stream*>(hStream)->priority;
    return CUDA_SUCCESS;
}

CUresult stream_capture_info(CUstream hStream, bool ptsz, int* status, cuuint64_t* id) {
    if (status == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    StreamSlots slots;
    if (CUresult r = stream_slots(hStream, ptsz, &slots); r != CUDA_SUCCESS) {
        return r;
    }
    const bool capturing = slots.capture != nullptr && *slots.capture != nullptr;
    *status = capturing ? kCaptureActive : 0; // CU_STREAM_CAPTURE_STATUS_NONE
    if (id != nullptr) {
        *id = capturing ? *slots.capture_id : 0;
    }
    return CUDA_SUCCESS;
}

CUresult stream_is_capturing(CUstream hStream, bool ptsz, int* status) {
    return stream_capture_info(hStream, ptsz, status, nullptr);
}

// Created streams and the per-thread default stream capture; the legacy
// stream cannot, as on the real driver. The mode is not simulated.
CUresult begin_capture(CUstream hStream, bool ptsz) {
    StreamSlots slots;
    if (CUresult r = stream_slots(hStream, ptsz, &slots); r != CUDA_SUCCESS) {
        return r;
    }
    if (slots.capture == nullptr) {
        return kCaptureUnsupported;
    }
    if (*slots.capture != nullptr) {
        return kIllegalState;
    }
    *slots.capture = new Graph;
    *slots.capture_id = machine().next_capture_id++;
    g_capturing.fetch_add(1, std::memory_order_release);
    return CUDA_SUCCESS;
}

CUresult end_capture(CUstream hStream, bool ptsz, CUgraph* phGraph) {
    if (phGraph == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    StreamSlots slots;
    if (CUresult r = stream_slots(hStream, ptsz, &slots); r != CUDA_SUCCESS) {
        return r;
    }
    if (slots.capture == nullptr || *slots.capture == nullptr) {
        return kIllegalState;
    }
    Graph* graph = *slots.capture;
    *slots.capture = nullptr;
    g_capturing.fetch_sub(1, std::memory_order_release);
    machine().graphs.insert(graph);
    *phGraph = reinterpret_cast<CUgraph>(graph);
    return CUDA_SUCCESS;
}

// An event completes when everything queued on its stream at the record has
// run; the stand-in waits for the stream to drain (later work included).
CUresult event_record(CUevent hEvent, CUstream hStream, bool ptsz) {
    auto* e = reinterpret_cast<Event*>(hEvent);
    if (machine().events.count(e) == 0) {
        return kInvalidHandle;
    }
    StreamSlots slots;
    if (CUresult r = stream_slots(hStream, ptsz, &slots); r != CUDA_SUCCESS) {
        return r;
    }
    e->recorded = *slots.worker;
    return CUDA_SUCCESS;
}
} // namespace

STANDIN_EXPORT CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
    STANDIN_ENTER_LOCKED();
    return stream_create(phStream, Flags, 0);
}

STANDIN_EXPORT CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags,
                                                   int priority) {
    STANDIN_ENTER_LOCKED();
    return stream_create(phStream, flags, priority);
}

STANDIN_EXPORT CUresult cuStreamDestroy(CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return stream_destroy(hStream);
}

STANDIN_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return stream_destroy(hStream);
}

STANDIN_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
    STANDIN_ENTER();
    if (!g_initialized.load(std::memory_order_acquire)) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return stream_synchronize(hStream, false);
}

STANDIN_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
    STANDIN_ENTER();
    if (!g_initialized.load(std::memory_order_acquire)) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return stream_synchronize(hStream, true);
}

STANDIN_EXPORT CUresult cuStreamQuery(CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return stream_query(hStream, false);
}

STANDIN_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return stream_query(hStream, true);
}

STANDIN_EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext* pctx) {
    STANDIN_ENTER_LOCKED();
    return stream_get_ctx(hStream, pctx);
}

STANDIN_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext* pctx) {
    STANDIN_ENTER_LOCKED();
    return stream_get_ctx(hStream, pctx);
}

STANDIN_EXPORT CUresult cuStreamGetFlags(CUstream hStream, unsigned int* flags) {
    STANDIN_ENTER_LOCKED();
    return stream_flags(hStream, flags);
}

STANDIN_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int* flags) {
    STANDIN_ENTER_LOCKED();
    return stream_flags(hStream, flags);
}

STANDIN_EXPORT CUresult cuStreamGetPriority(CUstream hStream, int* priority) {
    STANDIN_ENTER_LOCKED();
    return stream_priority(hStream, priority);
}

STANDIN_EXPORT CUresult cuStreamGetPriority_ptsz(CUstream hStream, int* priority) {
    STANDIN_ENTER_LOCKED();
    return stream_priority(hStream, priority);
}

STANDIN_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
    STANDIN_ENTER_LOCKED();
    (void)Flags;
    if (machine().events.count(reinterpret_cast<Event*>(hEvent)) == 0) {
        return kInvalidHandle;
    }
    return stream_check(hStream);
}

STANDIN_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent,
                                               unsigned int Flags) {
    STANDIN_ENTER_LOCKED();
    (void)Flags;
    if (machine().events.count(reinterpret_cast<Event*>(hEvent)) == 0) {
        return kInvalidHandle;
    }
    return stream_check(hStream);
}

STANDIN_EXPORT CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback,
                                            void* userData, unsigned int flags) {
    STANDIN_ENTER();
    (void)flags;
    if (callback == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    callback(hStream, CUDA_SUCCESS, userData);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
                                                 void* userData, unsigned int flags) {
    STANDIN_ENTER();
    (void)flags;
    if (callback == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    callback(hStream, CUDA_SUCCESS, userData);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, int* captureStatus) {
    STANDIN_ENTER_LOCKED();
    return stream_is_capturing(hStream, false, captureStatus);
}

STANDIN_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream, int* captureStatus) {
    STANDIN_ENTER_LOCKED();
    return stream_is_capturing(hStream, true, captureStatus);
}

STANDIN_EXPORT CUresult cuStreamGetCaptureInfo(CUstream hStream, int* captureStatus,
                                               cuuint64_t* id) {
    STANDIN_ENTER_LOCKED();
    return stream_capture_info(hStream, false, captureStatus, id);
}

STANDIN_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, int* captureStatus,
                                                    cuuint64_t* id) {
    STANDIN_ENTER_LOCKED();
    return stream_capture_info(hStream, true, captureStatus, id);
}

STANDIN_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, int* captureStatus,
                                                  cuuint64_t* id, CUgraph* graph,
                                                  const CUgraphNode** deps, size_t* numDeps) {
    STANDIN_ENTER_LOCKED();
    if (graph != nullptr) {
        *graph = nullptr;
    }
    if (deps != nullptr) {
        *deps = nullptr;
    }
    if (numDeps != nullptr) {
        *numDeps = 0;
    }
    return stream_capture_info(hStream, false, captureStatus, id);
}

STANDIN_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, int* captureStatus,
                                                       cuuint64_t* id, CUgraph* graph,
                                                       const CUgraphNode** deps, size_t* numDeps) {
    STANDIN_ENTER_LOCKED();
    if (graph != nullptr) {
        *graph = nullptr;
    }
    if (deps != nullptr) {
        *deps = nullptr;
    }
    if (numDeps != nullptr) {
        *numDeps = 0;
    }
    return stream_capture_info(hStream, true, captureStatus, id);
}

STANDIN_EXPORT CUresult cuStreamBeginCapture(CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return begin_capture(hStream, false);
}

STANDIN_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return begin_capture(hStream, true);
}

STANDIN_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, int mode) {
    STANDIN_ENTER_LOCKED();
    (void)mode;
    return begin_capture(hStream, false);
}

STANDIN_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, int mode) {
    STANDIN_ENTER_LOCKED();
    (void)mode;
    return begin_capture(hStream, true);
}

STANDIN_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
    STANDIN_ENTER_LOCKED();
    return end_capture(hStream, false, phGraph);
}

STANDIN_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
    STANDIN_ENTER_LOCKED();
    return end_capture(hStream, true, phGraph);
}

STANDIN_EXPORT CUresult cuThreadExchangeStreamCaptureMode(int* mode) {
    STANDIN_ENTER();
    if (mode == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    std::swap(*mode, t_capture_mode);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
    STANDIN_ENTER_LOCKED();
    Context* ctx = current_context();
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (phEvent == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    auto* e = new Event{ctx, Flags, nullptr};
    machine().events.insert(e);
    *phEvent = reinterpret_cast<CUevent>(e);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return event_record(hEvent, hStream, false);
}

STANDIN_EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return event_record(hEvent, hStream, true);
}

STANDIN_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream,
                                               unsigned int flags) {
    STANDIN_ENTER_LOCKED();
    (void)flags;
    return event_record(hEvent, hStream, false);
}

STANDIN_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                                    unsigned int flags) {
    STANDIN_ENTER_LOCKED();
    (void)flags;
    return event_record(hEvent, hStream, true);
}

STANDIN_EXPORT CUresult cuEventQuery(CUevent hEvent) {
    STANDIN_ENTER_LOCKED();
    auto* e = reinterpret_cast<Event*>(hEvent);
    if (machine().events.count(e) == 0) {
        return kInvalidHandle;
    }
    return e->recorded && !standin::compute::idle(e->recorded) ? kNotReady : CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
    STANDIN_ENTER();
    if (!g_initialized.load(std::memory_order_acquire)) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    standin::compute::WorkerPtr worker;
    {
        std::lock_guard lock(g_mutex);
        auto* e = reinterpret_cast<Event*>(hEvent);
        if (machine().events.count(e) == 0) {
            return kInvalidHandle;
        }
        worker = e->recorded;
    }
    if (worker) {
        standin::compute::synchronize(worker);
    }
    std::lock_guard lock(g_mutex);
    synchronize_pools();
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuEventDestroy(CUevent hEvent) {
    STANDIN_ENTER_LOCKED();
    auto* e = reinterpret_cast<Event*>(hEvent);
    if (machine().events.erase(e) == 0) {
        return kInvalidHandle;
    }
    delete e;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) {
    STANDIN_ENTER_LOCKED();
    auto* e = reinterpret_cast<Event*>(hEvent);
    if (machine().events.erase(e) == 0) {
        return kInvalidHandle;
    }
    delete e;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
    STANDIN_ENTER_LOCKED();
    if (pMilliseconds == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (machine().events.count(reinterpret_cast<Event*>(hStart)) == 0 ||
        machine().events.count(reinterpret_cast<Event*>(hEnd)) == 0) {
        return kInvalidHandle;
    }
    *pMilliseconds = 0.0F;
    return CUDA_SUCCESS;
}

// ---- Graphs ----------------------------------------------------------------------
//
// A graph holds the kernels captured into it (cuStreamBeginCapture ..
// cuStreamEndCapture); a launch runs them in order on the stream, or records
// them into the stream's capture. Graph memory is what the test's setter says.

namespace {
CUresult graph_instantiate(CUgraphExec* phGraphExec, CUgraph hGraph) {
    if (phGraphExec == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (machine().graphs.count(hGraph) == 0) {
        return kInvalidHandle;
    }
    auto* exec = new GraphExec{
        std::make_shared<const std::vector<uint64_t>>(reinterpret_cast<Graph*>(hGraph)->kernels)};
    machine().graph_execs.insert(exec);
    *phGraphExec = reinterpret_cast<CUgraphExec>(exec);
    return CUDA_SUCCESS;
}

CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream, bool ptsz) {
    standin::compute::Kernels kernels;
    {
        std::lock_guard lock(g_mutex);
        if (machine().graph_execs.count(hGraphExec) == 0) {
            return kInvalidHandle;
        }
        kernels = reinterpret_cast<GraphExec*>(hGraphExec)->kernels;
    }
    return submit(hStream, ptsz, 0, kernels);
}

CUresult graph_upload(CUgraphExec hGraphExec, CUstream hStream, bool ptsz) {
    if (machine().graph_execs.count(hGraphExec) == 0) {
        return kInvalidHandle;
    }
    StreamSlots slots;
    return stream_slots(hStream, ptsz, &slots);
}
} // namespace

STANDIN_EXPORT CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
    STANDIN_ENTER_LOCKED();
    if (phGraph == nullptr || flags != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    auto* g = new Graph;
    machine().graphs.insert(g);
    *phGraph = reinterpret_cast<CUgraph>(g);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
    STANDIN_ENTER_LOCKED();
    if (machine().graphs.erase(hGraph) == 0) {
        return kInvalidHandle;
    }
    delete reinterpret_cast<Graph*>(hGraph);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                    unsigned long long flags) {
    STANDIN_ENTER_LOCKED();
    (void)flags;
    return graph_instantiate(phGraphExec, hGraph);
}

STANDIN_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                     CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
    STANDIN_ENTER_LOCKED();
    const CUresult r = graph_instantiate(phGraphExec, hGraph);
    if (params != nullptr) {
        params->hErrNode_out = nullptr;
        params->result_out = r == CUDA_SUCCESS ? 0 : 1; // CUDA_GRAPH_INSTANTIATE_SUCCESS / ERROR
    }
    return r;
}

STANDIN_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                          CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
    STANDIN_ENTER_LOCKED();
    const CUresult r = graph_instantiate(phGraphExec, hGraph);
    if (params != nullptr) {
        params->hErrNode_out = nullptr;
        params->result_out = r == CUDA_SUCCESS ? 0 : 1;
    }
    return r;
}

STANDIN_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph,
                                              CUgraphNode* phErrorNode, char* logBuffer,
                                              size_t bufferSize) {
    STANDIN_ENTER_LOCKED();
    if (phErrorNode != nullptr) {
        *phErrorNode = nullptr;
    }
    if (logBuffer != nullptr && bufferSize > 0) {
        logBuffer[0] = '\0';
    }
    return graph_instantiate(phGraphExec, hGraph);
}

STANDIN_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
    STANDIN_ENTER_LOCKED();
    if (machine().graph_execs.erase(hGraphExec) == 0) {
        return kInvalidHandle;
    }
    delete reinterpret_cast<GraphExec*>(hGraphExec);
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    STANDIN_ENTER();
    if (!g_initialized.load(std::memory_order_acquire)) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return graph_launch(hGraphExec, hStream, false);
}

STANDIN_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    STANDIN_ENTER();
    if (!g_initialized.load(std::memory_order_acquire)) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return graph_launch(hGraphExec, hStream, true);
}

STANDIN_EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return graph_upload(hGraphExec, hStream, false);
}

STANDIN_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    STANDIN_ENTER_LOCKED();
    return graph_upload(hGraphExec, hStream, true);
}

// The reserve is what gpulimit_standin_set_graph_reserved set: a trim keeps
// it, as graph memory still mapped by a live graph is not trimmed.
STANDIN_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
    STANDIN_ENTER_LOCKED();
    return valid_device(device) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

STANDIN_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device, int attr, void* value) {
    STANDIN_ENTER_LOCKED();
    if (!valid_device(device)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    if (value == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    const DeviceState& d = machine().devices[static_cast<size_t>(device)];
    uint64_t v = 0;
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
        v = d.graph_reserved;
        break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
        v = d.graph_used_high;
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
        v = d.graph_reserved_high;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    *static_cast<cuuint64_t*>(value) = v;
    return CUDA_SUCCESS;
}

STANDIN_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice device, int attr, void* value) {
    STANDIN_ENTER_LOCKED();
    if (!valid_device(device)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    if (value == nullptr || *static_cast<cuuint64_t*>(value) != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    DeviceState& d = machine().devices[static_cast<size_t>(device)];
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) {
        d.graph_used_high = d.graph_reserved;
    } else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) {
        d.graph_reserved_high = d.graph_reserved;
    } else {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

// ---- Private export tables ---------------------------------------------------------
//
// cudart 11.8 asks for five tables that only the real driver has, in this
// order, and gives up on any error (cudaGetDeviceCount then returns the
// driver's error code: 500, 801, 3, 1 and 999 were all tried); an entry
// point cuGetProcAddress does not find is fine until called. Each table but
// CONTEXT_LOCAL_STORAGE starts with its size in bytes; the slots cudart
// calls are filled, the others are null:
//   {6bd5fb6c-5bf4-e74a-8987-d93912fd9df9} CUDART_INTERFACE, 10 slots:
//       [2] the primary context of a device, [1]/[6]/[8] load fat binaries;
//   {a094798c-2e74-2e74-93f2-0800200c0a66} TOOLS_RUNTIME_CALLBACK_HOOKS,
//       7 slots: [2] and [6] hand cudart two buffers; if [6]'s is smaller
//       than cudart wants, init fails with cudaErrorInsufficientDriver (35);
//   {42d85a81-23f6-cb47-8298-f6e78a3aecdc} TOOLS_TLS, size only;
//   {c693336e-1121-df11-a8c3-68f355d89593} CONTEXT_LOCAL_STORAGE: cudart's
//       per-context state, put [0], delete [1], get [2];
//   {d4082055-bde6-704b-8d34-ba123c66e1f2} INTEGRITY_CHECK: see below.
// Any other table: CUDA_ERROR_NOT_SUPPORTED.

namespace {
// The first slot of a table holds the table's size in bytes, not a pointer.
const void* size_slot(size_t slots) {
    const uintptr_t bytes = sizeof(void*) * slots;
    return reinterpret_cast<const void*>(bytes); // NOLINT(performance-no-int-to-ptr)
}

// Slot 2: the primary context of a device, which cudart makes current.
CUresult cudart_primary_context(CUcontext* pctx, CUdevice dev) {
    trace("export table CUDART_INTERFACE[2](dev %d)", dev);
    std::lock_guard lock(g_mutex);
    if (pctx == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *pctx = reinterpret_cast<CUcontext>(&machine().devices[static_cast<size_t>(dev)].primary);
    return CUDA_SUCCESS;
}

// Slots 1, 6 and 8 load the fat binaries cudart registers: there is no code
// to load, so each gives a module handle that launches ignore.
CUresult cudart_module_from_fatbin(CUmodule* module, const void* a, void* b, void* c, unsigned d) {
    (void)a, (void)b, (void)c, (void)d;
    trace("export table CUDART_INTERFACE: module from fat binary");
    if (module == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    std::lock_guard lock(g_mutex);
    auto* m = new char;
    machine().modules.insert(m);
    *module = reinterpret_cast<CUmodule>(m);
    return CUDA_SUCCESS;
}

CUresult cudart_module_from_fatbin_ext2(const void* fatbin, CUmodule* module, void* b, void* c,
                                        unsigned d) {
    return cudart_module_from_fatbin(module, fatbin, b, c, d);
}

CUresult cudart_slot7(uintptr_t) {
    trace("export table CUDART_INTERFACE[7]");
    return CUDA_SUCCESS;
}

uintptr_t g_hooks_space2[1024];
unsigned char g_hooks_space6[64];

void tools_hooks_slot2(void** space, size_t* size) {
    trace("export table TOOLS_RUNTIME_CALLBACK_HOOKS[2]");
    *space = g_hooks_space2;
    *size = std::size(g_hooks_space2);
}

void tools_hooks_slot6(void** space, size_t* size) {
    trace("export table TOOLS_RUNTIME_CALLBACK_HOOKS[6]");
    *space = g_hooks_space6;
    *size = std::size(g_hooks_space6);
}

const void* const kCudartInterface[10] = {
    size_slot(10),
    reinterpret_cast<const void*>(&cudart_module_from_fatbin),
    reinterpret_cast<const void*>(&cudart_primary_context),
    nullptr,
    nullptr,
    nullptr,
    reinterpret_cast<const void*>(&cudart_module_from_fatbin),
    reinterpret_cast<const void*>(&cudart_slot7),
    reinterpret_cast<const void*>(&cudart_module_from_fatbin_ext2),
    nullptr,
};

const void* const kToolsRuntimeCallbackHooks[7] = {
    size_slot(7), nullptr, reinterpret_cast<const void*>(&tools_hooks_slot2), nullptr,
    nullptr,      nullptr, reinterpret_cast<const void*>(&tools_hooks_slot6),
};

// INTEGRITY_CHECK: cudart 11.8 calls slot 1 with versions 11080, 11081 and
// 11082 and stops with cudaErrorIntegrityCheckFailed (103) unless each answer
// is what it computes itself. For a version ending in 0 or 1 the answer is a
// constant; for the others it is HMAC-MD2 (RFC 1319 MD2, RFC 2104 HMAC with
// MD2's 16-byte block) under a fixed 16-byte key, of: driver version, the
// version asked, pid, thread id (low 32 bits of pthread_self), the addresses
// of the CUDART_INTERFACE table, of this table and of this function, the
// seconds cudart passed, then for each device its UUID and PCI domain, bus
// and device numbers. (Public reverse-engineering by the ZLUDA project; the
// code here is our own.)
class Md2 {
  public:
    void update(const void* data, size_t size) {
        const auto* bytes = static_cast<const unsigned char*>(data);
        for (size_t i = 0; i < size; ++i) {
            add(bytes[i]);
        }
    }
    void digest(unsigned char out[16]) {
        const auto pad = static_cast<unsigned char>(16 - used_);
        for (unsigned i = 0; i < pad; ++i) {
            add(pad);
        }
        unsigned char checksum[16];
        std::memcpy(checksum, checksum_, 16);
        update(checksum, 16);
        std::memcpy(out, state_, 16);
    }

  private:
    // RFC 1319's substitution table (a permutation derived from the digits of pi).
    static constexpr unsigned char kS[256] = {
        41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,  98,  167,
        5,   243, 192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,  155, 87,  60,
        253, 212, 224, 22,  103, 66,  111, 24,  138, 23,  229, 18,  190, 78,  196, 214, 218, 158,
        222, 73,  160, 251, 245, 142, 187, 47,  238, 122, 169, 104, 121, 145, 21,  178, 7,   63,
        148, 194, 16,  137, 11,  34,  95,  33,  128, 127, 93,  154, 90,  144, 50,  39,  53,  62,
        204, 231, 191, 247, 151, 3,   255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,
        172, 86,  170, 198, 79,  184, 56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116,
        4,   241, 69,  157, 112, 89,  100, 113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,
        27,  96,  37,  173, 174, 176, 185, 246, 28,  70,  97,  105, 52,  64,  126, 15,  85,  71,
        163, 35,  221, 81,  175, 58,  195, 92,  249, 206, 186, 197, 234, 38,  44,  83,  13,  110,
        133, 40,  132, 9,   211, 223, 205, 244, 65,  129, 77,  82,  106, 220, 55,  200, 108, 193,
        171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120, 136, 149, 139, 227, 99,  232, 109,
        233, 203, 213, 254, 59,  0,   29,  57,  242, 239, 183, 14,  102, 88,  208, 228, 166, 119,
        114, 248, 235, 117, 75,  10,  49,  68,  80,  180, 143, 237, 31,  26,  219, 153, 141, 51,
        159, 17,  131, 20,
    };

    void add(unsigned char byte) {
        block_[used_] = byte;
        last_ = checksum_[used_] ^= kS[byte ^ last_];
        if (++used_ < 16) {
            return;
        }
        used_ = 0;
        unsigned char x[48];
        std::memcpy(x, state_, 16);
        std::memcpy(x + 16, block_, 16);
        for (int i = 0; i < 16; ++i) {
            x[32 + i] = static_cast<unsigned char>(state_[i] ^ block_[i]);
        }
        unsigned t = 0;
        for (unsigned round = 0; round < 18; ++round) {
            for (unsigned char& b : x) {
                t = b ^= kS[t];
            }
            t = (t + round) & 0xff;
        }
        std::memcpy(state_, x, 16);
    }

    unsigned char state_[16] = {};
    unsigned char block_[16] = {};
    unsigned char checksum_[16] = {};
    unsigned char last_ = 0;
    unsigned used_ = 0;
};

void hmac_md2(const unsigned char key[16], const void* message, size_t size,
              unsigned char out[16]) {
    unsigned char pad[16];
    unsigned char inner[16];
    Md2 h;
    for (int i = 0; i < 16; ++i) {
        pad[i] = static_cast<unsigned char>(key[i] ^ 0x36);
    }
    h.update(pad, 16);
    h.update(message, size);
    h.digest(inner);
    Md2 outer;
    for (int i = 0; i < 16; ++i) {
        pad[i] = static_cast<unsigned char>(key[i] ^ 0x5c);
    }
    outer.update(pad, 16);
    outer.update(inner, 16);
    outer.digest(out);
}

struct IntegrityInput {
    uint32_t driver_version;
    uint32_t version;
    uint32_t process;
    uint32_t thread;
    const void* cudart_table;
    const void* integrity_table;
    const void* function;
    uint64_t unix_seconds;
};
struct IntegrityDevice {
    unsigned char uuid[16];
    int32_t pci_domain;
    int32_t pci_bus;
    int32_t pci_device;
};
static_assert(sizeof(IntegrityInput) == 48 && sizeof(IntegrityDevice) == 28);

extern const void* const kIntegrityTable[3];

CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t result[2]);
CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t result[2]) {
    trace("export table INTEGRITY_CHECK[1](version %u)", version);
    if (result == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (version % 10 == 0 || version % 10 == 1) {
        result[0] = version % 10 == 0 ? 0x3341181C03CB675CULL : 0x1841181C03CB675CULL;
        result[1] = 0x8ED383AA1F4CD1E8ULL;
        return CUDA_SUCCESS;
    }
    static constexpr unsigned char kKey[16] = {0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52,
                                               0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F};
    std::vector<unsigned char> message(sizeof(IntegrityInput));
    const pthread_t self = pthread_self();
    uintptr_t thread_bits = 0;
    std::memcpy(&thread_bits, &self, std::min(sizeof self, sizeof thread_bits));
    const IntegrityInput input{static_cast<uint32_t>(reported_driver_version()),
                               version,
                               static_cast<uint32_t>(getpid()),
                               static_cast<uint32_t>(thread_bits),
                               kCudartInterface,
                               kIntegrityTable,
                               reinterpret_cast<const void*>(&integrity_check),
                               unix_seconds};
    std::memcpy(message.data(), &input, sizeof input);
    {
        std::lock_guard lock(g_mutex);
        for (const DeviceState& d : machine().devices) {
            IntegrityDevice dev{};
            std::memcpy(dev.uuid, d.info.uuid_bytes, 16);
            dev.pci_domain = static_cast<int32_t>(d.info.pci_domain);
            dev.pci_bus = static_cast<int32_t>(d.info.pci_bus);
            dev.pci_device = static_cast<int32_t>(d.info.pci_device);
            const auto* bytes = reinterpret_cast<const unsigned char*>(&dev);
            message.insert(message.end(), bytes, bytes + sizeof dev);
        }
    }
    unsigned char digest[16];
    hmac_md2(kKey, message.data(), message.size(), digest);
    std::memcpy(result, digest, 16);
    return CUDA_SUCCESS;
}

const void* const kIntegrityTable[3] = {size_slot(3),
                                        reinterpret_cast<const void*>(&integrity_check), nullptr};

constexpr unsigned char kIntegrityId[16] = {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
                                            0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2};

// Asked for once the hooks are set up; no slot of it is called.
const void* const kToolsTls[4] = {size_slot(4), nullptr, nullptr, nullptr};

// CONTEXT_LOCAL_STORAGE_INTERFACE_V0301: where cudart keeps its state for
// each context. The table has no size slot. A null context is the current one.
Context* storage_context(CUcontext handle) {
    auto* ctx = handle != nullptr ? reinterpret_cast<Context*>(handle) : current_context();
    return valid_context(ctx) ? ctx : nullptr;
}

CUresult storage_insert(CUcontext handle, void* manager, void* value, void* destroy_callback) {
    (void)destroy_callback; // contexts are never destroyed under cudart here
    std::lock_guard lock(g_mutex);
    Context* ctx = storage_context(handle);
    trace("export table CONTEXT_LOCAL_STORAGE[0](ctx %p, key %p)", static_cast<void*>(ctx),
          manager);
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    ctx->local_storage[manager] = value;
    return CUDA_SUCCESS;
}

CUresult storage_remove(CUcontext handle, void* manager) {
    std::lock_guard lock(g_mutex);
    Context* ctx = storage_context(handle);
    trace("export table CONTEXT_LOCAL_STORAGE[1](ctx %p, key %p)", static_cast<void*>(ctx),
          manager);
    if (ctx != nullptr) {
        ctx->local_storage.erase(manager);
    }
    return CUDA_SUCCESS;
}

CUresult storage_get(void** value, CUcontext handle, void* manager) {
    std::lock_guard lock(g_mutex);
    Context* ctx = storage_context(handle);
    trace("export table CONTEXT_LOCAL_STORAGE[2](ctx %p, key %p)", static_cast<void*>(ctx),
          manager);
    if (ctx == nullptr) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    auto it = ctx->local_storage.find(manager);
    if (value == nullptr || it == ctx->local_storage.end()) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *value = it->second;
    return CUDA_SUCCESS;
}

const void* const kContextLocalStorage[4] = {
    reinterpret_cast<const void*>(&storage_insert),
    reinterpret_cast<const void*>(&storage_remove),
    reinterpret_cast<const void*>(&storage_get),
    nullptr,
};

constexpr unsigned char kContextLocalStorageId[16] = {
    0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93};
constexpr unsigned char kToolsTlsId[16] = {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47,
                                           0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc};
constexpr unsigned char kCudartInterfaceId[16] = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                                  0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
constexpr unsigned char kToolsHooksId[16] = {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74,
                                             0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66};
} // namespace

STANDIN_EXPORT CUresult cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
    STANDIN_ENTER();
    if (ppExportTable == nullptr || pExportTableId == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    char hex[33];
    for (size_t i = 0; i < 16; ++i) {
        std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(pExportTableId->bytes[i]));
    }
    if (std::memcmp(pExportTableId->bytes, kCudartInterfaceId, 16) == 0) {
        trace("cuGetExportTable(%s): CUDART_INTERFACE", hex);
        *ppExportTable = kCudartInterface;
        return CUDA_SUCCESS;
    }
    if (std::memcmp(pExportTableId->bytes, kToolsHooksId, 16) == 0) {
        trace("cuGetExportTable(%s): TOOLS_RUNTIME_CALLBACK_HOOKS", hex);
        *ppExportTable = kToolsRuntimeCallbackHooks;
        return CUDA_SUCCESS;
    }
    if (std::memcmp(pExportTableId->bytes, kToolsTlsId, 16) == 0) {
        trace("cuGetExportTable(%s): TOOLS_TLS", hex);
        *ppExportTable = kToolsTls;
        return CUDA_SUCCESS;
    }
    if (std::memcmp(pExportTableId->bytes, kContextLocalStorageId, 16) == 0) {
        trace("cuGetExportTable(%s): CONTEXT_LOCAL_STORAGE_INTERFACE_V0301", hex);
        *ppExportTable = kContextLocalStorage;
        return CUDA_SUCCESS;
    }
    if (std::memcmp(pExportTableId->bytes, kIntegrityId, 16) == 0) {
        trace("cuGetExportTable(%s): INTEGRITY_CHECK", hex);
        *ppExportTable = kIntegrityTable;
        return CUDA_SUCCESS;
    }
    trace("cuGetExportTable(%s): not supported", hex);
    *ppExportTable = nullptr;
    return 999;
}

// ---- cuGetProcAddress ----------------------------------------------------------------
//
// One row per exported variant: the name a caller asks for (cuda.h's name
// without version suffix), the CUDA version (1000 * major + 10 * minor)
// that introduced this variant, whether it is the per-thread-default-stream
// variant, and the function. For a request (name, cudaVersion, flags) the
// answer is the newest row not newer than cudaVersion, among the
// per-thread rows when flags has CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
// and the name has one, else among the others. Names as real drivers do:
//   cuMemAlloc:   < 3020 -> cuMemAlloc (32-bit v1),    >= 3020 -> cuMemAlloc_v2
//   cuCtxCreate:  < 3020 -> cuCtxCreate, 3020..12999 -> cuCtxCreate_v2 (the
//                 name cuda.h 3.2-12.x maps cuCtxCreate to; _v3 is reached by
//                 its own name with dlsym only), >= 13000 -> cuCtxCreate_v4
//                 (CUDA 13's cuda.h maps cuCtxCreate to it)
//   cuGetProcAddress: < 12000 -> cuGetProcAddress, >= 12000 -> _v2
//   cuGraphInstantiate: 11000 -> _v2, also at 12000 and later, where cuda.h's
//                 macro maps the name to cuGraphInstantiateWithFlags: the
//                 driver does not (the 10000 variant is not simulated)
//   cuDeviceGetUuid: 9020 -> cuDeviceGetUuid, >= 11040 -> _v2
// A name with no row: CUDA_ERROR_NOT_FOUND and SYMBOL_NOT_FOUND; a name whose
// rows are all newer than cudaVersion: CUDA_ERROR_NOT_FOUND and
// VERSION_NOT_SUFFICIENT. Flags 0 (DEFAULT) give the legacy variants, as
// LEGACY_STREAM does. The rows of the symbols libgpulimit hooks were checked
// against the PFN_<name>_v<version>[_ptsz] typedefs of CUDA 12.6.3's
// cudaTypedefs.h (github.com/zspace/system.cuda-12.6, include/cudaTypedefs.h,
// commit b3d92c837713411301ae5df45b0c7758df7d931e) and against a real
// driver's answers (H100, driver 580.159.04: each of them at cudaVersion
// 3020 to 13000, flags 0, 1 and 2); the other rows were not.
//
// GPULIMIT_STANDIN_INTERNAL_PROCS=1: every successful answer is an internal
// pointer instead of the export: a function of this library that is not
// exported (a different address from dlsym's) and calls the exported one, so
// calls still count under the ABI name. A real driver has not been seen to do
// this (driver 580 answers with its exports), but nothing promises it does
// not: libgpulimit must cap such callers too (tests/limiter).
// GPULIMIT_STANDIN_INTERNAL_PROCS=global: every answer is what the program's
// global scope binds the ABI name to, as from a driver whose table of
// functions goes through its own GOT: with libgpulimit.so preloaded, its
// exports. libgpulimit must not wrap those a second time.

STANDIN_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                         cuuint64_t flags);
STANDIN_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                            cuuint64_t flags,
                                            CUdriverProcAddressQueryResult* symbolStatus);

namespace {
struct Proc {
    const char* name;
    int version;
    bool per_thread;
    void* fn;
    void* internal; // the same function at an address dlsym does not give
    const char* abi_name;
};

// A second entry to an exported function: hidden, so not a symbol, and a
// function of its own, so another address.
template <auto Function, typename = decltype(Function)>
struct Internal;
template <auto Function, typename Result, typename... Args>
struct Internal<Function, Result (*)(Args...)> {
    static Result call(Args... args) { return Function(args...); }
};

template <auto Function>
Proc row(const char* name, int version, bool per_thread, const char* abi_name) {
    return {name,
            version,
            per_thread,
            reinterpret_cast<void*>(Function),
            reinterpret_cast<void*>(&Internal<Function>::call),
            abi_name};
}

// NOLINTBEGIN(bugprone-macro-parentheses): stringized names and &function
#define ROW(name, version, abi) row<&abi>(#name, version, false, #abi)
#define PTROW(name, version, abi) row<&abi>(#name, version, true, #abi)

const Proc kProcs[] = {
    ROW(cuGetProcAddress, 11030, cuGetProcAddress),
    ROW(cuGetProcAddress, 12000, cuGetProcAddress_v2),
    ROW(cuInit, 2000, cuInit),
    ROW(cuDriverGetVersion, 2020, cuDriverGetVersion),
    ROW(cuGetExportTable, 3000, cuGetExportTable),
    ROW(cuGetErrorString, 6000, cuGetErrorString),
    ROW(cuGetErrorName, 6000, cuGetErrorName),
    ROW(cuDeviceGet, 2000, cuDeviceGet),
    ROW(cuDeviceGetCount, 2000, cuDeviceGetCount),
    ROW(cuDeviceGetName, 2000, cuDeviceGetName),
    ROW(cuDeviceTotalMem, 2000, cuDeviceTotalMem),
    ROW(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2),
    ROW(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute),
    ROW(cuDeviceComputeCapability, 2000, cuDeviceComputeCapability),
    ROW(cuDeviceGetUuid, 9020, cuDeviceGetUuid),
    ROW(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2),
    ROW(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId),
    ROW(cuDeviceGetByPCIBusId, 4010, cuDeviceGetByPCIBusId),
    ROW(cuDeviceGetP2PAttribute, 8000, cuDeviceGetP2PAttribute),
    ROW(cuDeviceCanAccessPeer, 4000, cuDeviceCanAccessPeer),
    ROW(cuDeviceGetTexture1DLinearMaxWidth, 11010, cuDeviceGetTexture1DLinearMaxWidth),
    ROW(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool),
    ROW(cuDeviceGetMemPool, 11020, cuDeviceGetMemPool),
    ROW(cuDeviceSetMemPool, 11020, cuDeviceSetMemPool),
    ROW(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain),
    ROW(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease),
    ROW(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2),
    ROW(cuDevicePrimaryCtxSetFlags, 7000, cuDevicePrimaryCtxSetFlags),
    ROW(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2),
    ROW(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState),
    ROW(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset),
    ROW(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2),
    ROW(cuCtxCreate, 2000, cuCtxCreate),
    ROW(cuCtxCreate, 3020, cuCtxCreate_v2),
    ROW(cuCtxCreate, 13000, cuCtxCreate_v4),
    ROW(cuCtxDestroy, 2000, cuCtxDestroy),
    ROW(cuCtxDestroy, 4000, cuCtxDestroy_v2),
    ROW(cuCtxGetCurrent, 4000, cuCtxGetCurrent),
    ROW(cuCtxSetCurrent, 4000, cuCtxSetCurrent),
    ROW(cuCtxPushCurrent, 2000, cuCtxPushCurrent),
    ROW(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2),
    ROW(cuCtxPopCurrent, 2000, cuCtxPopCurrent),
    ROW(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2),
    ROW(cuCtxGetDevice, 2000, cuCtxGetDevice),
    ROW(cuCtxGetFlags, 7000, cuCtxGetFlags),
    ROW(cuCtxGetApiVersion, 3020, cuCtxGetApiVersion),
    ROW(cuCtxSynchronize, 2000, cuCtxSynchronize),
    ROW(cuCtxGetLimit, 3010, cuCtxGetLimit),
    ROW(cuCtxSetLimit, 3010, cuCtxSetLimit),
    ROW(cuCtxGetCacheConfig, 3020, cuCtxGetCacheConfig),
    ROW(cuCtxSetCacheConfig, 3020, cuCtxSetCacheConfig),
    ROW(cuCtxGetSharedMemConfig, 4020, cuCtxGetSharedMemConfig),
    ROW(cuCtxSetSharedMemConfig, 4020, cuCtxSetSharedMemConfig),
    ROW(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange),
    ROW(cuCtxResetPersistingL2Cache, 11000, cuCtxResetPersistingL2Cache),
    ROW(cuModuleGetLoadingMode, 11070, cuModuleGetLoadingMode),
    ROW(cuModuleLoadData, 2000, cuModuleLoadData),
    ROW(cuModuleUnload, 2000, cuModuleUnload),
    ROW(cuModuleGetFunction, 2000, cuModuleGetFunction),
    ROW(cuFuncGetAttribute, 2020, cuFuncGetAttribute),
    ROW(cuFuncSetAttribute, 9000, cuFuncSetAttribute),
    ROW(cuFuncSetCacheConfig, 3000, cuFuncSetCacheConfig),
    ROW(cuLaunchKernel, 4000, cuLaunchKernel),
    PTROW(cuLaunchKernel, 7000, cuLaunchKernel_ptsz),
    ROW(cuLaunchKernelEx, 11060, cuLaunchKernelEx),
    PTROW(cuLaunchKernelEx, 11060, cuLaunchKernelEx_ptsz),
    ROW(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel),
    PTROW(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel_ptsz),
    ROW(cuLaunchHostFunc, 10000, cuLaunchHostFunc),
    PTROW(cuLaunchHostFunc, 10000, cuLaunchHostFunc_ptsz),
    ROW(cuMemGetInfo, 2000, cuMemGetInfo),
    ROW(cuMemGetInfo, 3020, cuMemGetInfo_v2),
    ROW(cuMemAlloc, 2000, cuMemAlloc),
    ROW(cuMemAlloc, 3020, cuMemAlloc_v2),
    ROW(cuMemAllocPitch, 2000, cuMemAllocPitch),
    ROW(cuMemAllocPitch, 3020, cuMemAllocPitch_v2),
    ROW(cuMemFree, 2000, cuMemFree),
    ROW(cuMemFree, 3020, cuMemFree_v2),
    ROW(cuMemAllocManaged, 6000, cuMemAllocManaged),
    ROW(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2),
    ROW(cuMemHostAlloc, 2020, cuMemHostAlloc),
    ROW(cuMemFreeHost, 2000, cuMemFreeHost),
    ROW(cuMemHostRegister, 6050, cuMemHostRegister_v2),
    ROW(cuMemHostUnregister, 4000, cuMemHostUnregister),
    ROW(cuMemAllocAsync, 11020, cuMemAllocAsync),
    PTROW(cuMemAllocAsync, 11020, cuMemAllocAsync_ptsz),
    ROW(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync),
    PTROW(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync_ptsz),
    ROW(cuMemFreeAsync, 11020, cuMemFreeAsync),
    PTROW(cuMemFreeAsync, 11020, cuMemFreeAsync_ptsz),
    ROW(cuMemPoolCreate, 11020, cuMemPoolCreate),
    ROW(cuMemPoolDestroy, 11020, cuMemPoolDestroy),
    ROW(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo),
    ROW(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute),
    ROW(cuMemPoolSetAttribute, 11020, cuMemPoolSetAttribute),
    ROW(cuMemPoolSetAccess, 11020, cuMemPoolSetAccess),
    ROW(cuMemPoolGetAccess, 11020, cuMemPoolGetAccess),
    ROW(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity),
    ROW(cuMemCreate, 10020, cuMemCreate),
    ROW(cuMemRelease, 10020, cuMemRelease),
    ROW(cuMemGetAllocationPropertiesFromHandle, 10020, cuMemGetAllocationPropertiesFromHandle),
    ROW(cuMemAddressReserve, 10020, cuMemAddressReserve),
    ROW(cuMemAddressFree, 10020, cuMemAddressFree),
    ROW(cuMemMap, 10020, cuMemMap),
    ROW(cuMemUnmap, 10020, cuMemUnmap),
    ROW(cuMemSetAccess, 10020, cuMemSetAccess),
    ROW(cuArrayCreate, 3020, cuArrayCreate_v2),
    ROW(cuArray3DCreate, 3020, cuArray3DCreate_v2),
    ROW(cuArrayDestroy, 2000, cuArrayDestroy),
    ROW(cuArrayGetDescriptor, 3020, cuArrayGetDescriptor_v2),
    ROW(cuArray3DGetDescriptor, 3020, cuArray3DGetDescriptor_v2),
    ROW(cuMipmappedArrayCreate, 5000, cuMipmappedArrayCreate),
    ROW(cuMipmappedArrayGetLevel, 5000, cuMipmappedArrayGetLevel),
    ROW(cuMipmappedArrayDestroy, 5000, cuMipmappedArrayDestroy),
    ROW(cuArrayGetMemoryRequirements, 11060, cuArrayGetMemoryRequirements),
    ROW(cuMipmappedArrayGetMemoryRequirements, 11060, cuMipmappedArrayGetMemoryRequirements),
    ROW(cuStreamCreate, 2000, cuStreamCreate),
    ROW(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority),
    ROW(cuStreamDestroy, 2000, cuStreamDestroy),
    ROW(cuStreamDestroy, 4000, cuStreamDestroy_v2),
    ROW(cuStreamSynchronize, 2000, cuStreamSynchronize),
    PTROW(cuStreamSynchronize, 7000, cuStreamSynchronize_ptsz),
    ROW(cuStreamQuery, 2000, cuStreamQuery),
    PTROW(cuStreamQuery, 7000, cuStreamQuery_ptsz),
    ROW(cuStreamGetCtx, 9020, cuStreamGetCtx),
    PTROW(cuStreamGetCtx, 9020, cuStreamGetCtx_ptsz),
    ROW(cuStreamGetFlags, 5050, cuStreamGetFlags),
    PTROW(cuStreamGetFlags, 7000, cuStreamGetFlags_ptsz),
    ROW(cuStreamGetPriority, 5050, cuStreamGetPriority),
    PTROW(cuStreamGetPriority, 7000, cuStreamGetPriority_ptsz),
    ROW(cuStreamWaitEvent, 3020, cuStreamWaitEvent),
    PTROW(cuStreamWaitEvent, 7000, cuStreamWaitEvent_ptsz),
    ROW(cuStreamAddCallback, 5000, cuStreamAddCallback),
    PTROW(cuStreamAddCallback, 7000, cuStreamAddCallback_ptsz),
    ROW(cuStreamIsCapturing, 10000, cuStreamIsCapturing),
    PTROW(cuStreamIsCapturing, 10000, cuStreamIsCapturing_ptsz),
    ROW(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo),
    PTROW(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo_ptsz),
    ROW(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2),
    PTROW(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2_ptsz),
    ROW(cuStreamBeginCapture, 10000, cuStreamBeginCapture),
    PTROW(cuStreamBeginCapture, 10000, cuStreamBeginCapture_ptsz),
    ROW(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2),
    PTROW(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2_ptsz),
    ROW(cuStreamEndCapture, 10000, cuStreamEndCapture),
    PTROW(cuStreamEndCapture, 10000, cuStreamEndCapture_ptsz),
    ROW(cuThreadExchangeStreamCaptureMode, 10010, cuThreadExchangeStreamCaptureMode),
    ROW(cuEventCreate, 2000, cuEventCreate),
    ROW(cuEventRecord, 2000, cuEventRecord),
    PTROW(cuEventRecord, 7000, cuEventRecord_ptsz),
    ROW(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags),
    PTROW(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags_ptsz),
    ROW(cuEventQuery, 2000, cuEventQuery),
    ROW(cuEventSynchronize, 2000, cuEventSynchronize),
    ROW(cuEventDestroy, 2000, cuEventDestroy),
    ROW(cuEventDestroy, 4000, cuEventDestroy_v2),
    ROW(cuEventElapsedTime, 2000, cuEventElapsedTime),
    ROW(cuGraphCreate, 10000, cuGraphCreate),
    ROW(cuGraphDestroy, 10000, cuGraphDestroy),
    ROW(cuGraphInstantiate, 11000, cuGraphInstantiate_v2),
    ROW(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags),
    ROW(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams),
    PTROW(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams_ptsz),
    ROW(cuGraphExecDestroy, 10000, cuGraphExecDestroy),
    ROW(cuGraphLaunch, 10000, cuGraphLaunch),
    PTROW(cuGraphLaunch, 10000, cuGraphLaunch_ptsz),
    ROW(cuGraphUpload, 11010, cuGraphUpload),
    PTROW(cuGraphUpload, 11010, cuGraphUpload_ptsz),
    ROW(cuDeviceGraphMemTrim, 11040, cuDeviceGraphMemTrim),
    ROW(cuDeviceGetGraphMemAttribute, 11040, cuDeviceGetGraphMemAttribute),
    ROW(cuDeviceSetGraphMemAttribute, 11040, cuDeviceSetGraphMemAttribute),
};

#undef ROW
#undef PTROW
// NOLINTEND(bugprone-macro-parentheses)

enum class Answers { exports, internal, global };

// Read at every request, so that a test may switch it in-process.
Answers answers() {
    const char* v = std::getenv("GPULIMIT_STANDIN_INTERNAL_PROCS");
    if (v != nullptr && std::strcmp(v, "1") == 0) {
        return Answers::internal;
    }
    if (v != nullptr && std::strcmp(v, "global") == 0) {
        return Answers::global;
    }
    return Answers::exports;
}

// What the program's global scope binds the ABI name to (dlsym on the
// program's own handle: not RTLD_DEFAULT, which from this -Bsymbolic library
// would find this library first): an interposer's export when one is
// preloaded, else the export.
void* global_binding(const Proc& p) {
    void* program = dlopen(nullptr, RTLD_LAZY);
    void* bound = program != nullptr ? dlsym(program, p.abi_name) : nullptr;
    return bound != nullptr ? bound : p.fn;
}

CUresult get_proc_address(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
    if (status != nullptr) {
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    if (symbol == nullptr || pfn == nullptr ||
        flags >
            (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pfn = nullptr;
    const bool want_per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const Proc* best = nullptr;
    const Proc* best_per_thread = nullptr;
    bool known = false;
    for (const Proc& p : kProcs) {
        if (std::strcmp(p.name, symbol) != 0) {
            continue;
        }
        known = true;
        if (p.version > cudaVersion) {
            continue;
        }
        const Proc*& slot = p.per_thread ? best_per_thread : best;
        if (slot == nullptr || p.version > slot->version) {
            slot = &p;
        }
    }
    if (want_per_thread && best_per_thread != nullptr) {
        best = best_per_thread;
    }
    if (best == nullptr) {
        trace("cuGetProcAddress(%s, %d, %llu): %s", symbol, cudaVersion,
              static_cast<unsigned long long>(flags),
              known ? "version not sufficient" : "not found");
        if (status != nullptr && known) {
            *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        }
        return CUDA_ERROR_NOT_FOUND;
    }
    const Answers mode = answers();
    trace("cuGetProcAddress(%s, %d, %llu) -> %s%s", symbol, cudaVersion,
          static_cast<unsigned long long>(flags), best->abi_name,
          mode == Answers::internal ? " (internal)"
          : mode == Answers::global ? " (global binding)"
                                    : "");
    *pfn = mode == Answers::internal ? best->internal
           : mode == Answers::global ? global_binding(*best)
                                     : best->fn;
    if (status != nullptr) {
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    }
    return CUDA_SUCCESS;
}
} // namespace

STANDIN_EXPORT const char* gpulimit_standin_proc_name(const void* function) {
    for (const Proc& p : kProcs) {
        if (function != nullptr && (function == p.fn || function == p.internal)) {
            return p.abi_name;
        }
    }
    return nullptr;
}

STANDIN_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                         cuuint64_t flags) {
    STANDIN_ENTER();
    return get_proc_address(symbol, pfn, cudaVersion, flags, nullptr);
}

STANDIN_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                            cuuint64_t flags,
                                            CUdriverProcAddressQueryResult* symbolStatus) {
    STANDIN_ENTER();
    return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}
