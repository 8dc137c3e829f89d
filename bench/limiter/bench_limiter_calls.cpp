// Fast-path cost of libgpulimit.so: the same driver calls made directly to
// the stand-in libcuda.so.1 and through the interposer, in one process
// against one stand-in instance, so that the difference is what the
// interposer adds.
//
// The interposer is dlopen'ed RTLD_LOCAL (not preloaded), so this program's
// own dlsym stays glibc's and can hand out the stand-in's functions directly;
// the interposer finds the already loaded stand-in as "the real driver".
//
//   bench_limiter_calls [--gpu-util=N] [google-benchmark flags]
// Paths come from the build (GPULIMIT_LIBRARY, GPULIMIT_STANDIN_CUDA).
//
// The launch benchmark measures the compute cap's gate: without --gpu-util
// the cap is disabled (GPU_UTIL_PER_DEVICE unset); with --gpu-util=95 (the
// highest value that still enables it) every launch goes through the gate,
// which stays open because the stand-in's launches are no-op kernels (no
// busy time for the controller to charge). Each run measures the direct call
// too, so each ratio is taken within one run.
#include "cuda_abi.hpp"

#include <benchmark/benchmark.h>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using Init = CUresult (*)(unsigned);
using DeviceGet = CUresult (*)(CUdevice*, int);
using CtxCreate = CUresult (*)(CUcontext*, unsigned, CUdevice);
using Alloc = CUresult (*)(CUdeviceptr*, size_t);
using Free = CUresult (*)(CUdeviceptr);
using MemGetInfo = CUresult (*)(size_t*, size_t*);
using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);
using Launch = CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**, void**);

struct Calls {
    Alloc alloc = nullptr;
    Free free = nullptr;
    MemGetInfo mem_info = nullptr;
    Launch launch = nullptr;
};

Calls g_direct;
Calls g_interposed;
CUcontext g_context = nullptr;
using CtxSetCurrent = CUresult (*)(CUcontext);
CtxSetCurrent g_set_current = nullptr;

template <typename T>
T must(void* handle, const char* name) {
    void* symbol = dlsym(handle, name);
    if (symbol == nullptr) {
        std::fprintf(stderr, "bench: %s not found: %s\n", name, dlerror());
        std::exit(1);
    }
    return reinterpret_cast<T>(symbol);
}

std::string g_gpu_util; // GPU_UTIL_PER_DEVICE for this run; empty: unset

void set_up() {
    // The limiter on, with a cap the loop never reaches and a private group.
    static std::string state_dir =
        (std::filesystem::temp_directory_path() / ("gpulimit-bench-" + std::to_string(getpid())))
            .string();
    setenv("AMP_VGPU_ENABLE", "1", 1);
    setenv("GPU_MEM_PER_DEVICE", "4294967296", 1);
    setenv("GPU_LIMIT_STATE_DIR", state_dir.c_str(), 1);
    if (g_gpu_util.empty()) {
        unsetenv("GPU_UTIL_PER_DEVICE");
    } else {
        setenv("GPU_UTIL_PER_DEVICE", g_gpu_util.c_str(), 1);
    }
    std::atexit([] {
        std::error_code ignored;
        std::filesystem::remove_all(state_dir, ignored);
    });

    void* standin = dlopen(GPULIMIT_STANDIN_CUDA, RTLD_NOW | RTLD_GLOBAL);
    if (standin != nullptr) {
        g_set_current = must<CtxSetCurrent>(standin, "cuCtxSetCurrent");
    }
    void* interposer = dlopen(GPULIMIT_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (standin == nullptr || interposer == nullptr) {
        std::fprintf(stderr, "bench: %s\n", dlerror());
        std::exit(1);
    }
    g_direct = Calls{must<Alloc>(standin, "cuMemAlloc_v2"), must<Free>(standin, "cuMemFree_v2"),
                     must<MemGetInfo>(standin, "cuMemGetInfo_v2"),
                     must<Launch>(standin, "cuLaunchKernel")};
    // A program reaches cuLaunchKernel through the interposer's
    // cuGetProcAddress, as cudart does: its gated wrapper.
    void* launch = nullptr;
    CUdriverProcAddressQueryResult status = 0;
    if (must<GetProcAddress>(interposer, "cuGetProcAddress_v2")("cuLaunchKernel", &launch, 12000, 0,
                                                                &status) != CUDA_SUCCESS) {
        std::fprintf(stderr, "bench: cuGetProcAddress_v2(cuLaunchKernel) failed\n");
        std::exit(1);
    }
    // Which library's function the launch goes to: the interposer's gated
    // wrapper, or the driver's own when the interposer does not hook it.
    Dl_info where{};
    std::printf("cuLaunchKernel through the interposer: %s\n",
                dladdr(launch, &where) != 0 && where.dli_fname != nullptr ? where.dli_fname : "?");
    g_interposed =
        Calls{must<Alloc>(interposer, "cuMemAlloc_v2"), must<Free>(interposer, "cuMemFree_v2"),
              must<MemGetInfo>(interposer, "cuMemGetInfo_v2"), reinterpret_cast<Launch>(launch)};

    // cuInit through the interposer: it initializes the limiter too.
    CUdevice device = 0;
    CUcontext context = nullptr;
    if (must<Init>(interposer, "cuInit")(0) != CUDA_SUCCESS ||
        must<DeviceGet>(standin, "cuDeviceGet")(&device, 0) != CUDA_SUCCESS ||
        must<CtxCreate>(standin, "cuCtxCreate_v2")(&context, 0, device) != CUDA_SUCCESS) {
        std::fprintf(stderr, "bench: cannot initialize the stand-in through the interposer\n");
        std::exit(1);
    }
    // Launches need a current context on the thread that makes them.
    g_context = context;
}

void alloc_free(benchmark::State& state, const Calls& calls) {
    CUdeviceptr ptr = 0;
    for (auto _ : state) {
        if (calls.alloc(&ptr, 1 << 20) != CUDA_SUCCESS || calls.free(ptr) != CUDA_SUCCESS) {
            state.SkipWithError("allocation failed");
            break;
        }
    }
    state.SetItemsProcessed(state.iterations());
}

void launch_noop(benchmark::State& state, const Calls& calls) {
    g_set_current(g_context);
    int dummy = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(
            calls.launch(&dummy, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
    }
    state.SetItemsProcessed(state.iterations());
}

void mem_get_info(benchmark::State& state, const Calls& calls) {
    size_t free = 0;
    size_t total = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(calls.mem_info(&free, &total));
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_AllocFree_Direct(benchmark::State& state) {
    alloc_free(state, g_direct);
}
void BM_AllocFree_Interposed(benchmark::State& state) {
    alloc_free(state, g_interposed);
}
void BM_LaunchNoop_Direct(benchmark::State& state) {
    launch_noop(state, g_direct);
}
void BM_LaunchNoop_Interposed(benchmark::State& state) {
    launch_noop(state, g_interposed);
}
void BM_MemGetInfo_Direct(benchmark::State& state) {
    mem_get_info(state, g_direct);
}
void BM_MemGetInfo_Interposed(benchmark::State& state) {
    mem_get_info(state, g_interposed);
}

BENCHMARK(BM_AllocFree_Direct)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_AllocFree_Interposed)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_LaunchNoop_Direct)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_LaunchNoop_Interposed)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_MemGetInfo_Direct)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_MemGetInfo_Interposed)->Unit(benchmark::kNanosecond);

// Prints the interposed/direct ratios and ns added per call after the run.
class RatioReporter : public benchmark::ConsoleReporter {
  public:
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const Run& run : runs) {
            if (run.run_type == Run::RT_Iteration && run.iterations > 0) {
                ns_[run.benchmark_name()] = run.GetAdjustedRealTime(); // ns: see Unit below
            }
        }
    }
    void Finalize() override {
        ConsoleReporter::Finalize();
        std::printf("compute cap: %s\n",
                    g_gpu_util.empty()
                        ? "disabled (GPU_UTIL_PER_DEVICE unset)"
                        : ("GPU_UTIL_PER_DEVICE=" + g_gpu_util + ", gate open").c_str());
        for (const char* name : {"BM_AllocFree", "BM_LaunchNoop", "BM_MemGetInfo"}) {
            const auto direct = ns_.find(std::string(name) + "_Direct");
            const auto interposed = ns_.find(std::string(name) + "_Interposed");
            if (direct == ns_.end() || interposed == ns_.end() || direct->second <= 0) {
                continue;
            }
            const double pair_calls = std::string(name) == "BM_AllocFree" ? 2.0 : 1.0;
            std::printf("%-14s interposed/direct %.2fx, %.1f ns added per call (%.1f vs %.1f ns "
                        "per iteration)\n",
                        name + 3, interposed->second / direct->second,
                        (interposed->second - direct->second) / pair_calls, interposed->second,
                        direct->second);
        }
    }

  private:
    std::map<std::string, double> ns_;
};

} // namespace

int main(int argc, char** argv) {
    // --gpu-util=N is ours; the rest is Google Benchmark's.
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg.rfind("--gpu-util=", 0) == 0) {
            g_gpu_util = arg.substr(11);
        } else {
            argv[kept++] = argv[i];
        }
    }
    argc = kept;
    set_up();
    benchmark::Initialize(&argc, argv);
    RatioReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
    return 0;
}
