// gpu_probe: a small CUDA driver API program for tests/gpu/acceptance, so
// that the memory, compute and cuGetProcAddress checks do not depend on
// PyTorch. It dlopens libcuda.so.1, takes cuGetProcAddress from it, and
// gets every other function through cuGetProcAddress, as CUDA runtimes do
// (with libgpulimit.so preloaded, that is the path the interposer's
// cuGetProcAddress answers). Its kernels are PTX, JIT-compiled by the
// driver (cuModuleLoadData), so one binary runs on any GPU.
//
// Built here against the stand-in's declarations (gpulimit/src/cuda_abi.hpp,
// plus the few below); the stand-in libcuda runs it in CI.
//
//   gpu_probe info                       driver version, device, memory figures
//   gpu_probe mem MIB...                 one cuMemAlloc each: "alloc MIB=ok|CODE"
//   gpu_probe spin SECONDS KERNEL_US [SYNC_EVERY]
//                                        spin kernels back to back on a stream
//   gpu_probe launch COUNT [ROUNDS]      empty kernels: nanoseconds per launch
//   ... hold                             (after any) stay until killed
// Output: one "key=value ..." line per result; exit 0, or 1 on a driver error
// it did not expect (the line says which call and code).
#include "cuda_abi.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dlfcn.h>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" {
using CUmodule = struct CUmod_st*;
}

namespace {

// The kernels: a spin for a given number of nanoseconds (%globaltimer), and
// an empty one. PTX ISA 6.0 for sm_50: any driver since CUDA 10 JIT-compiles
// it for its GPU.
constexpr const char* kPtx = R"(.version 6.0
.target sm_50
.address_size 64

.visible .entry spin(.param .u64 spin_ns)
{
    .reg .pred %p;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [spin_ns];
    mov.u64 %rd2, %globaltimer;
    add.s64 %rd3, %rd2, %rd1;
$L_loop:
    mov.u64 %rd4, %globaltimer;
    setp.lt.u64 %p, %rd4, %rd3;
    @%p bra $L_loop;
    ret;
}

.visible .entry noop()
{
    ret;
}
)";

struct Driver {
    CUresult (*cuGetProcAddress)(const char*, void**, int, cuuint64_t, int*) = nullptr;
    CUresult (*cuInit)(unsigned) = nullptr;
    CUresult (*cuDriverGetVersion)(int*) = nullptr;
    CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
    CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
    CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
    CUresult (*cuMemGetInfo)(size_t*, size_t*) = nullptr;
    CUresult (*cuDeviceTotalMem)(size_t*, CUdevice) = nullptr;
    CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
    CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
    CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
    CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
    CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;
    CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void**, void**) = nullptr;
};

// The cudaVersion a CUDA 12 runtime asks with: the _v2 ABIs of cuMemAlloc,
// cuMemGetInfo and cuDeviceTotalMem.
constexpr int kCudaVersion = 12000;

uint64_t now_ns() {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(t.tv_nsec);
}

[[noreturn]] void die(const char* what, CUresult code) {
    std::printf("error call=%s code=%d\n", what, code);
    std::fflush(stdout);
    std::exit(1);
}

void check(CUresult code, const char* what) {
    if (code != CUDA_SUCCESS) {
        die(what, code);
    }
}

template <typename F>
void resolve(const Driver& driver, const char* name, F& function) {
    void* address = nullptr;
    int status = -1;
    CUresult code =
        driver.cuGetProcAddress(name, &address, kCudaVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (code != CUDA_SUCCESS || address == nullptr) {
        std::printf("error call=cuGetProcAddress(%s) code=%d status=%d\n", name, code, status);
        std::exit(1);
    }
    std::memcpy(&function, &address, sizeof function);
}

Driver load() {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (cuda == nullptr) {
        std::printf("error call=dlopen(libcuda.so.1) reason=\"%s\"\n", dlerror());
        std::exit(1);
    }
    Driver driver;
    void* entry = dlsym(cuda, "cuGetProcAddress_v2");
    if (entry == nullptr) {
        std::printf("error call=dlsym(cuGetProcAddress_v2): a driver before CUDA 12\n");
        std::exit(1);
    }
    std::memcpy(&driver.cuGetProcAddress, &entry, sizeof entry);
    // cuInit by name (with libgpulimit.so preloaded, dlsym on the driver's
    // handle answers its wrapper); every other function through
    // cuGetProcAddress once the driver is initialized.
    void* init = dlsym(cuda, "cuInit");
    if (init == nullptr) {
        std::printf("error call=dlsym(cuInit)\n");
        std::exit(1);
    }
    std::memcpy(&driver.cuInit, &init, sizeof init);
    check(driver.cuInit(0), "cuInit");
    resolve(driver, "cuDriverGetVersion", driver.cuDriverGetVersion);
    resolve(driver, "cuDeviceGet", driver.cuDeviceGet);
    resolve(driver, "cuDeviceGetName", driver.cuDeviceGetName);
    resolve(driver, "cuDevicePrimaryCtxRetain", driver.cuDevicePrimaryCtxRetain);
    resolve(driver, "cuCtxSetCurrent", driver.cuCtxSetCurrent);
    resolve(driver, "cuMemGetInfo", driver.cuMemGetInfo);
    resolve(driver, "cuDeviceTotalMem", driver.cuDeviceTotalMem);
    resolve(driver, "cuMemAlloc", driver.cuMemAlloc);
    resolve(driver, "cuMemFree", driver.cuMemFree);
    resolve(driver, "cuModuleLoadData", driver.cuModuleLoadData);
    resolve(driver, "cuModuleGetFunction", driver.cuModuleGetFunction);
    resolve(driver, "cuStreamCreate", driver.cuStreamCreate);
    resolve(driver, "cuStreamSynchronize", driver.cuStreamSynchronize);
    resolve(driver, "cuLaunchKernel", driver.cuLaunchKernel);
    return driver;
}

struct Session {
    Driver driver;
    CUdevice device = 0;
    CUcontext context = nullptr;
    CUmodule module = nullptr;
};

void open_context(Session& s) {
    const char* ordinal = std::getenv("GPU_PROBE_DEVICE");
    check(s.driver.cuDeviceGet(&s.device, ordinal != nullptr ? std::atoi(ordinal) : 0),
          "cuDeviceGet");
    check(s.driver.cuDevicePrimaryCtxRetain(&s.context, s.device), "cuDevicePrimaryCtxRetain");
    check(s.driver.cuCtxSetCurrent(s.context), "cuCtxSetCurrent");
}

CUfunction kernel(Session& s, const char* name) {
    if (s.module == nullptr) {
        check(s.driver.cuModuleLoadData(&s.module, kPtx), "cuModuleLoadData");
    }
    CUfunction function = nullptr;
    check(s.driver.cuModuleGetFunction(&function, s.module, name), "cuModuleGetFunction");
    return function;
}

void info(Session& s) {
    int version = 0;
    check(s.driver.cuDriverGetVersion(&version), "cuDriverGetVersion");
    char name[256] = {};
    check(s.driver.cuDeviceGetName(name, sizeof name, s.device), "cuDeviceGetName");
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    size_t device_total = 0;
    check(s.driver.cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo");
    check(s.driver.cuDeviceTotalMem(&device_total, s.device), "cuDeviceTotalMem");
    std::printf("info driver=%d name=\"%s\" free=%zu total=%zu device_total=%zu\n", version, name,
                free_bytes, total_bytes, device_total);
}

void mem(Session& s, const std::vector<unsigned long long>& sizes_mib) {
    for (unsigned long long mib : sizes_mib) {
        CUdeviceptr pointer = 0;
        CUresult code = s.driver.cuMemAlloc(&pointer, static_cast<size_t>(mib << 20));
        if (code == CUDA_SUCCESS) {
            std::printf("alloc mib=%llu result=ok\n", mib);
        } else {
            std::printf("alloc mib=%llu result=%s code=%d\n", mib,
                        code == CUDA_ERROR_OUT_OF_MEMORY ? "oom" : "error", code);
        }
        std::fflush(stdout);
    }
}

void spin(Session& s, double seconds, unsigned kernel_us, unsigned sync_every) {
    CUfunction function = kernel(s, "spin");
    CUstream stream = nullptr;
    check(s.driver.cuStreamCreate(&stream, 1), "cuStreamCreate");
    unsigned long long spin_ns = kernel_us * 1000ULL;
    void* params[] = {&spin_ns};
    const uint64_t start = now_ns();
    const uint64_t until = start + static_cast<uint64_t>(seconds * 1e9);
    unsigned long long launched = 0;
    uint64_t waited_ns = 0; // inside cuLaunchKernel: the compute gate's waits
    for (uint64_t t = start; t < until; t = now_ns()) {
        const uint64_t before = now_ns();
        check(s.driver.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr),
              "cuLaunchKernel");
        waited_ns += now_ns() - before;
        if (++launched % sync_every == 0) {
            check(s.driver.cuStreamSynchronize(stream), "cuStreamSynchronize");
        }
    }
    check(s.driver.cuStreamSynchronize(stream), "cuStreamSynchronize");
    const double elapsed = static_cast<double>(now_ns() - start) / 1e9;
    std::printf("spin kernels=%llu kernel_us=%u seconds=%.3f share=%.4f launch_wait_s=%.3f\n",
                launched, kernel_us, elapsed,
                static_cast<double>(launched) * kernel_us / 1e6 / elapsed,
                static_cast<double>(waited_ns) / 1e9);
}

void launch(Session& s, unsigned long long count, unsigned rounds) {
    CUfunction function = kernel(s, "noop");
    CUstream stream = nullptr;
    check(s.driver.cuStreamCreate(&stream, 1), "cuStreamCreate");
    // One warm-up launch (the first carries the module's lazy load).
    check(s.driver.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr),
          "cuLaunchKernel");
    check(s.driver.cuStreamSynchronize(stream), "cuStreamSynchronize");
    std::vector<double> per_launch;
    for (unsigned round = 0; round < rounds; ++round) {
        const uint64_t start = now_ns();
        for (unsigned long long i = 0; i < count; ++i) {
            check(s.driver.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr),
                  "cuLaunchKernel");
        }
        check(s.driver.cuStreamSynchronize(stream), "cuStreamSynchronize");
        per_launch.push_back(static_cast<double>(now_ns() - start) / static_cast<double>(count));
    }
    std::vector<double> sorted = per_launch;
    std::sort(sorted.begin(), sorted.end());
    std::printf("launch count=%llu rounds=%u median_ns=%.1f min_ns=%.1f\n", count, rounds,
                sorted[sorted.size() / 2], sorted.front());
}

unsigned long long number(const char* text, const char* what) {
    char* end = nullptr;
    errno = 0;
    unsigned long long value = std::strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') {
        std::fprintf(stderr, "gpu_probe: %s: not a number: %s\n", what, text);
        std::exit(2);
    }
    return value;
}

int usage() {
    std::fputs("usage: gpu_probe info | mem MIB... | spin SECONDS KERNEL_US [SYNC_EVERY] | "
               "launch COUNT [ROUNDS]  [hold]\n",
               stderr);
    return 2;
}

} // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc < 2) {
        return usage();
    }
    const std::string command = argv[1];
    bool hold = std::strcmp(argv[argc - 1], "hold") == 0;
    const int last = hold ? argc - 1 : argc;
    Session s;
    s.driver = load();
    open_context(s);
    if (command == "info" && last == 2) {
        info(s);
    } else if (command == "mem" && last > 2) {
        std::vector<unsigned long long> sizes;
        for (int i = 2; i < last; ++i) {
            sizes.push_back(number(argv[i], "MIB"));
        }
        mem(s, sizes);
    } else if (command == "spin" && (last == 4 || last == 5)) {
        spin(s, std::strtod(argv[2], nullptr), static_cast<unsigned>(number(argv[3], "KERNEL_US")),
             last == 5 ? static_cast<unsigned>(number(argv[4], "SYNC_EVERY")) : 4);
    } else if (command == "launch" && (last == 3 || last == 4)) {
        launch(s, number(argv[2], "COUNT"),
               last == 4 ? static_cast<unsigned>(number(argv[3], "ROUNDS")) : 5);
    } else {
        return usage();
    }
    if (hold) {
        std::printf("holding pid=%d\n", static_cast<int>(getpid()));
        for (;;) {
            pause();
        }
    }
    return 0;
}
