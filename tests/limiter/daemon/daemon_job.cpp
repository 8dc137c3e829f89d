// A GPU job for the host daemon's end-to-end tests (tests only): bound to
// the stand-in libcuda.so.1 by name, so libgpulimit.so, when preloaded, sits
// in between as it does for a real program.
//
//   gpulimit_daemon_job [key=value...]
//     device=0      CUDA ordinal
//     alloc_mb=0    MiB allocated with cuMemAlloc_v2 (the interposer counts it)
//     outside_mb=0  MiB the stand-in driver takes that the interposer never
//                   sees (its graph memory reserve, set by the stand-in's test
//                   control, as a context or a bypassing allocation would)
//     seconds=0     seconds of 2 ms kernels, a synchronization every 4
//     warmup=0      seconds of them before the share is measured
//     hold=0        1: after the rest, sleep until killed
//
// Prints "ready" once the memory is taken (before the kernels), then
// "share=S launches=N" after them; exit 1 on a driver error.
#include "cuda_abi.hpp"
#include "standin_control.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dlfcn.h>
#include <string>
#include <unistd.h>

extern "C" {
CUresult cuInit(unsigned flags);
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes);
CUresult cuStreamCreate(CUstream* stream, unsigned flags);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuLaunchKernel(void* f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CUstream, void**, void**);
}

namespace {

uint64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

void check(CUresult r, const char* what) {
    if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "daemon_job: %s returned %d\n", what, r);
        std::fflush(stderr);
        _exit(1);
    }
}

int g_function = 0; // a CUfunction the stand-in accepts (any non-null pointer)

} // namespace

int main(int argc, char** argv) {
    int device = 0;
    uint64_t alloc_mb = 0;
    uint64_t outside_mb = 0;
    double seconds = 0;
    double warmup = 0;
    bool hold = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const size_t eq = arg.find('=');
        const std::string key = arg.substr(0, eq);
        const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
        if (key == "device") {
            device = std::stoi(value);
        } else if (key == "alloc_mb") {
            alloc_mb = std::stoull(value);
        } else if (key == "outside_mb") {
            outside_mb = std::stoull(value);
        } else if (key == "seconds") {
            seconds = std::stod(value);
        } else if (key == "warmup") {
            warmup = std::stod(value);
        } else if (key == "hold") {
            hold = value == "1";
        } else {
            std::fprintf(stderr, "daemon_job: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    auto set_kernel_ns = reinterpret_cast<gpulimit_standin_set_kernel_ns_fn>(
        dlsym(cuda, GPULIMIT_STANDIN_SET_KERNEL_NS));
    auto set_reserved = reinterpret_cast<gpulimit_standin_set_graph_reserved_fn>(
        dlsym(cuda, GPULIMIT_STANDIN_SET_GRAPH_RESERVED));
    auto busy_ns =
        reinterpret_cast<gpulimit_standin_busy_ns_fn>(dlsym(cuda, GPULIMIT_STANDIN_BUSY_NS));
    if (set_kernel_ns == nullptr || set_reserved == nullptr || busy_ns == nullptr) {
        std::fprintf(stderr, "daemon_job: not the stand-in driver\n");
        return 1;
    }
    set_kernel_ns(2'000'000);
    check(cuInit(0), "cuInit");
    CUcontext ctx = nullptr;
    check(cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    if (alloc_mb != 0) {
        CUdeviceptr pointer = 0;
        check(cuMemAlloc_v2(&pointer, alloc_mb << 20), "cuMemAlloc_v2");
    }
    if (outside_mb != 0 && set_reserved(device, outside_mb << 20) != 0) {
        std::fprintf(stderr, "daemon_job: the stand-in refused %llu MiB outside\n",
                     static_cast<unsigned long long>(outside_mb));
        return 1;
    }
    std::printf("ready pid=%d\n", static_cast<int>(getpid()));
    std::fflush(stdout);

    if (seconds > 0) {
        CUstream stream = nullptr;
        check(cuStreamCreate(&stream, 1), "cuStreamCreate");
        const uint64_t start = now_ns();
        const uint64_t from = start + static_cast<uint64_t>(warmup * 1e9);
        const uint64_t until = from + static_cast<uint64_t>(seconds * 1e9);
        uint64_t launches = 0;
        for (uint64_t t = start; t < until; t = now_ns()) {
            check(cuLaunchKernel(&g_function, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr),
                  "cuLaunchKernel");
            if (++launches % 4 == 0) {
                check(cuStreamSynchronize(stream), "cuStreamSynchronize");
            }
        }
        check(cuStreamSynchronize(stream), "cuStreamSynchronize");
        const uint64_t busy = busy_ns(device, getpid(), from, until);
        std::printf("share=%.4f launches=%llu\n",
                    static_cast<double>(busy) / static_cast<double>(until - from),
                    static_cast<unsigned long long>(launches));
        std::fflush(stdout);
    }
    if (hold) {
        for (;;) {
            pause(); // until killed
        }
    }
    return 0;
}
