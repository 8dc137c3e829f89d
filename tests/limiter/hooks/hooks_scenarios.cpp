// Allocation paths, reporting and OOM handling of libgpulimit.so, through
// direct calls to the driver API: this program binds to libcuda.so.1 (the
// stand-in) and runs with the interposer preloaded, so every cu* call below
// goes through the hooks first.
//
//   hooks_scenarios SCENARIO
//
// Each scenario sets its own variables (before the first driver call, which
// is when the library reads them), uses a fresh group state directory, and
// checks the interposer's figures against the stand-in's own count of what
// is in use. Exit 0: passed; 1: a check failed (the failing line is on
// stderr). Multi-process scenarios run this program again as their children.
#include "cuda_abi.hpp"
#include "gpuinit/nvml/nvml_h.hpp"
#include "standin_control.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern "C" {
// The driver entry points the scenarios call, by exported ABI name.
#define GPULIMIT_CUDA_HOOK(name, params, args) CUresult name params;
#define GPULIMIT_CUDA_REAL(name, params) CUresult name params;
#include "entry_points.def"
CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuStreamCreate(CUstream* stream, unsigned int flags);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void* value);
CUresult cuGraphCreate(CUgraph* graph, unsigned int flags);
CUresult cuGraphExecDestroy(CUgraphExec exec);
CUresult cuGraphDestroy(CUgraph graph);
}

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kGiB = 1ULL << 30;
constexpr uint64_t kReserved = 10 * kMiB; // ALIYUN_COM_GPU_MEM_RESERVED's default
// The stand-in's default machine: ordinal 0 (16 GiB, bus 3b) and ordinal 1
// (8 GiB, bus 1a): PCI order is 1, 0.
constexpr const char* kUuid0 = "GPU-11111111-2222-3333-4444-555555555555";
constexpr const char* kUuid1 = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa";

const char* g_self = nullptr;
int g_failures = 0;

#define CHECK(condition)                                                                           \
    do {                                                                                           \
        if (!(condition)) {                                                                        \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition);     \
            ++g_failures;                                                                          \
        }                                                                                          \
    } while (0)
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        const auto va_ = (a);                                                                      \
        const auto vb_ = (b);                                                                      \
        if (!(va_ == vb_)) {                                                                       \
            std::fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%llu vs %llu)\n", __FILE__,    \
                         __LINE__, #a, #b, static_cast<unsigned long long>(va_),                   \
                         static_cast<unsigned long long>(vb_));                                    \
            ++g_failures;                                                                          \
        }                                                                                          \
    } while (0)
#define REQUIRE_OK(call)                                                                           \
    do {                                                                                           \
        const CUresult r_ = (call);                                                                \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            std::fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, r_);        \
            std::exit(1);                                                                          \
        }                                                                                          \
    } while (0)

// A fresh group state directory, removed at exit by the process that made it.
std::string g_state_dir;
void remove_state_dir() {
    if (!g_state_dir.empty()) {
        std::error_code ignored;
        fs::remove_all(g_state_dir, ignored);
    }
}

void fresh_state_dir() {
    char pattern[] = "/tmp/gpulimit-hooks-XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
        std::perror("mkdtemp");
        std::exit(1);
    }
    g_state_dir = pattern;
    setenv("GPU_LIMIT_STATE_DIR", pattern, 1);
    std::atexit(remove_state_dir);
}

// Turns the limiter on with these variables (before the first driver call).
void enable(std::initializer_list<std::pair<const char*, const char*>> variables) {
    setenv("AMP_VGPU_ENABLE", "1", 1);
    for (const auto& [name, value] : variables) {
        setenv(name, value, 1);
    }
    if (getenv("GPU_LIMIT_STATE_DIR") == nullptr) {
        fresh_state_dir();
    }
}

unsigned long long standin_used(int ordinal) {
    return gpulimit_standin_device_used(ordinal);
}

CUcontext g_contexts[2] = {};

// cuInit and one context per device; the first device's is current.
void start() {
    REQUIRE_OK(cuInit(0));
    for (int ordinal = 0; ordinal < 2; ++ordinal) {
        CUdevice device = 0;
        REQUIRE_OK(cuDeviceGet(&device, ordinal));
        REQUIRE_OK(cuCtxCreate_v2(&g_contexts[ordinal], 0, device));
    }
    REQUIRE_OK(cuCtxSetCurrent(g_contexts[0]));
}

void use_device(int ordinal) {
    REQUIRE_OK(cuCtxSetCurrent(g_contexts[ordinal]));
}

struct Info {
    uint64_t free = 0;
    uint64_t total = 0;
    uint64_t used() const { return total - free; }
};

Info mem_info() {
    size_t free = 0;
    size_t total = 0;
    REQUIRE_OK(cuMemGetInfo_v2(&free, &total));
    return Info{free, total};
}

uint64_t device_total(int ordinal) {
    size_t bytes = 0;
    REQUIRE_OK(cuDeviceTotalMem_v2(&bytes, ordinal));
    return bytes;
}

// Runs this program with `scenario` and extra variables; returns the wait
// status and what it wrote on stderr.
struct Child {
    int status = 0;
    std::string err;
};

Child run_self(const std::string& scenario, const std::vector<std::string>& variables) {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) {
        std::exit(1);
    }
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(pipe_fds[1], STDERR_FILENO);
        close(pipe_fds[0]);
        close(pipe_fds[1]);
        for (const std::string& variable : variables) {
            putenv(const_cast<char*>(variable.c_str()));
        }
        execl(g_self, g_self, scenario.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    close(pipe_fds[1]);
    Child child;
    char buffer[4096];
    ssize_t n = 0;
    while ((n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0) {
        child.err.append(buffer, static_cast<size_t>(n));
    }
    close(pipe_fds[0]);
    waitpid(pid, &child.status, 0);
    return child;
}

bool exited_ok(const Child& child) {
    if (!WIFEXITED(child.status) || WEXITSTATUS(child.status) != 0) {
        std::fprintf(stderr, "child failed (status %#x):\n%s", child.status, child.err.c_str());
        return false;
    }
    return true;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

int count_lines(const std::string& text) {
    int lines = 0;
    for (const char c : text) {
        lines += c == '\n' ? 1 : 0;
    }
    return lines;
}

// ---------------------------------------------------------------------------

// Linear, pitch, managed and the v1 ABI; the cap exact to the byte; at and
// over the cap.
void scenario_linear() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741825"}});
    start();
    const uint64_t cap = 1073741825 - kReserved;
    CHECK_EQ(mem_info().total, cap);
    CHECK_EQ(mem_info().free, cap);
    CHECK_EQ(device_total(0), cap);
    CHECK_EQ(device_total(1), cap);
    unsigned int total32 = 0;
    REQUIRE_OK(cuDeviceTotalMem(&total32, 0));
    CHECK_EQ(total32, cap);

    CUdeviceptr small = 0;
    REQUIRE_OK(cuMemAlloc_v2(&small, 1));
    CHECK_EQ(mem_info().used(), 2 * kMiB); // the granularity
    CHECK_EQ(mem_info().used(), standin_used(0));

    CUdeviceptr pitched = 0;
    size_t pitch = 0;
    REQUIRE_OK(cuMemAllocPitch_v2(&pitched, &pitch, 1000, 3000, 4));
    CHECK(pitch >= 1000);
    CHECK_EQ(mem_info().used(), standin_used(0));

    CUdeviceptr managed = 0;
    REQUIRE_OK(cuMemAllocManaged(&managed, 5 * kMiB, 1));
    CHECK_EQ(mem_info().used(), standin_used(0));

    CUdeviceptr_v1 old = 0;
    REQUIRE_OK(cuMemAlloc(&old, 3 * kMiB));
    unsigned int old_pitch = 0;
    CUdeviceptr_v1 old_pitched = 0;
    REQUIRE_OK(cuMemAllocPitch(&old_pitched, &old_pitch, 100, 100, 4));
    CHECK_EQ(mem_info().used(), standin_used(0));

    // Another device's usage is its own.
    use_device(1);
    CUdeviceptr other = 0;
    REQUIRE_OK(cuMemAlloc_v2(&other, 7 * kMiB));
    CHECK_EQ(mem_info().used(), 8 * kMiB);
    CHECK_EQ(mem_info().used(), standin_used(1));
    REQUIRE_OK(cuMemFree_v2(other));
    CHECK_EQ(mem_info().used(), 0u);
    use_device(0);

    REQUIRE_OK(cuMemFree_v2(small));
    REQUIRE_OK(cuMemFree_v2(pitched));
    REQUIRE_OK(cuMemFree_v2(managed));
    REQUIRE_OK(cuMemFree(old));
    REQUIRE_OK(cuMemFree(old_pitched));
    CHECK_EQ(mem_info().used(), 0u);
    CHECK_EQ(standin_used(0), 0u);

    // Over the cap: refused before the driver sees it, usage unchanged.
    gpulimit_standin_reset_calls();
    CUdeviceptr big = 0;
    CHECK_EQ(cuMemAlloc_v2(&big, cap + 1), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(gpulimit_standin_calls("cuMemAlloc_v2"), 0u);
    CHECK_EQ(mem_info().used(), 0u);

    // Exactly the cap (rounded down to the granularity) fits; at the cap
    // reporting still works, with nothing free.
    const uint64_t whole = cap / (2 * kMiB) * (2 * kMiB);
    REQUIRE_OK(cuMemAlloc_v2(&big, whole));
    CHECK_EQ(mem_info().used(), whole);
    CHECK_EQ(mem_info().free, cap - whole);
    CUdeviceptr more = 0;
    CHECK_EQ(cuMemAlloc_v2(&more, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(cuMemAllocManaged(&more, 1, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(mem_info().used(), whole);
    REQUIRE_OK(cuMemFree_v2(big));
    CHECK_EQ(mem_info().used(), 0u);

    // A free of memory the limiter never saw passes through to the driver.
    CHECK_EQ(cuMemFree_v2(0x1234000), CUDA_ERROR_INVALID_VALUE);
}

// The driver fails the real call: the admission is rolled back.
void scenario_rollback() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"}});
    start();
    CUstream stream = nullptr;
    REQUIRE_OK(cuStreamCreate(&stream, 0));
    const CUresult injected = CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr ptr = 0;
    size_t pitch = 0;

    gpulimit_standin_fail_next("cuMemAlloc_v2", injected);
    CHECK_EQ(cuMemAlloc_v2(&ptr, 64 * kMiB), injected);
    CHECK_EQ(mem_info().used(), 0u);

    gpulimit_standin_fail_next("cuMemAllocPitch_v2", injected);
    CHECK_EQ(cuMemAllocPitch_v2(&ptr, &pitch, 4096, 4096, 4), injected);
    CHECK_EQ(mem_info().used(), 0u);

    gpulimit_standin_fail_next("cuMemAllocManaged", injected);
    CHECK_EQ(cuMemAllocManaged(&ptr, 64 * kMiB, 1), injected);
    CHECK_EQ(mem_info().used(), 0u);

    gpulimit_standin_fail_next("cuMemAllocAsync", injected);
    CHECK_EQ(cuMemAllocAsync(&ptr, 64 * kMiB, stream), injected);
    CHECK_EQ(mem_info().used(), 0u);

    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle handle = 0;
    gpulimit_standin_fail_next("cuMemCreate", injected);
    CHECK_EQ(cuMemCreate(&handle, 64 * kMiB, &prop, 0), injected);
    CHECK_EQ(mem_info().used(), 0u);

    // A failed free keeps the charge (the memory is still allocated).
    REQUIRE_OK(cuMemAlloc_v2(&ptr, 4 * kMiB));
    gpulimit_standin_fail_next("cuMemFree_v2", injected);
    CHECK_EQ(cuMemFree_v2(ptr), injected);
    CHECK_EQ(mem_info().used(), 4 * kMiB);
    REQUIRE_OK(cuMemFree_v2(ptr));
    CHECK_EQ(mem_info().used(), 0u);
    CHECK_EQ(standin_used(0), 0u);
}

// Stream-ordered allocation: the default pool and a created one; reserves
// given back at synchronization and by trim are seen.
void scenario_pools() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"}});
    start();
    const uint64_t cap = kGiB - kReserved;
    CUstream stream = nullptr;
    REQUIRE_OK(cuStreamCreate(&stream, 0));

    CUdeviceptr a = 0;
    CUdeviceptr b = 0;
    REQUIRE_OK(cuMemAllocAsync(&a, 3 * kMiB, stream));
    CHECK_EQ(mem_info().used(), standin_used(0));
    CHECK(mem_info().used() >= 3 * kMiB);
    REQUIRE_OK(cuMemAllocAsync_ptsz(&b, 1 * kMiB, stream));
    CHECK_EQ(mem_info().used(), standin_used(0));
    REQUIRE_OK(cuMemFreeAsync(a, stream));
    REQUIRE_OK(cuMemFreeAsync_ptsz(b, stream));
    // Freed memory stays in the pool until a synchronization gives it back.
    REQUIRE_OK(cuStreamSynchronize(stream));
    CHECK_EQ(mem_info().used(), standin_used(0));
    CHECK_EQ(mem_info().used(), 0u);

    // A created pool that keeps what is freed (release threshold: all).
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool pool = nullptr;
    REQUIRE_OK(cuMemPoolCreate(&pool, &props));
    cuuint64_t keep_all = ~0ULL;
    REQUIRE_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all));
    REQUIRE_OK(cuMemAllocFromPoolAsync(&a, 100 * kMiB, pool, stream));
    CHECK_EQ(mem_info().used(), standin_used(0));
    CHECK_EQ(mem_info().used(), 100 * kMiB);
    REQUIRE_OK(cuMemFreeAsync(a, stream));
    REQUIRE_OK(cuStreamSynchronize(stream));
    // Still held by the pool, so still counted.
    CHECK_EQ(mem_info().used(), 100 * kMiB);
    // Reused from the pool's reserve: no new memory, and admitted even when
    // the rest of the cap is taken.
    CUdeviceptr filler = 0;
    REQUIRE_OK(cuMemAlloc_v2(&filler, cap / (2 * kMiB) * (2 * kMiB) - 100 * kMiB));
    REQUIRE_OK(cuMemAllocFromPoolAsync_ptsz(&a, 50 * kMiB, pool, stream));
    CHECK_EQ(mem_info().used(), standin_used(0));
    // Beyond the reserve and the cap: refused, nothing changes.
    CHECK_EQ(cuMemAllocFromPoolAsync(&b, 60 * kMiB, pool, stream), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(cuMemAllocAsync(&b, 60 * kMiB, stream), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(mem_info().used(), standin_used(0));
    REQUIRE_OK(cuMemFree_v2(filler));
    REQUIRE_OK(cuMemFreeAsync(a, stream));
    REQUIRE_OK(cuStreamSynchronize(stream));
    REQUIRE_OK(cuMemPoolTrimTo(pool, 0));
    CHECK_EQ(mem_info().used(), 0u);
    CHECK_EQ(standin_used(0), 0u);

    REQUIRE_OK(cuMemAllocFromPoolAsync(&a, 10 * kMiB, pool, stream));
    REQUIRE_OK(cuMemFreeAsync(a, stream));
    REQUIRE_OK(cuStreamSynchronize(stream));
    CHECK_EQ(mem_info().used(), 10 * kMiB);
    REQUIRE_OK(cuMemPoolDestroy(pool));
    CHECK_EQ(mem_info().used(), 0u);
    CHECK_EQ(standin_used(0), 0u);
}

// VMM: counted by the properties' device, from a thread with no context;
// host locations are not device memory.
void scenario_vmm() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"}});
    start();
    std::atomic<int> failures{0};
    CUmemGenericAllocationHandle device_handle = 0;
    CUmemGenericAllocationHandle host_handle = 0;
    std::thread worker([&] {
        CUdevice current = -1;
        if (cuCtxGetDevice(&current) == CUDA_SUCCESS) {
            ++failures; // the worker must have no context
        }
        CUmemAllocationProp prop{};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 1;
        if (cuMemCreate(&device_handle, 64 * kMiB, &prop, 0) != CUDA_SUCCESS) {
            ++failures;
        }
        prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
        prop.location.id = 0;
        if (cuMemCreate(&host_handle, 32 * kMiB, &prop, 0) != CUDA_SUCCESS) {
            ++failures;
        }
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 1;
        CUmemGenericAllocationHandle too_big = 0;
        if (cuMemCreate(&too_big, kGiB, &prop, 0) != CUDA_ERROR_OUT_OF_MEMORY) {
            ++failures;
        }
    });
    worker.join();
    CHECK_EQ(failures.load(), 0);
    use_device(1);
    CHECK_EQ(mem_info().used(), 64 * kMiB);
    CHECK_EQ(mem_info().used(), standin_used(1));
    use_device(0);
    CHECK_EQ(mem_info().used(), 0u);
    std::thread releaser([&] {
        if (cuMemRelease(device_handle) != CUDA_SUCCESS ||
            cuMemRelease(host_handle) != CUDA_SUCCESS) {
            ++failures;
        }
    });
    releaser.join();
    CHECK_EQ(failures.load(), 0);
    use_device(1);
    CHECK_EQ(mem_info().used(), 0u);
    CHECK_EQ(standin_used(1), 0u);
}

// Arrays and mipmapped arrays: sized by the driver; over the cap the array
// is destroyed again.
void scenario_arrays() {
    enable({{"GPU_MEM_PER_DEVICE", "209715200"}}); // 200 MiB
    start();
    CUDA_ARRAY_DESCRIPTOR flat{1000, 1000, 0x20, 4};
    CUarray array2d = nullptr;
    REQUIRE_OK(cuArrayCreate_v2(&array2d, &flat));
    CHECK_EQ(mem_info().used(), standin_used(0));
    CHECK(mem_info().used() >= 16000000u);
    CUDA_ARRAY3D_DESCRIPTOR cube{128, 128, 128, 0x01, 1, 0};
    CUarray array3d = nullptr;
    REQUIRE_OK(cuArray3DCreate_v2(&array3d, &cube));
    CHECK_EQ(mem_info().used(), standin_used(0));
    CUmipmappedArray mipmapped = nullptr;
    CUDA_ARRAY3D_DESCRIPTOR base{1024, 1024, 0, 0x20, 4, 0};
    REQUIRE_OK(cuMipmappedArrayCreate(&mipmapped, &base, 11));
    CHECK_EQ(mem_info().used(), standin_used(0));

    const uint64_t before = standin_used(0);
    CUDA_ARRAY3D_DESCRIPTOR huge{4096, 4096, 4, 0x20, 4, 0}; // 1 GiB
    CUarray refused = nullptr;
    const CUresult result = cuArray3DCreate_v2(&refused, &huge);
    CHECK_EQ(result, CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(standin_used(0), before);
    CHECK_EQ(mem_info().used(), before);

    REQUIRE_OK(cuArrayDestroy(array2d));
    REQUIRE_OK(cuArrayDestroy(array3d));
    REQUIRE_OK(cuMipmappedArrayDestroy(mipmapped));
    CHECK_EQ(mem_info().used(), 0u);
    CHECK_EQ(standin_used(0), 0u);
}

// Graph memory: the driver's reserve after instantiate, launch and trim.
void scenario_graph() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"}});
    start();
    CUgraph graph = nullptr;
    REQUIRE_OK(cuGraphCreate(&graph, 0));
    CHECK_EQ(gpulimit_standin_set_graph_reserved(0, 64 * kMiB), 0);
    CUgraphExec exec = nullptr;
    REQUIRE_OK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    CHECK_EQ(mem_info().used(), 64 * kMiB);
    CHECK_EQ(gpulimit_standin_set_graph_reserved(1, 32 * kMiB), 0);
    REQUIRE_OK(cuGraphLaunch(exec, nullptr));
    use_device(1);
    CHECK_EQ(mem_info().used(), 32 * kMiB);
    use_device(0);
    // Graph memory counts against the cap of later allocations.
    CUdeviceptr ptr = 0;
    CHECK_EQ(cuMemAlloc_v2(&ptr, kGiB - kReserved - 62 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(gpulimit_standin_set_graph_reserved(0, 0), 0);
    CHECK_EQ(gpulimit_standin_set_graph_reserved(1, 0), 0);
    REQUIRE_OK(cuDeviceGraphMemTrim(0));
    CHECK_EQ(mem_info().used(), 0u);
    use_device(1);
    CHECK_EQ(mem_info().used(), 0u);
    REQUIRE_OK(cuGraphExecDestroy(exec));
    REQUIRE_OK(cuGraphDestroy(graph));
}

// Without AMP_VGPU_ENABLE=1 nothing is counted or changed.
void scenario_disabled() {
    unsetenv("AMP_VGPU_ENABLE");
    setenv("GPU_MEM_PER_DEVICE", "1073741824", 1);
    fresh_state_dir();
    start();
    CHECK_EQ(mem_info().total, 16 * kGiB);
    CHECK_EQ(device_total(1), 8 * kGiB);
    CUdeviceptr ptr = 0;
    REQUIRE_OK(cuMemAlloc_v2(&ptr, 2 * kGiB));
    CHECK_EQ(mem_info().used(), standin_used(0));
    REQUIRE_OK(cuMemFree_v2(ptr));
    // No group state was made.
    CHECK(fs::is_empty(g_state_dir));
}

// A malformed variable: cuInit fails with NOT_PERMITTED and one stderr line,
// and so does every later hooked call.
void scenario_malformed_child() {
    CHECK_EQ(cuInit(0), CUDA_ERROR_NOT_PERMITTED);
    CUdeviceptr ptr = 0;
    CHECK_EQ(cuMemAlloc_v2(&ptr, 1), CUDA_ERROR_NOT_PERMITTED);
    size_t free = 0;
    size_t total = 0;
    CHECK_EQ(cuMemGetInfo_v2(&free, &total), CUDA_ERROR_NOT_PERMITTED);
    CHECK_EQ(cuInit(0), CUDA_ERROR_NOT_PERMITTED);
}

void scenario_malformed() {
    fresh_state_dir();
    for (const char* bad :
         {"GPU_MEM_PER_DEVICE=12abc", "GPU_MEM_PER_DEVICE=-1", "ALIYUN_COM_GPU_MEM_RESERVED=x",
          "NVIDIA_VISIBLE_DEVICES=0,zz", "GPU_LIMIT_OOM_POLICY=maybe"}) {
        const Child child = run_self("malformed-child", {"AMP_VGPU_ENABLE=1", bad});
        CHECK(exited_ok(child));
        CHECK_EQ(count_lines(child.err), 1);
        CHECK(child.err.rfind("gpulimit: ", 0) == 0);
    }
    // A share that leaves nothing after the reserve is malformed too.
    const Child child =
        run_self("malformed-child", {"AMP_VGPU_ENABLE=1", "GPU_MEM_PER_DEVICE=1048576"});
    CHECK(exited_ok(child));
    CHECK_EQ(count_lines(child.err), 1);
}

// A host root for GPU_LIMIT_ROOT whose /proc/driver/nvidia/gpus lists
// these PCI addresses (the driver's list that host indices count in).
std::string host_root(std::initializer_list<const char*> addresses) {
    char pattern[] = "/tmp/gpulimit-host-XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
        std::perror("mkdtemp");
        std::exit(1);
    }
    for (const char* address : addresses) {
        fs::create_directories(fs::path(pattern) / "proc/driver/nvidia/gpus" / address);
    }
    static std::vector<std::string> made;
    made.push_back(pattern);
    if (made.size() == 1) {
        std::atexit([] {
            for (const std::string& dir : made) {
                std::error_code ignored;
                fs::remove_all(dir, ignored);
            }
        });
    }
    return pattern;
}

// NVIDIA_VISIBLE_DEVICES: index 0 is the lowest PCI bus id of the host's
// GPUs (CUDA ordinal 1); an unlisted device gets cap 0.
void scenario_visible() {
    const std::string root = host_root({"0000:3b:00.0", "0000:1a:00.0"});
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"},
            {"NVIDIA_VISIBLE_DEVICES", "0"},
            {"GPU_LIMIT_ROOT", root.c_str()}});
    start();
    CHECK_EQ(device_total(0), 0u);
    CHECK_EQ(device_total(1), kGiB - kReserved);
    CUdeviceptr ptr = 0;
    CHECK_EQ(cuMemAlloc_v2(&ptr, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(mem_info().total, 0u);
    CHECK_EQ(mem_info().free, 0u);
    use_device(1);
    REQUIRE_OK(cuMemAlloc_v2(&ptr, 1));
    REQUIRE_OK(cuMemFree_v2(ptr));
}

// A host index the process cannot match fails closed with one line that
// says to use UUIDs: the host has a GPU this process does not see (a
// container given some of them), or its list cannot be read at all. Before,
// the index counted among the GPUs the process saw, and a container given
// host GPU 1 capped nothing and refused every allocation, silently.
void scenario_visible_index_unmatched() {
    fresh_state_dir();
    const std::string three = host_root({"0000:1a:00.0", "0000:3b:00.0", "0000:5e:00.0"});
    const std::string empty = host_root({});
    for (const std::string& root : {three, empty, std::string("/nonexistent")}) {
        const Child child =
            run_self("malformed-child",
                     {"AMP_VGPU_ENABLE=1", "NVIDIA_VISIBLE_DEVICES=1", "GPU_LIMIT_ROOT=" + root});
        CHECK(exited_ok(child));
        CHECK_EQ(count_lines(child.err), 1);
        CHECK(child.err.find("UUID") != std::string::npos);
        CHECK(child.err.find(root == three ? "sees 2 of the 3 GPUs" : "cannot be read") !=
              std::string::npos);
    }
    // A GPU the host does not have.
    const std::string two = host_root({"0000:1a:00.0", "0000:3b:00.0"});
    const Child child =
        run_self("malformed-child",
                 {"AMP_VGPU_ENABLE=1", "NVIDIA_VISIBLE_DEVICES=0,2", "GPU_LIMIT_ROOT=" + two});
    CHECK(exited_ok(child));
    CHECK(child.err.find("names GPU 2, but the host lists 2 GPUs") != std::string::npos);
}

// "void" (NVIDIA's CDI specs and jit-cdi runtime) caps every GPU seen.
void scenario_visible_void() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"}, {"NVIDIA_VISIBLE_DEVICES", "void"}});
    start();
    CHECK_EQ(device_total(0), kGiB - kReserved);
    CHECK_EQ(device_total(1), kGiB - kReserved);
}

// GPU_LIMIT_DEVICES, the host's list, decides over NVIDIA_VISIBLE_DEVICES
// (here an index no host list could match): by PCI address and by UUID.
void scenario_host_devices() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"},
            {"NVIDIA_VISIBLE_DEVICES", "1"},
            {"GPU_LIMIT_ROOT", "/nonexistent"},
            {"GPU_LIMIT_DEVICES", "0000:1a:00.0"}});
    start();
    CHECK_EQ(device_total(0), 0u);
    CHECK_EQ(device_total(1), kGiB - kReserved);
}

void scenario_host_devices_uuid() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"},
            {"NVIDIA_VISIBLE_DEVICES", "void"},
            {"GPU_LIMIT_DEVICES", kUuid0}});
    start();
    CHECK_EQ(device_total(0), kGiB - kReserved);
    CHECK_EQ(device_total(1), 0u);
}

void scenario_visible_uuid() {
    const std::string list = std::string(kUuid0);
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"}, {"NVIDIA_VISIBLE_DEVICES", list.c_str()}});
    start();
    CHECK_EQ(device_total(0), kGiB - kReserved);
    CHECK_EQ(device_total(1), 0u);
}

// The ratio forms against the stand-in's totals (16 GiB and 8 GiB), exact.
void scenario_ratio() {
    enable({{"ALIYUN_COM_GPU_MEM_DEV", "3"}, {"ALIYUN_COM_GPU_MEM_CONTAINER", "1"}});
    start();
    const uint64_t total0 = gpulimit_standin_device_total(0);
    const uint64_t total1 = gpulimit_standin_device_total(1);
    CHECK_EQ(device_total(0), total0 / 3 - kReserved);
    CHECK_EQ(device_total(1), total1 / 3 - kReserved);
    CHECK_EQ(mem_info().total, total0 / 3 - kReserved);
}

void scenario_container_gib() {
    enable({{"ALIYUN_COM_GPU_MEM_CONTAINER", "5"}, {"ALIYUN_COM_GPU_MEM_RESERVED", "1"}});
    start();
    const unsigned __int128 total0 = gpulimit_standin_device_total(0);
    const uint64_t gib0 = (static_cast<uint64_t>(total0) + kGiB - 1) / kGiB;
    CHECK_EQ(device_total(0), static_cast<uint64_t>(total0 * 5 / gib0) - kMiB);
}

// Two processes of one group share the cap.
void scenario_shared_child() {
    start();
    const uint64_t held = std::strtoull(getenv("HELD"), nullptr, 10);
    const uint64_t cap = kGiB - kReserved;
    CHECK_EQ(mem_info().used(), held);
    CUdeviceptr ptr = 0;
    CHECK_EQ(cuMemAlloc_v2(&ptr, cap - held + 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
    REQUIRE_OK(cuMemAlloc_v2(&ptr, (cap - held) / (2 * kMiB) * (2 * kMiB)));
    REQUIRE_OK(cuMemFree_v2(ptr));
}

void scenario_shared() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"}, {"GPU_LIMIT_GROUP", "shared"}});
    start();
    CUdeviceptr ptr = 0;
    REQUIRE_OK(cuMemAlloc_v2(&ptr, 600 * kMiB));
    const Child child = run_self("shared-child", {"HELD=" + std::to_string(600 * kMiB)});
    CHECK(exited_ok(child));
    CHECK_EQ(mem_info().used(), 600 * kMiB);
    // Another group does not see this one's usage.
    const Child other = run_self("shared-child", {"HELD=0", "GPU_LIMIT_GROUP=other"});
    CHECK(exited_ok(other));
    REQUIRE_OK(cuMemFree_v2(ptr));
}

// A process killed with SIGKILL: its share is free again within a second.
void scenario_killed_child() {
    start();
    CUdeviceptr ptr = 0;
    REQUIRE_OK(cuMemAlloc_v2(&ptr, 300 * kMiB));
    std::printf("ready\n");
    std::fflush(stdout);
    pause();
}

void scenario_killed() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"}});
    start();
    int fds[2];
    if (pipe(fds) != 0) {
        std::exit(1);
    }
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        execl(g_self, g_self, "killed-child", static_cast<char*>(nullptr));
        _exit(127);
    }
    close(fds[1]);
    char line[16] = {};
    CHECK(read(fds[0], line, sizeof(line) - 1) > 0);
    CHECK_EQ(mem_info().used(), 300 * kMiB);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    const auto start_time = std::chrono::steady_clock::now();
    while (mem_info().used() != 0 &&
           std::chrono::steady_clock::now() - start_time < std::chrono::seconds(1)) {
        usleep(10000);
    }
    CHECK_EQ(mem_info().used(), 0u);
}

// The OOM script: its environment, once per episode.
void write_script(const std::string& path, const std::string& body) {
    std::ofstream out(path);
    out << "#!/bin/sh\n" << body;
    out.close();
    chmod(path.c_str(), 0755);
}

void scenario_oom_script() {
    fresh_state_dir();
    const std::string script = g_state_dir + "/oom.sh";
    const std::string log = g_state_dir + "/oom.log";
    write_script(script,
                 "env | grep '^GPU_LIMIT_OOM_' | sort >> " + log + "\necho --- >> " + log + "\n");
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"}, {"ALIYUN_COM_GPU_OOM_SCRIPT", script.c_str()}});
    start();
    const uint64_t cap = kGiB - kReserved;
    CUdeviceptr held = 0;
    REQUIRE_OK(cuMemAlloc_v2(&held, 100 * kMiB));
    CUdeviceptr ptr = 0;
    CHECK_EQ(cuMemAlloc_v2(&ptr, kGiB), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(cuMemAlloc_v2(&ptr, kGiB), CUDA_ERROR_OUT_OF_MEMORY);
    std::string text = read_file(log);
    const std::string expected = "GPU_LIMIT_OOM_CAP=" + std::to_string(cap) +
                                 "\nGPU_LIMIT_OOM_DEVICE=" + kUuid0 +
                                 "\nGPU_LIMIT_OOM_PID=" + std::to_string(getpid()) +
                                 "\nGPU_LIMIT_OOM_REQUEST=" + std::to_string(kGiB) +
                                 "\nGPU_LIMIT_OOM_USAGE=" + std::to_string(100 * kMiB) + "\n---\n";
    CHECK(text == expected);
    if (text != expected) {
        std::fprintf(stderr, "script saw:\n%s\nexpected:\n%s", text.c_str(), expected.c_str());
    }
    // An admitted allocation ends the episode: the next refusal notifies again.
    REQUIRE_OK(cuMemAlloc_v2(&ptr, 2 * kMiB));
    CHECK_EQ(cuMemAlloc_v2(&ptr, kGiB), CUDA_ERROR_OUT_OF_MEMORY);
    text = read_file(log);
    CHECK_EQ(count_lines(text), 12);
}

// A script that outlives GPU_LIMIT_OOM_SCRIPT_TIMEOUT is killed and reaped,
// also when the program ignores SIGCHLD.
void scenario_oom_timeout() {
    fresh_state_dir();
    const std::string script = g_state_dir + "/slow.sh";
    const std::string pid_file = g_state_dir + "/slow.pid";
    write_script(script, "echo $$ > " + pid_file + "\nexec sleep 30\n");
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"},
            {"ALIYUN_COM_GPU_OOM_SCRIPT", script.c_str()},
            {"GPU_LIMIT_OOM_SCRIPT_TIMEOUT", "1"}});
    start();
    for (const bool ignore_sigchld : {false, true}) {
        if (ignore_sigchld) {
            signal(SIGCHLD, SIG_IGN);
            CUdeviceptr ok = 0; // ends the first episode
            REQUIRE_OK(cuMemAlloc_v2(&ok, 2 * kMiB));
        }
        const auto begin = std::chrono::steady_clock::now();
        CUdeviceptr ptr = 0;
        CHECK_EQ(cuMemAlloc_v2(&ptr, 2 * kGiB), CUDA_ERROR_OUT_OF_MEMORY);
        const auto took = std::chrono::steady_clock::now() - begin;
        CHECK(took >= std::chrono::milliseconds(900));
        CHECK(took < std::chrono::seconds(10));
        const pid_t script_pid = std::atoi(read_file(pid_file).c_str());
        CHECK(script_pid > 0);
        // Gone, and not left as a zombie child of ours.
        CHECK(kill(script_pid, 0) != 0 && errno == ESRCH);
    }
}

// GPU_LIMIT_OOM_POLICY=kill: the script runs, then SIGKILL ends the process.
void scenario_oom_kill_child() {
    start();
    CUdeviceptr ptr = 0;
    cuMemAlloc_v2(&ptr, 2 * kGiB);
    std::printf("survived\n");
    std::exit(3);
}

void scenario_oom_kill() {
    fresh_state_dir();
    const std::string script = g_state_dir + "/mark.sh";
    const std::string mark = g_state_dir + "/mark";
    write_script(script, "echo ran >> " + mark + "\n");
    const Child child = run_self(
        "oom-kill-child", {"AMP_VGPU_ENABLE=1", "GPU_MEM_PER_DEVICE=1073741824",
                           "GPU_LIMIT_OOM_POLICY=kill", "ALIYUN_COM_GPU_OOM_SCRIPT=" + script});
    CHECK(WIFSIGNALED(child.status) && WTERMSIG(child.status) == SIGKILL);
    CHECK(read_file(mark) == "ran\n");
    CHECK_EQ(count_lines(child.err), 1);
    CHECK(child.err.rfind("gpulimit: ", 0) == 0);
}

// NVML reports the cap for the group's devices (matched by UUID: NVML index
// 0 is CUDA ordinal 1 here) and the group's usage.
void scenario_nvml() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"}});
    start();
    use_device(1);
    CUdeviceptr ptr = 0;
    REQUIRE_OK(cuMemAlloc_v2(&ptr, 100 * kMiB));
    void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(nvml != nullptr);
    if (nvml == nullptr) {
        return;
    }
    using Init = nvmlReturn_t (*)();
    using ByIndex = nvmlReturn_t (*)(unsigned, nvmlDevice_t*);
    using MemoryInfo = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
    using MemoryInfo2 = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*);
    auto init = reinterpret_cast<Init>(dlsym(nvml, "nvmlInit_v2"));
    auto by_index = reinterpret_cast<ByIndex>(dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
    auto info = reinterpret_cast<MemoryInfo>(dlsym(nvml, "nvmlDeviceGetMemoryInfo"));
    auto info2 = reinterpret_cast<MemoryInfo2>(dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2"));
    CHECK(init != nullptr && by_index != nullptr && info != nullptr && info2 != nullptr);
    if (init == nullptr || by_index == nullptr || info == nullptr || info2 == nullptr) {
        return;
    }
    CHECK_EQ(init(), NVML_SUCCESS);
    nvmlDevice_t device = nullptr;
    CHECK_EQ(by_index(0, &device), NVML_SUCCESS);
    nvmlMemory_t memory{};
    CHECK_EQ(info(device, &memory), NVML_SUCCESS);
    CHECK_EQ(memory.total, kGiB - kReserved);
    CHECK_EQ(memory.used, 100 * kMiB);
    CHECK_EQ(memory.free, kGiB - kReserved - 100 * kMiB);
    nvmlMemory_v2_t memory2{};
    memory2.version = nvmlMemory_v2;
    CHECK_EQ(info2(device, &memory2), NVML_SUCCESS);
    CHECK_EQ(memory2.total, kGiB - kReserved);
    CHECK_EQ(memory2.used, 100 * kMiB);
    CHECK_EQ(memory2.free, kGiB - kReserved - 100 * kMiB);
    REQUIRE_OK(cuMemFree_v2(ptr));
}

// A fork child takes its own slot: its allocations are its own, the
// parent's stay counted.
void scenario_fork() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"}});
    start();
    CUdeviceptr ptr = 0;
    REQUIRE_OK(cuMemAlloc_v2(&ptr, 100 * kMiB));
    const pid_t pid = fork();
    if (pid == 0) {
        // CUDA does not survive fork; the child only checks what it is told.
        const bool ok = mem_info().used() == 100 * kMiB;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(mem_info().used(), 100 * kMiB);
    REQUIRE_OK(cuMemFree_v2(ptr));
    CHECK_EQ(mem_info().used(), 0u);
}

// Through Debian's real CUDA runtime (libcudart 11.8): cudart reaches the
// driver through its own cuGetProcAddress table, so this is what CUDA
// applications get.
using ProbeLine = std::map<std::string, std::string>;

std::vector<ProbeLine> run_probe(const std::string& steps) {
    const std::string command = std::string(GPULIMIT_CUDART_PROBE) + " " + steps;
    FILE* out = popen(command.c_str(), "r");
    std::vector<ProbeLine> lines;
    if (out == nullptr) {
        return lines;
    }
    char buffer[1024];
    while (std::fgets(buffer, sizeof(buffer), out) != nullptr) {
        ProbeLine line;
        std::istringstream words(buffer);
        std::string word;
        while (words >> word) {
            const size_t equals = word.find('=');
            if (equals != std::string::npos) {
                line[word.substr(0, equals)] = word.substr(equals + 1);
            }
        }
        lines.push_back(line);
    }
    CHECK_EQ(pclose(out), 0);
    return lines;
}

uint64_t number(const ProbeLine& line, const char* key) {
    const auto it = line.find(key);
    return it == line.end() ? ~0ULL : std::strtoull(it->second.c_str(), nullptr, 10);
}

// How the stand-in answers cuGetProcAddress (GPULIMIT_STANDIN_INTERNAL_PROCS).
enum class Answers { exports, internal, global };

Answers standin_answers() {
    const char* mode = std::getenv("GPULIMIT_STANDIN_INTERNAL_PROCS");
    const std::string value = mode != nullptr ? mode : "";
    return value == "1"        ? Answers::internal
           : value == "global" ? Answers::global
                               : Answers::exports;
}

// The trace of cuGetProcAddress answers (GPU_LIMIT_TRACE_PROC_ADDRESS) the
// probe left: each request once per process, and cuMemAlloc (cudart's
// cudaMalloc) hooked as the stand-in's answer calls for: our export for the
// driver's export, a wrapper hooked by name for an internal pointer, and our
// export kept as it is when the driver answers with it.
void check_proc_trace(const std::string& path, Answers answers) {
    const bool internal = answers == Answers::internal;
    std::ifstream in(path);
    std::string line;
    std::map<std::string, int> seen;
    int mem_alloc = 0;
    int get_proc = 0;
    while (std::getline(in, line)) {
        // "gpulimit: pid P API(SYMBOL, VERSION, FLAGS): OUTCOME"
        const size_t open = line.find('(');
        const size_t close = line.find("): ");
        CHECK(line.rfind("gpulimit: pid ", 0) == 0 && open != std::string::npos &&
              close != std::string::npos);
        if (open == std::string::npos || close == std::string::npos) {
            continue;
        }
        const std::string pid = line.substr(0, line.find(' ', 14));
        const std::string request = line.substr(open + 1, close - open - 1);
        const std::string outcome = line.substr(close + 3);
        CHECK_EQ(++seen[pid + " " + request], 1);
        CHECK(outcome.find("refused") == std::string::npos);
        if (request.rfind("cuMemAlloc, ", 0) == 0 && outcome.find("error") == std::string::npos) {
            ++mem_alloc;
            CHECK(outcome == (internal ? "not an export, hooked by name as cuMemAlloc_v2"
                              : answers == Answers::global ? "our export cuMemAlloc_v2, kept"
                                                           : "export cuMemAlloc_v2, hooked"));
        }
        if (request.rfind("cuGetProcAddress, ", 0) == 0) {
            ++get_proc;
        }
        if (outcome.find("passed through") != std::string::npos) {
            CHECK((outcome.rfind("export ", 0) == 0) == !internal);
        }
    }
    CHECK(mem_alloc >= 1);
    CHECK(seen.size() > 50); // cudart asks for hundreds of functions
    std::fprintf(stderr, "trace: %zu requests, %d for cuMemAlloc, %d for cuGetProcAddress\n",
                 seen.size(), mem_alloc, get_proc);
}

void scenario_cudart() {
    enable({{"GPU_MEM_PER_DEVICE", "1073741824"}});
    const std::string trace = g_state_dir + "/procs.log";
    setenv("GPU_LIMIT_TRACE_PROC_ADDRESS", trace.c_str(), 1);
    const uint64_t cap = kGiB - kReserved;
    const std::string steps =
        "meminfo malloc 1 meminfo used 0 "                                // 0-3
        "pitch 1000 3000 managed 5242880 async 3145728 array3d 64 64 64 " // 4-7
        "meminfo used 0 "                                                 // 8-9
        "malloc " +
        std::to_string(cap) +
        " meminfo "                                                             // 10-11
        "pool-create pool-threshold 4294967296 pool-alloc 104857600 free sync " // 12-16
        "meminfo used 0 pool-trim 0 meminfo used 0 pool-destroy "               // 17-22
        "free-all sync meminfo used 0";                                         // 23-26
    const std::vector<ProbeLine> lines = run_probe(steps);
    CHECK_EQ(lines.size(), 27u);
    if (lines.size() != 27) {
        return;
    }
    for (const size_t ok :
         {0, 1, 2, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 16, 17, 19, 20, 22, 23, 24, 25}) {
        CHECK_EQ(number(lines[ok], "err"), 0u);
    }
    const auto used = [&](size_t meminfo) {
        return number(lines[meminfo], "total") - number(lines[meminfo], "free");
    };
    CHECK_EQ(number(lines[0], "total"), cap);
    CHECK_EQ(number(lines[0], "free"), cap);
    CHECK_EQ(used(2), 2 * kMiB);
    CHECK_EQ(used(2), number(lines[3], "bytes"));
    // malloc 1, pitch (>= 1000 x 3000 bytes), managed 5 MiB, async 3 MiB, and
    // a 1 MiB array, each rounded up to the 2 MiB granularity.
    CHECK_EQ(used(8), 18 * kMiB);
    CHECK_EQ(used(8), number(lines[9], "bytes"));
    // Over the cap: cudaErrorMemoryAllocation, usage unchanged.
    CHECK_EQ(number(lines[10], "err"), 2u);
    CHECK_EQ(used(11), used(8));
    // The created pool keeps its 100 MiB after the free and the sync...
    CHECK_EQ(used(17), number(lines[18], "bytes"));
    CHECK(used(17) >= used(8) + 100 * kMiB);
    // ...until trimmed.
    CHECK_EQ(used(20), number(lines[21], "bytes"));
    CHECK(used(20) < used(17));
    // Everything freed (the default pool gives back at the sync): 0.
    CHECK_EQ(used(25), 0u);
    CHECK_EQ(number(lines[26], "bytes"), 0u);
    check_proc_trace(trace, standin_answers());
}

const std::map<std::string, std::function<void()>>& scenarios() {
    static const std::map<std::string, std::function<void()>> table = {
        {"linear", scenario_linear},
        {"rollback", scenario_rollback},
        {"pools", scenario_pools},
        {"vmm", scenario_vmm},
        {"arrays", scenario_arrays},
        {"graph", scenario_graph},
        {"disabled", scenario_disabled},
        {"malformed", scenario_malformed},
        {"malformed-child", scenario_malformed_child},
        {"visible", scenario_visible},
        {"visible-uuid", scenario_visible_uuid},
        {"visible-index-unmatched", scenario_visible_index_unmatched},
        {"visible-void", scenario_visible_void},
        {"host-devices", scenario_host_devices},
        {"host-devices-uuid", scenario_host_devices_uuid},
        {"ratio", scenario_ratio},
        {"container-gib", scenario_container_gib},
        {"shared", scenario_shared},
        {"shared-child", scenario_shared_child},
        {"killed", scenario_killed},
        {"killed-child", scenario_killed_child},
        {"oom-script", scenario_oom_script},
        {"oom-timeout", scenario_oom_timeout},
        {"oom-kill", scenario_oom_kill},
        {"oom-kill-child", scenario_oom_kill_child},
        {"nvml", scenario_nvml},
        {"fork", scenario_fork},
        {"cudart", scenario_cudart},
    };
    return table;
}

} // namespace

int main(int argc, char** argv) {
    g_self = "/proc/self/exe";
    static char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        g_self = self;
    }
    const auto& table = scenarios();
    const auto it = argc == 2 ? table.find(argv[1]) : table.end();
    if (it == table.end()) {
        std::fprintf(stderr, "usage: %s SCENARIO\n", argv[0]);
        return 2;
    }
    it->second();
    return g_failures == 0 ? 0 : 1;
}
