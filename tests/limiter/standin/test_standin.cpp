// The stand-in driver on its own (no interposer): the real CUDA runtime runs
// on it, and its cuGetProcAddress, VMM, pools, arrays, graph memory, fault
// injection and NVML behave as the other gpu-limit tests rely on.
#include "cuda_abi.hpp"
#include "gpuinit/nvml/nvml_h.hpp"
#include "standin_control.h"

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <dlfcn.h>
#include <filesystem>
#include <gtest/gtest.h>
#include <map>
#include <sstream>
#include <string>
#include <sys/time.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

constexpr unsigned long long kMiB = 1ULL << 20;

// ---- The probe over cudart --------------------------------------------------------

using Line = std::map<std::string, std::string>;

struct ProbeRun {
    int status = -1;
    std::vector<Line> lines;
    const Line& step(size_t index) const { return lines.at(index); }
};

// `env`: variables for the probe's environment ("NAME=value ").
ProbeRun run_probe(const std::string& steps, const std::string& env = "") {
    ProbeRun run;
    const std::string command = env + GPULIMIT_CUDART_PROBE + " " + steps;
    FILE* out = popen(command.c_str(), "r");
    if (out == nullptr) {
        return run;
    }
    char buffer[1024];
    while (std::fgets(buffer, sizeof buffer, out) != nullptr) {
        Line line;
        std::istringstream words(buffer);
        std::string word;
        while (words >> word) {
            const size_t eq = word.find('=');
            if (eq != std::string::npos) {
                line[word.substr(0, eq)] = word.substr(eq + 1);
            }
        }
        run.lines.push_back(line);
    }
    run.status = pclose(out);
    return run;
}

unsigned long long number(const Line& line, const char* key) {
    auto it = line.find(key);
    return it == line.end() ? ~0ULL : std::stoull(it->second);
}

void every_step_succeeds(const std::string& env) {
    const ProbeRun run = run_probe(
        "count meminfo malloc 4194304 meminfo pitch 1000 300 managed 1048576 meminfo "
        "async 8388608 pool-reserved pool-alloc 3000000 pool-reserved free sync pool-reserved "
        "pool-create pool-alloc 3000000 pool-reserved array3d 512 512 4 meminfo used 0 "
        "calls cuGetProcAddress calls cuMemAlloc_v2 calls cuMemAllocPitch_v2 calls "
        "cuMemAllocManaged "
        "calls cuMemAllocAsync calls cuMemAllocFromPoolAsync calls cuArray3DCreate_v2 "
        "free-all sync meminfo pool-destroy",
        env);
    ASSERT_EQ(run.status, 0);
    ASSERT_EQ(run.lines.size(), 31U);
    for (const Line& line : run.lines) {
        if (line.count("err") != 0) {
            EXPECT_EQ(line.at("err"), "0") << line.at("step") << " " << line.at("error");
        }
    }
    const unsigned long long total = 16ULL << 30;
    EXPECT_EQ(number(run.step(0), "count"), 2U);
    EXPECT_EQ(number(run.step(1), "free"), total);
    EXPECT_EQ(number(run.step(1), "total"), total);
    EXPECT_EQ(number(run.step(3), "free"), total - 4 * kMiB);
    EXPECT_EQ(number(run.step(4), "pitch"), 1024U);
    // pitch 1024 x 300 and 1 MiB managed each take one 2 MiB page.
    EXPECT_EQ(number(run.step(6), "free"), total - 8 * kMiB);
    EXPECT_EQ(number(run.step(8), "reserved"), 8 * kMiB);
    EXPECT_EQ(number(run.step(10), "reserved"), 12 * kMiB);
    EXPECT_EQ(number(run.step(10), "used"), 8 * kMiB + 3000320);
    // Freed pool memory stays reserved until the synchronization gives it back.
    EXPECT_EQ(number(run.step(13), "reserved"), 8 * kMiB);
    EXPECT_EQ(number(run.step(16), "reserved"), 4 * kMiB);
    // 4+2+2 linear, 8 default pool, 4 created pool, 512x512x4 floats = 4.
    EXPECT_EQ(number(run.step(18), "free"), total - 24 * kMiB);
    EXPECT_EQ(number(run.step(19), "bytes"), 24 * kMiB);
    // cudart reached every entry point through cuGetProcAddress, by ABI name.
    EXPECT_GT(number(run.step(20), "count"), 100U);
    // One call per step; cudaMallocFromPoolAsync ran twice (default pool, created pool).
    const unsigned long long expected_calls[] = {1, 1, 1, 1, 2, 1};
    for (size_t i = 21; i <= 26; ++i) {
        EXPECT_EQ(number(run.step(i), "count"), expected_calls[i - 21]) << run.step(i).at("name");
    }
    EXPECT_EQ(number(run.step(27), "freed"), 6U);
    EXPECT_EQ(number(run.step(29), "free"), total);
}

TEST(StandinCudart, EveryStepOfTheRealRuntimeSucceeds) {
    every_step_succeeds("");
}

// cudart works as well over internal pointers, and every call still counts
// under its ABI name.
TEST(StandinCudart, EveryStepSucceedsOverInternalProcAddresses) {
    every_step_succeeds("GPULIMIT_STANDIN_INTERNAL_PROCS=1 ");
}

TEST(StandinCudart, OutOfMemoryIsPrintedNotFatal) {
    const ProbeRun run = run_probe("device 1 malloc 8589934592 malloc 6442450944 malloc 4294967296 "
                                   "meminfo");
    ASSERT_EQ(run.status, 0);
    ASSERT_EQ(run.lines.size(), 5U);
    EXPECT_EQ(run.step(1).at("err"), "0");
    EXPECT_EQ(run.step(2).at("err"), "2");
    EXPECT_EQ(run.step(2).at("error"), "cudaErrorMemoryAllocation");
    EXPECT_EQ(number(run.step(4), "free"), 0U);
    EXPECT_EQ(number(run.step(4), "total"), 8ULL << 30);
}

TEST(StandinCudart, UsageErrorsExitTwo) {
    EXPECT_EQ(WEXITSTATUS(run_probe("malloc 2>/dev/null").status), 2);
    EXPECT_EQ(WEXITSTATUS(run_probe("no-such-step 2>/dev/null").status), 2);
}

// ---- The driver API directly ----------------------------------------------------------

class StandinDriver : public ::testing::Test {
  protected:
    static void* lib() {
        static void* handle = dlopen(GPULIMIT_STANDIN_CUDA, RTLD_NOW | RTLD_LOCAL);
        return handle;
    }
    template <typename F>
    static F fn(const char* name) {
        return reinterpret_cast<F>(dlsym(lib(), name));
    }
    void SetUp() override {
        ASSERT_NE(lib(), nullptr) << dlerror();
        ASSERT_EQ(fn<CUresult (*)(unsigned)>("cuInit")(0), CUDA_SUCCESS);
    }
    static unsigned long long used(int ordinal) {
        return fn<gpulimit_standin_device_used_fn>(GPULIMIT_STANDIN_DEVICE_USED)(ordinal);
    }
    // cuGetProcAddress_v2's answer as the ABI name whose dlsym gives the same pointer.
    static std::string resolve(const char* symbol, int version, cuuint64_t flags,
                               CUdriverProcAddressQueryResult* status, CUresult* result) {
        auto gpa =
            fn<CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*)>(
                "cuGetProcAddress_v2");
        void* p = reinterpret_cast<void*>(1);
        *result = gpa(symbol, &p, version, flags, status);
        if (p == nullptr) {
            return "";
        }
        Dl_info info{};
        return dladdr(p, &info) != 0 && info.dli_sname != nullptr ? info.dli_sname : "?";
    }
    static std::string resolve(const char* symbol, int version, cuuint64_t flags = 0) {
        CUdriverProcAddressQueryResult status = -1;
        CUresult result = -1;
        std::string name = resolve(symbol, version, flags, &status, &result);
        return result == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS ? name : "";
    }
};

TEST_F(StandinDriver, ProcAddressPicksTheNewestVariantNotNewerThanAsked) {
    EXPECT_EQ(resolve("cuMemAlloc", 3010), "cuMemAlloc");
    EXPECT_EQ(resolve("cuMemAlloc", 3020), "cuMemAlloc_v2");
    EXPECT_EQ(resolve("cuMemAlloc", 13000), "cuMemAlloc_v2");
    EXPECT_EQ(resolve("cuCtxCreate", 3000), "cuCtxCreate");
    EXPECT_EQ(resolve("cuCtxCreate", 12080), "cuCtxCreate_v2");
    EXPECT_EQ(resolve("cuCtxCreate", 13000), "cuCtxCreate_v4");
    EXPECT_EQ(resolve("cuGetProcAddress", 11030), "cuGetProcAddress");
    EXPECT_EQ(resolve("cuGetProcAddress", 12000), "cuGetProcAddress_v2");
    EXPECT_EQ(resolve("cuGraphInstantiate", 11080), "cuGraphInstantiate_v2");
    // Not cuGraphInstantiateWithFlags, cuda.h 12's macro for the name: driver
    // 580.159.04 answers cuGraphInstantiate_v2 at 12000 to 13000.
    EXPECT_EQ(resolve("cuGraphInstantiate", 12000), "cuGraphInstantiate_v2");
    EXPECT_EQ(resolve("cuGraphInstantiate", 13000), "cuGraphInstantiate_v2");
    // The pointer is the exported function's own: dlsym agrees.
    void* p = nullptr;
    ASSERT_EQ(fn<CUresult (*)(const char*, void**, int, cuuint64_t)>("cuGetProcAddress")(
                  "cuMemGetInfo", &p, 12000, 0),
              CUDA_SUCCESS);
    EXPECT_EQ(p, dlsym(lib(), "cuMemGetInfo_v2"));
}

// GPULIMIT_STANDIN_INTERNAL_PROCS=1: the same variant, at an address that is
// not the export's, which reaches the export (counted under its name).
TEST_F(StandinDriver, ProcAddressInternalPointers) {
    auto gpa =
        fn<CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*)>(
            "cuGetProcAddress_v2");
    auto name = fn<gpulimit_standin_proc_name_fn>(GPULIMIT_STANDIN_PROC_NAME);
    auto calls = fn<gpulimit_standin_calls_fn>(GPULIMIT_STANDIN_CALLS);
    ASSERT_NE(name, nullptr);
    struct Case {
        const char* symbol;
        cuuint64_t flags;
        const char* abi;
    };
    for (const Case& c : {Case{"cuMemAlloc", 0, "cuMemAlloc_v2"},
                          Case{"cuMemAllocAsync", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                               "cuMemAllocAsync_ptsz"},
                          Case{"cuGetProcAddress", 0, "cuGetProcAddress_v2"}}) {
        void* exported = nullptr;
        void* internal = nullptr;
        ASSERT_EQ(gpa(c.symbol, &exported, 12000, c.flags, nullptr), CUDA_SUCCESS);
        setenv("GPULIMIT_STANDIN_INTERNAL_PROCS", "1", 1);
        const CUresult result = gpa(c.symbol, &internal, 12000, c.flags, nullptr);
        unsetenv("GPULIMIT_STANDIN_INTERNAL_PROCS");
        ASSERT_EQ(result, CUDA_SUCCESS) << c.symbol;
        EXPECT_EQ(exported, dlsym(lib(), c.abi)) << c.symbol;
        EXPECT_NE(internal, exported) << c.symbol;
        Dl_info info{};
        EXPECT_TRUE(dladdr(internal, &info) == 0 || info.dli_saddr != internal)
            << c.symbol << ": the internal pointer is an exported symbol";
        EXPECT_STREQ(name(internal), c.abi);
        EXPECT_STREQ(name(exported), c.abi);
    }
    EXPECT_EQ(name(reinterpret_cast<void*>(&dlsym)), nullptr);
    void* internal = nullptr;
    setenv("GPULIMIT_STANDIN_INTERNAL_PROCS", "1", 1);
    ASSERT_EQ(gpa("cuDeviceTotalMem", &internal, 12000, 0, nullptr), CUDA_SUCCESS);
    unsetenv("GPULIMIT_STANDIN_INTERNAL_PROCS");
    const unsigned long long before = calls("cuDeviceTotalMem_v2");
    size_t total = 0;
    EXPECT_EQ(reinterpret_cast<CUresult (*)(size_t*, CUdevice)>(internal)(&total, 0), CUDA_SUCCESS);
    EXPECT_EQ(calls("cuDeviceTotalMem_v2"), before + 1);
    EXPECT_EQ(total, 16ULL << 30);
}

TEST_F(StandinDriver, ProcAddressPerThreadFlag) {
    constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    EXPECT_EQ(resolve("cuMemAllocAsync", 11020, kPerThread), "cuMemAllocAsync_ptsz");
    EXPECT_EQ(resolve("cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_LEGACY_STREAM),
              "cuMemAllocAsync");
    EXPECT_EQ(resolve("cuLaunchKernel", 12000, kPerThread), "cuLaunchKernel_ptsz");
    EXPECT_EQ(resolve("cuLaunchKernel", 12000, 0), "cuLaunchKernel");
    EXPECT_EQ(resolve("cuGraphLaunch", 12000, kPerThread), "cuGraphLaunch_ptsz");
    // No per-thread variant: the plain one.
    EXPECT_EQ(resolve("cuMemAlloc", 12000, kPerThread), "cuMemAlloc_v2");
    // Per-thread rows newer than asked: the plain one.
    EXPECT_EQ(resolve("cuStreamSynchronize", 6050, kPerThread), "cuStreamSynchronize");
}

TEST_F(StandinDriver, ProcAddressFailures) {
    CUdriverProcAddressQueryResult status = -1;
    CUresult result = -1;
    EXPECT_EQ(resolve("cuMemAllocAsync", 11010, 0, &status, &result), "");
    EXPECT_EQ(result, CUDA_ERROR_NOT_FOUND);
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    EXPECT_EQ(resolve("cuNoSuchFunction", 13000, 0, &status, &result), "");
    EXPECT_EQ(result, CUDA_ERROR_NOT_FOUND);
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    resolve("cuMemAlloc", 13000, 4, &status, &result);
    EXPECT_EQ(result, CUDA_ERROR_INVALID_VALUE);
}

TEST_F(StandinDriver, VmmNeedsNoContextAndCountsDeviceLocationsOnly) {
    auto create = fn<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                                  unsigned long long)>("cuMemCreate");
    auto release = fn<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease");
    auto granularity =
        fn<CUresult (*)(size_t*, const CUmemAllocationProp*, int)>("cuMemGetAllocationGranularity");
    // A fresh thread has no current context, like NCCL's and PyTorch's workers.
    std::thread worker([&] {
        auto get_current = fn<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
        CUcontext ctx = reinterpret_cast<CUcontext>(1);
        ASSERT_EQ(get_current(&ctx), CUDA_SUCCESS);
        ASSERT_EQ(ctx, nullptr);
        CUmemAllocationProp prop{};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
        size_t g = 0;
        ASSERT_EQ(granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
        EXPECT_EQ(g, 2 * kMiB);
        const unsigned long long before0 = used(0), before1 = used(1);
        CUmemGenericAllocationHandle device_handle = 0, host_handle = 0;
        ASSERT_EQ(create(&device_handle, 6 * kMiB, &prop, 0), CUDA_SUCCESS);
        EXPECT_EQ(used(1), before1 + 6 * kMiB);
        EXPECT_EQ(used(0), before0);
        CUmemGenericAllocationHandle unused = 0;
        EXPECT_EQ(create(&unused, 3 * kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
        prop.location = {CU_MEM_LOCATION_TYPE_HOST, 0};
        ASSERT_EQ(create(&host_handle, 4 * kMiB, &prop, 0), CUDA_SUCCESS);
        EXPECT_EQ(used(0), before0);
        EXPECT_EQ(used(1), before1 + 6 * kMiB);
        EXPECT_EQ(release(device_handle), CUDA_SUCCESS);
        EXPECT_EQ(release(host_handle), CUDA_SUCCESS);
        EXPECT_EQ(used(1), before1);
        EXPECT_EQ(release(device_handle), CUDA_ERROR_INVALID_VALUE);
    });
    worker.join();
}

class StandinDriverWithContext : public StandinDriver {
  protected:
    void SetUp() override {
        StandinDriver::SetUp();
        CUcontext ctx = nullptr;
        ASSERT_EQ(fn<CUresult (*)(CUcontext*, int)>("cuDevicePrimaryCtxRetain")(&ctx, 0),
                  CUDA_SUCCESS);
        ASSERT_EQ(fn<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(ctx), CUDA_SUCCESS);
    }
};

TEST_F(StandinDriverWithContext, FaultInjectionFailsOneCallWithoutEffect) {
    auto alloc = fn<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
    auto mem_free = fn<CUresult (*)(CUdeviceptr)>("cuMemFree_v2");
    auto calls = fn<gpulimit_standin_calls_fn>(GPULIMIT_STANDIN_CALLS);
    auto last = fn<gpulimit_standin_last_call_fn>(GPULIMIT_STANDIN_LAST_CALL);
    const unsigned long long before = used(0), count = calls("cuMemAlloc_v2");
    fn<gpulimit_standin_fail_next_fn>(GPULIMIT_STANDIN_FAIL_NEXT)("cuMemAlloc_v2",
                                                                  CUDA_ERROR_OUT_OF_MEMORY);
    CUdeviceptr p = 0;
    EXPECT_EQ(alloc(&p, kMiB), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(used(0), before);
    EXPECT_EQ(std::string(last()), "cuMemAlloc_v2");
    ASSERT_EQ(alloc(&p, kMiB), CUDA_SUCCESS);
    EXPECT_EQ(used(0), before + 2 * kMiB);
    EXPECT_EQ(calls("cuMemAlloc_v2"), count + 2);
    EXPECT_EQ(mem_free(p), CUDA_SUCCESS);
    EXPECT_EQ(used(0), before);
}

TEST_F(StandinDriverWithContext, PoolGivesBackAboveItsThresholdAtSynchronization) {
    auto create = fn<CUresult (*)(CUmemoryPool*, const CUmemPoolProps*)>("cuMemPoolCreate");
    auto alloc =
        fn<CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream)>("cuMemAllocFromPoolAsync");
    auto free_async = fn<CUresult (*)(CUdeviceptr, CUstream)>("cuMemFreeAsync");
    auto get = fn<CUresult (*)(CUmemoryPool, int, void*)>("cuMemPoolGetAttribute");
    auto set = fn<CUresult (*)(CUmemoryPool, int, void*)>("cuMemPoolSetAttribute");
    auto sync = fn<CUresult (*)(CUstream)>("cuStreamSynchronize");
    auto destroy = fn<CUresult (*)(CUmemoryPool)>("cuMemPoolDestroy");
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CUmemoryPool pool = nullptr;
    ASSERT_EQ(create(&pool, &props), CUDA_SUCCESS);
    const unsigned long long before = used(0);
    cuuint64_t threshold = 4 * kMiB;
    ASSERT_EQ(set(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
    CUdeviceptr a = 0, b = 0;
    ASSERT_EQ(alloc(&a, 5 * kMiB, pool, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(alloc(&b, 5 * kMiB, pool, nullptr), CUDA_SUCCESS);
    cuuint64_t reserved = 0;
    ASSERT_EQ(get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
    EXPECT_EQ(reserved, 10 * kMiB);
    EXPECT_EQ(used(0), before + 10 * kMiB);
    ASSERT_EQ(free_async(a, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(free_async(b, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
    EXPECT_EQ(reserved, 10 * kMiB);
    ASSERT_EQ(sync(nullptr), CUDA_SUCCESS);
    ASSERT_EQ(get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
    EXPECT_EQ(reserved, 4 * kMiB);
    EXPECT_EQ(used(0), before + 4 * kMiB);
    EXPECT_EQ(destroy(pool), CUDA_SUCCESS);
    EXPECT_EQ(used(0), before);
}

TEST_F(StandinDriverWithContext, ArraysAreSizedLikeTheirMemoryRequirements) {
    auto create = fn<CUresult (*)(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*)>("cuArray3DCreate_v2");
    auto requirements = fn<CUresult (*)(CUDA_ARRAY_MEMORY_REQUIREMENTS*, CUarray, CUdevice)>(
        "cuArrayGetMemoryRequirements");
    auto destroy = fn<CUresult (*)(CUarray)>("cuArrayDestroy");
    auto mip_create = fn<CUresult (*)(CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*, unsigned)>(
        "cuMipmappedArrayCreate");
    auto mip_requirements =
        fn<CUresult (*)(CUDA_ARRAY_MEMORY_REQUIREMENTS*, CUmipmappedArray, CUdevice)>(
            "cuMipmappedArrayGetMemoryRequirements");
    auto mip_destroy = fn<CUresult (*)(CUmipmappedArray)>("cuMipmappedArrayDestroy");
    const unsigned long long before = used(0);
    CUDA_ARRAY3D_DESCRIPTOR desc{1000, 1000, 0, 0x20 /* FLOAT */, 4, 0};
    CUarray array = nullptr;
    ASSERT_EQ(create(&array, &desc), CUDA_SUCCESS);
    CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
    ASSERT_EQ(requirements(&req, array, 0), CUDA_SUCCESS);
    EXPECT_EQ(req.size, 16 * kMiB); // 16 000 000 bytes, in 2 MiB pages
    EXPECT_EQ(req.alignment, 512U);
    EXPECT_EQ(used(0), before + req.size);
    CUmipmappedArray mip = nullptr;
    CUDA_ARRAY3D_DESCRIPTOR mip_desc{1024, 1024, 0, 0x01 /* UINT8 */, 1, 0};
    ASSERT_EQ(mip_create(&mip, &mip_desc, 3), CUDA_SUCCESS);
    ASSERT_EQ(mip_requirements(&req, mip, 0), CUDA_SUCCESS);
    EXPECT_EQ(req.size, 2 * kMiB); // 1 MiB + 256 KiB + 64 KiB
    EXPECT_EQ(destroy(array), CUDA_SUCCESS);
    EXPECT_EQ(mip_destroy(mip), CUDA_SUCCESS);
    EXPECT_EQ(used(0), before);
}

TEST_F(StandinDriver, GraphReserveComesFromTheTestSetter) {
    auto set_reserved =
        fn<gpulimit_standin_set_graph_reserved_fn>(GPULIMIT_STANDIN_SET_GRAPH_RESERVED);
    auto get = fn<CUresult (*)(CUdevice, int, void*)>("cuDeviceGetGraphMemAttribute");
    const unsigned long long before = used(1);
    ASSERT_EQ(set_reserved(1, 64 * kMiB), 0);
    cuuint64_t reserved = 0;
    ASSERT_EQ(get(1, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
    EXPECT_EQ(reserved, 64 * kMiB);
    EXPECT_EQ(used(1), before + 64 * kMiB);
    EXPECT_EQ(set_reserved(1, 9ULL << 30), -1);
    ASSERT_EQ(set_reserved(1, 0), 0);
    EXPECT_EQ(used(1), before);
}

TEST_F(StandinDriver, NvmlListsTheSameDevicesInPciOrder) {
    void* nvml = dlopen(GPULIMIT_STANDIN_NVML, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(nvml, nullptr) << dlerror();
    auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(nvml, "nvmlInit_v2"));
    auto count =
        reinterpret_cast<nvmlReturn_t (*)(unsigned*)>(dlsym(nvml, "nvmlDeviceGetCount_v2"));
    auto by_index = reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(
        dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
    auto uuid = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(
        dlsym(nvml, "nvmlDeviceGetUUID"));
    auto memory_v2 = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*)>(
        dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2"));
    ASSERT_EQ(init(), NVML_SUCCESS);
    unsigned n = 0;
    ASSERT_EQ(count(&n), NVML_SUCCESS);
    ASSERT_EQ(n, 2U);
    nvmlDevice_t first = nullptr;
    ASSERT_EQ(by_index(0, &first), NVML_SUCCESS);
    char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    ASSERT_EQ(uuid(first, text, sizeof text), NVML_SUCCESS);
    EXPECT_EQ(std::string(text), "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"); // CUDA ordinal 1
    nvmlMemory_v2_t memory{};
    EXPECT_EQ(memory_v2(first, &memory), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    memory.version = nvmlMemory_v2;
    ASSERT_EQ(memory_v2(first, &memory), NVML_SUCCESS);
    EXPECT_EQ(memory.total, 8ULL << 30);
    EXPECT_EQ(memory.used, used(1));
    EXPECT_EQ(memory.free, memory.total - memory.used);
}

// ---- NVML's process list: the memory table shared through GPULIMIT_STANDIN_DIR ------

// A probe that allocates on CUDA ordinal 1 and holds; its "used" line says
// what the stand-in counts for it there.
struct HoldingProbe {
    pid_t pid = -1;
    unsigned long long used = 0;
    FILE* out = nullptr;

    bool start(const std::string& dir, unsigned long long bytes) {
        int pipe_fds[2];
        if (pipe(pipe_fds) != 0) {
            return false;
        }
        pid = fork();
        if (pid == 0) {
            dup2(pipe_fds[1], STDOUT_FILENO);
            close(pipe_fds[0]);
            close(pipe_fds[1]);
            setenv("GPULIMIT_STANDIN_DIR", dir.c_str(), 1);
            const std::string size = std::to_string(bytes);
            execl(GPULIMIT_CUDART_PROBE, GPULIMIT_CUDART_PROBE, "device", "1", "malloc",
                  size.c_str(), "used", "1", "hold", static_cast<char*>(nullptr));
            _exit(127);
        }
        close(pipe_fds[1]);
        out = fdopen(pipe_fds[0], "r");
        char line[512];
        while (out != nullptr && std::fgets(line, sizeof line, out) != nullptr) {
            unsigned long long value = 0;
            if (std::sscanf(line, "step=used device=1 bytes=%llu", &value) == 1) {
                used = value;
                return true;
            }
        }
        return false;
    }
    void stop() {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
            pid = -1;
        }
        if (out != nullptr) {
            fclose(out);
            out = nullptr;
        }
    }
    ~HoldingProbe() { stop(); }
};

TEST(StandinNvmlProcesses, ListsEveryProcessHoldingMemoryUntilItDies) {
    char pattern[] = "/tmp/standin-processes.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    const std::string dir = pattern;
    // This process's NVML reads the same table (it opens it at its first
    // process list); unset again below, for the tests after this one.
    setenv("GPULIMIT_STANDIN_DIR", dir.c_str(), 1);
    void* nvml = dlopen(GPULIMIT_STANDIN_NVML, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(nvml, nullptr) << dlerror();
    auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(nvml, "nvmlInit_v2"));
    auto by_uuid = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(
        dlsym(nvml, "nvmlDeviceGetHandleByUUID"));
    auto list_v1 =
        reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned*, nvmlProcessInfo_v1_t*)>(
            dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses"));
    auto list_v3 = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*)>(
        dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3"));
    ASSERT_NE(list_v1, nullptr);
    ASSERT_NE(list_v3, nullptr);
    ASSERT_NE(dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v2"), nullptr);
    ASSERT_EQ(init(), NVML_SUCCESS);
    nvmlDevice_t dev1 = nullptr;
    ASSERT_EQ(by_uuid("GPU-66666666-7777-8888-9999-aaaaaaaaaaaa", &dev1), NVML_SUCCESS);

    HoldingProbe a;
    HoldingProbe b;
    ASSERT_TRUE(a.start(dir, 4 * kMiB));
    ASSERT_TRUE(b.start(dir, 10'000'000)); // rounded up to 2 MiB pages
    EXPECT_GE(a.used, 4 * kMiB);
    EXPECT_GE(b.used, 10 * kMiB);

    auto listed = [&](std::map<unsigned, unsigned long long>& out) {
        out.clear();
        unsigned count = 0;
        nvmlReturn_t r = list_v1(dev1, &count, nullptr);
        if (r != NVML_ERROR_INSUFFICIENT_SIZE && r != NVML_SUCCESS) {
            return r;
        }
        std::vector<nvmlProcessInfo_v1_t> infos(count);
        r = list_v1(dev1, &count, infos.data());
        for (unsigned i = 0; r == NVML_SUCCESS && i < count; ++i) {
            out[infos[i].pid] = infos[i].usedGpuMemory;
        }
        return r;
    };
    std::map<unsigned, unsigned long long> seen;
    ASSERT_EQ(listed(seen), NVML_SUCCESS);
    EXPECT_EQ(seen.size(), 2U);
    EXPECT_EQ(seen[static_cast<unsigned>(a.pid)], a.used);
    EXPECT_EQ(seen[static_cast<unsigned>(b.pid)], b.used);

    // Too small a buffer: the count, NVML_ERROR_INSUFFICIENT_SIZE. The v3
    // layout as nvml.h declares it (the default): instance ids 0xFFFFFFFF
    // outside MIG.
    unsigned count = 1;
    nvmlProcessInfo_t infos[4] = {};
    EXPECT_EQ(list_v3(dev1, &count, infos), NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(count, 2U);
    count = 4;
    ASSERT_EQ(list_v3(dev1, &count, infos), NVML_SUCCESS);
    ASSERT_EQ(count, 2U);
    for (unsigned i = 0; i < count; ++i) {
        EXPECT_EQ(seen[infos[i].pid], infos[i].usedGpuMemory);
        EXPECT_EQ(infos[i].gpuInstanceId, 0xFFFFFFFFU);
        EXPECT_EQ(infos[i].computeInstanceId, 0xFFFFFFFFU);
    }

    // A process that dies leaves the list (its slot's lock went with it),
    // and a new one takes a slot.
    a.stop();
    ASSERT_EQ(listed(seen), NVML_SUCCESS);
    EXPECT_EQ(seen.size(), 1U);
    EXPECT_EQ(seen.count(static_cast<unsigned>(b.pid)), 1U);
    HoldingProbe c;
    ASSERT_TRUE(c.start(dir, 2 * kMiB));
    ASSERT_EQ(listed(seen), NVML_SUCCESS);
    EXPECT_EQ(seen.size(), 2U);
    EXPECT_EQ(seen[static_cast<unsigned>(c.pid)], c.used);
    b.stop();
    c.stop();
    ASSERT_EQ(listed(seen), NVML_SUCCESS);
    EXPECT_TRUE(seen.empty());
    unsetenv("GPULIMIT_STANDIN_DIR");
    std::filesystem::remove_all(dir);
}

// ---- Compute: kernels on stream workers, the timeline, capture, NVML ---------------

using StreamFn = CUresult (*)(CUstream);
using LaunchFn = CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, CUstream, void**, void**);

uint64_t monotonic_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

constexpr uint64_t kMs = 1'000'000;

class StandinCompute : public StandinDriverWithContext {
  protected:
    void SetUp() override {
        StandinDriverWithContext::SetUp();
        set_kernel_ns(20 * kMs);
    }
    void TearDown() override {
        set_kernel_ns(0);
        fn<gpulimit_standin_set_queue_depth_fn>(GPULIMIT_STANDIN_SET_QUEUE_DEPTH)(1024);
    }
    static void set_kernel_ns(uint64_t ns) {
        fn<gpulimit_standin_set_kernel_ns_fn>(GPULIMIT_STANDIN_SET_KERNEL_NS)(ns);
    }
    static uint64_t busy(int ordinal, uint64_t from, uint64_t to) {
        return fn<gpulimit_standin_busy_ns_fn>(GPULIMIT_STANDIN_BUSY_NS)(ordinal, getpid(), from,
                                                                         to);
    }
    static CUstream stream() {
        CUstream s = nullptr;
        EXPECT_EQ(fn<CUresult (*)(CUstream*, unsigned)>("cuStreamCreate")(&s, 0), CUDA_SUCCESS);
        return s;
    }
    static CUresult launch(CUstream s) {
        static int function = 0;
        return fn<LaunchFn>("cuLaunchKernel")(&function, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
    }
    static CUresult sync(CUstream s) { return fn<StreamFn>("cuStreamSynchronize")(s); }
};

TEST_F(StandinCompute, LaunchReturnsAtOnceAndSynchronizeWaitsForTheKernels) {
    CUstream s = stream();
    const uint64_t t0 = monotonic_ns();
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(launch(s), CUDA_SUCCESS);
    }
    const uint64_t launched = monotonic_ns();
    EXPECT_LT(launched - t0, 15 * kMs);
    EXPECT_EQ(fn<StreamFn>("cuStreamQuery")(s), 600); // CUDA_ERROR_NOT_READY
    ASSERT_EQ(sync(s), CUDA_SUCCESS);
    const uint64_t t1 = monotonic_ns();
    EXPECT_GE(t1 - t0, 100 * kMs);
    EXPECT_EQ(fn<StreamFn>("cuStreamQuery")(s), CUDA_SUCCESS);
    const uint64_t ran = busy(0, t0, t1);
    EXPECT_GE(ran, 100 * kMs);
    EXPECT_LE(ran, t1 - t0);
    // The default streams run kernels too, and cuCtxSynchronize waits for them.
    ASSERT_EQ(launch(nullptr), CUDA_SUCCESS);
    ASSERT_EQ(launch(reinterpret_cast<CUstream>(2)), CUDA_SUCCESS); // CU_STREAM_PER_THREAD
    const uint64_t t2 = monotonic_ns();
    ASSERT_EQ(fn<CUresult (*)()>("cuCtxSynchronize")(), CUDA_SUCCESS);
    EXPECT_GE(busy(0, t2 - 5 * kMs, monotonic_ns()), 40 * kMs);
    EXPECT_EQ(fn<StreamFn>("cuStreamDestroy_v2")(s), CUDA_SUCCESS);
}

TEST_F(StandinCompute, ALaunchOntoAFullQueueWaitsForRoom) {
    fn<gpulimit_standin_set_queue_depth_fn>(GPULIMIT_STANDIN_SET_QUEUE_DEPTH)(2);
    set_kernel_ns(40 * kMs);
    CUstream s = stream();
    // One running and two queued fit; the fourth launch waits for the first.
    const uint64_t t0 = monotonic_ns();
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(launch(s), CUDA_SUCCESS);
    }
    EXPECT_LT(monotonic_ns() - t0, 20 * kMs);
    ASSERT_EQ(launch(s), CUDA_SUCCESS);
    EXPECT_GE(monotonic_ns() - t0, 30 * kMs);
    ASSERT_EQ(sync(s), CUDA_SUCCESS);
    EXPECT_EQ(fn<StreamFn>("cuStreamDestroy_v2")(s), CUDA_SUCCESS);
}

TEST_F(StandinCompute, KernelsOfOneDeviceTakeTurnsDevicesRunAtOnce) {
    CUcontext other = nullptr;
    ASSERT_EQ(fn<CUresult (*)(CUcontext*, int)>("cuDevicePrimaryCtxRetain")(&other, 1),
              CUDA_SUCCESS);
    CUstream a = stream();
    CUstream b = stream();
    ASSERT_EQ(fn<CUresult (*)(CUcontext)>("cuCtxPushCurrent_v2")(other), CUDA_SUCCESS);
    CUstream c = stream();
    const uint64_t t0 = monotonic_ns();
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(launch(a), CUDA_SUCCESS);
        ASSERT_EQ(launch(b), CUDA_SUCCESS);
        ASSERT_EQ(launch(c), CUDA_SUCCESS);
    }
    ASSERT_EQ(sync(a), CUDA_SUCCESS);
    ASSERT_EQ(sync(b), CUDA_SUCCESS);
    ASSERT_EQ(sync(c), CUDA_SUCCESS);
    const uint64_t t1 = monotonic_ns();
    // Device 0 ran 10 kernels one after the other, device 1 its 5 meanwhile.
    EXPECT_GE(t1 - t0, 200 * kMs);
    EXPECT_LT(t1 - t0, 290 * kMs);
    EXPECT_GE(busy(0, t0, t1), 200 * kMs);
    EXPECT_GE(busy(1, t0, t1), 100 * kMs);
    EXPECT_LT(busy(1, t0, t1), 150 * kMs);
    CUcontext popped = nullptr;
    ASSERT_EQ(fn<CUresult (*)(CUcontext*)>("cuCtxPopCurrent_v2")(&popped), CUDA_SUCCESS);
}

TEST_F(StandinCompute, CaptureRecordsLaunchesAndTheGraphRunsThem) {
    auto begin = fn<CUresult (*)(CUstream, int)>("cuStreamBeginCapture_v2");
    auto end = fn<CUresult (*)(CUstream, CUgraph*)>("cuStreamEndCapture");
    auto capturing = fn<CUresult (*)(CUstream, int*)>("cuStreamIsCapturing");
    auto instantiate =
        fn<CUresult (*)(CUgraphExec*, CUgraph, unsigned long long)>("cuGraphInstantiateWithFlags");
    auto graph_launch = fn<CUresult (*)(CUgraphExec, CUstream)>("cuGraphLaunch");
    CUstream s = stream();
    EXPECT_EQ(begin(nullptr, 0), 900); // the legacy stream: CAPTURE_UNSUPPORTED
    CUgraph graph = nullptr;
    EXPECT_EQ(end(s, &graph), 401); // not capturing: ILLEGAL_STATE
    ASSERT_EQ(begin(s, 0), CUDA_SUCCESS);
    int status = -1;
    ASSERT_EQ(capturing(s, &status), CUDA_SUCCESS);
    EXPECT_EQ(status, 1); // ACTIVE
    const uint64_t t0 = monotonic_ns();
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(launch(s), CUDA_SUCCESS);
    }
    ASSERT_EQ(sync(s), CUDA_SUCCESS);
    EXPECT_LT(monotonic_ns() - t0, 15 * kMs);
    EXPECT_EQ(busy(0, t0, monotonic_ns()), 0U);
    ASSERT_EQ(end(s, &graph), CUDA_SUCCESS);
    ASSERT_EQ(capturing(s, &status), CUDA_SUCCESS);
    EXPECT_EQ(status, 0);
    CUgraphExec exec = nullptr;
    ASSERT_EQ(instantiate(&exec, graph, 0), CUDA_SUCCESS);
    set_kernel_ns(0); // the graph keeps the durations of its capture
    const uint64_t t1 = monotonic_ns();
    ASSERT_EQ(graph_launch(exec, s), CUDA_SUCCESS);
    ASSERT_EQ(graph_launch(exec, s), CUDA_SUCCESS);
    EXPECT_LT(monotonic_ns() - t1, 15 * kMs);
    ASSERT_EQ(sync(s), CUDA_SUCCESS);
    const uint64_t ran = busy(0, t1, monotonic_ns());
    EXPECT_GE(ran, 120 * kMs);
    EXPECT_LT(ran, 140 * kMs);
    EXPECT_EQ(fn<CUresult (*)(CUgraphExec)>("cuGraphExecDestroy")(exec), CUDA_SUCCESS);
    EXPECT_EQ(fn<CUresult (*)(CUgraph)>("cuGraphDestroy")(graph), CUDA_SUCCESS);
}

struct ProcessSample { // nvml.h's nvmlProcessUtilizationSample_t
    unsigned pid;
    unsigned long long timeStamp;
    unsigned smUtil, memUtil, encUtil, decUtil;
};

TEST_F(StandinCompute, NvmlReportsUtilizationFromTheTimeline) {
    void* nvml = dlopen(GPULIMIT_STANDIN_NVML, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(nvml, nullptr) << dlerror();
    auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(nvml, "nvmlInit_v2"));
    auto by_uuid = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(
        dlsym(nvml, "nvmlDeviceGetHandleByUUID"));
    auto samples = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, ProcessSample*, unsigned*,
                                                     unsigned long long)>(
        dlsym(nvml, "nvmlDeviceGetProcessUtilization"));
    auto rates = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>(
        dlsym(nvml, "nvmlDeviceGetUtilizationRates"));
    ASSERT_EQ(init(), NVML_SUCCESS);
    nvmlDevice_t dev1 = nullptr;
    nvmlDevice_t dev0 = nullptr;
    ASSERT_EQ(by_uuid("GPU-66666666-7777-8888-9999-AAAAAAAAAAAA", &dev1), NVML_SUCCESS);
    ASSERT_EQ(by_uuid("GPU-11111111-2222-3333-4444-555555555555", &dev0), NVML_SUCCESS);

    CUcontext ctx1 = nullptr;
    ASSERT_EQ(fn<CUresult (*)(CUcontext*, int)>("cuDevicePrimaryCtxRetain")(&ctx1, 1),
              CUDA_SUCCESS);
    ASSERT_EQ(fn<CUresult (*)(CUcontext)>("cuCtxPushCurrent_v2")(ctx1), CUDA_SUCCESS);
    set_kernel_ns(10 * kMs);
    CUstream s = stream();
    for (int i = 0; i < 70; ++i) {
        ASSERT_EQ(launch(s), CUDA_SUCCESS);
    }
    usleep(450'000);
    unsigned utilization[2] = {};
    ASSERT_EQ(rates(dev1, utilization), NVML_SUCCESS);
    EXPECT_GE(utilization[0], 90U);
    ASSERT_EQ(sync(s), CUDA_SUCCESS);
    usleep(200'000); // the last busy window has ended

    unsigned count = 0;
    ASSERT_EQ(samples(dev1, nullptr, &count, 0), NVML_ERROR_INSUFFICIENT_SIZE);
    ASSERT_GE(count, 4U); // 0.7 s of work over windows of 1/6 s
    std::vector<ProcessSample> buffer(count);
    unsigned small = 1;
    EXPECT_EQ(samples(dev1, buffer.data(), &small, 0), NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(small, count);
    ASSERT_EQ(samples(dev1, buffer.data(), &count, 0), NVML_SUCCESS);
    unsigned full = 0;
    unsigned long long last = 0;
    for (unsigned i = 0; i < count; ++i) {
        EXPECT_EQ(buffer[i].pid, static_cast<unsigned>(getpid()));
        EXPECT_GT(buffer[i].timeStamp, last);
        last = buffer[i].timeStamp;
        EXPECT_LE(buffer[i].smUtil, 100U);
        full += buffer[i].smUtil >= 90 ? 1 : 0;
    }
    EXPECT_GE(full, 2U);
    timeval tv{};
    gettimeofday(&tv, nullptr);
    const unsigned long long now_us =
        static_cast<unsigned long long>(tv.tv_sec) * 1000000ULL + tv.tv_usec;
    EXPECT_LE(last, now_us); // CPU time in µs, as NVML stamps samples
    EXPECT_GT(last + 2'000'000, now_us);
    // Nothing newer than the last one seen; nothing on device 0 since (the
    // earlier tests' work there is older).
    count = 8;
    EXPECT_EQ(samples(dev1, buffer.data(), &count, last), 6); // NVML_ERROR_NOT_FOUND
    count = 8;
    EXPECT_EQ(samples(dev0, buffer.data(), &count, last), 6);

    // The device's own samples: one per window, idle ones too, 1/6 s apart.
    struct DeviceSample {
        unsigned long long timeStamp;
        unsigned long long value;
    };
    auto device_samples =
        reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, int, unsigned long long, int*, unsigned*,
                                          DeviceSample*)>(dlsym(nvml, "nvmlDeviceGetSamples"));
    ASSERT_NE(device_samples, nullptr);
    int value_type = -1;
    count = 0;
    ASSERT_EQ(device_samples(dev1, 1, 0, &value_type, &count, nullptr), NVML_SUCCESS);
    ASSERT_GE(count, 6U); // the last seconds' windows, busy or not
    std::vector<DeviceSample> windows(count);
    ASSERT_EQ(device_samples(dev1, 1, 0, &value_type, &count, windows.data()), NVML_SUCCESS);
    EXPECT_EQ(value_type, 1); // NVML_VALUE_TYPE_UNSIGNED_INT
    unsigned busy_windows = 0;
    unsigned idle_windows = 0;
    for (unsigned i = 0; i < count; ++i) {
        if (i > 0) {
            const unsigned long long gap = windows[i].timeStamp - windows[i - 1].timeStamp;
            EXPECT_NEAR(static_cast<double>(gap), 1e6 / 6, 1.0);
        }
        EXPECT_LE(windows[i].value, 100U);
        busy_windows += windows[i].value >= 90 ? 1 : 0;
        idle_windows += windows[i].value == 0 ? 1 : 0;
    }
    EXPECT_GE(busy_windows, 2U);
    EXPECT_GE(idle_windows, 1U); // the window after the work: reported, at 0
    // Only newer ones after the last seen: none (NVML_ERROR_NOT_FOUND), or
    // the one window that may have ended since.
    const unsigned long long newest = windows.back().timeStamp;
    count = static_cast<unsigned>(windows.size());
    const nvmlReturn_t again = device_samples(dev1, 1, newest, &value_type, &count, windows.data());
    if (again == NVML_SUCCESS) {
        EXPECT_EQ(count, 1U);
        EXPECT_GT(windows[0].timeStamp, newest);
    } else {
        EXPECT_EQ(again, 6);
    }
    count = 4;
    EXPECT_EQ(device_samples(dev1, 0, 0, &value_type, &count, windows.data()),
              NVML_ERROR_NOT_SUPPORTED); // power samples: not simulated
    CUcontext popped = nullptr;
    ASSERT_EQ(fn<CUresult (*)(CUcontext*)>("cuCtxPopCurrent_v2")(&popped), CUDA_SUCCESS);
}

} // namespace
