// A GPU job for the compute-cap tests (tests only): launches fixed-length
// kernels on the stand-in driver for a while and prints the share of the
// device its kernels got, measured on the stand-in's timeline after a
// warm-up (busy time of this process / wall time).
//
// Bound to the stand-in libcuda.so.1 by name, so libgpulimit.so, when
// preloaded, sits in between as it does for a real program.
//
//   gpulimit_compute_load [key=value...]
//     device=0        CUDA ordinal
//     kernel_us=2000  kernel duration
//     warmup=2.5      seconds before the measurement (the controller settles)
//     seconds=5       seconds measured
//     sync=4          cuStreamSynchronize every this many launches (0: never;
//                     the queue fills and launches wait for room)
//     depth=1024      the stream's queue depth
//     api=kernel      kernel | ptsz | ex | coop | graph
//     resolve=direct  direct: call the launch function bound by name;
//                     getproc: call what cuGetProcAddress_v2 answers for it
//                     (CUDA 12.0, the per-thread variant for ptsz), as the
//                     CUDA runtime does
//     graph=5         kernels per graph (api=graph): captured once, replayed
//     capture=0       1: a second thread captures launches on its own stream
//                     meanwhile and reports the slowest capture-time launch
//     trace=0         ms: also print the share in each slice of this length
//                     from the start (warm-up included), to see settling
//
// The share is the busy time in the window fixed in advance (warm-up end to
// warm-up end + seconds) over its length: a launch held past the window's
// end does not stretch it (a loop that can only stop after a held launch
// returns would end every window on an idle stretch).
// Output, one line: share=S busy_ns=B wall_ns=W launches=N max_launch_us=L
// [capture_launches=C capture_max_us=M]
#include "cuda_abi.hpp"
#include "standin_control.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dlfcn.h>
#include <string>
#include <thread>
#include <unistd.h>

extern "C" {
CUresult cuInit(unsigned flags);
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuStreamCreate(CUstream* stream, unsigned flags);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuLaunchKernel(void* f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CUstream, void**, void**);
CUresult cuLaunchKernel_ptsz(void* f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**);
CUresult cuLaunchKernelEx(const void* config, void* f, void** params, void** extra);
CUresult cuLaunchCooperativeKernel(void* f, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, CUstream, void**);
CUresult cuStreamBeginCapture_v2(CUstream stream, int mode);
CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph);
CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream);
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus);
}

namespace {

struct LaunchConfig { // cuda.h's CUlaunchConfig
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void* attrs;
    unsigned numAttrs;
};

uint64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

void check(CUresult r, const char* what) {
    if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "compute_load: %s returned %d\n", what, r);
        std::fflush(stderr);
        _exit(1);
    }
}

struct Options {
    int device = 0;
    uint64_t kernel_ns = 2'000'000;
    double warmup = 2.5;
    double seconds = 5;
    unsigned sync = 4;
    unsigned depth = 1024;
    std::string api = "kernel";
    bool getproc = false;
    unsigned graph = 5;
    bool capture = false;
    uint64_t trace_ns = 0;
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const size_t eq = arg.find('=');
        if (eq == std::string::npos) {
            std::fprintf(stderr, "compute_load: want key=value, got '%s'\n", argv[i]);
            _exit(2);
        }
        const std::string key = arg.substr(0, eq);
        const std::string value = arg.substr(eq + 1);
        if (key == "device") {
            o.device = std::stoi(value);
        } else if (key == "kernel_us") {
            o.kernel_ns = std::stoull(value) * 1000;
        } else if (key == "warmup") {
            o.warmup = std::stod(value);
        } else if (key == "seconds") {
            o.seconds = std::stod(value);
        } else if (key == "sync") {
            o.sync = static_cast<unsigned>(std::stoul(value));
        } else if (key == "depth") {
            o.depth = static_cast<unsigned>(std::stoul(value));
        } else if (key == "api") {
            o.api = value;
        } else if (key == "resolve") {
            if (value != "direct" && value != "getproc") {
                std::fprintf(stderr, "compute_load: resolve=direct|getproc, got '%s'\n",
                             value.c_str());
                _exit(2);
            }
            o.getproc = value == "getproc";
        } else if (key == "graph") {
            o.graph = static_cast<unsigned>(std::stoul(value));
        } else if (key == "trace") {
            o.trace_ns = std::stoull(value) * 1'000'000;
        } else if (key == "capture") {
            o.capture = value == "1";
        } else {
            std::fprintf(stderr, "compute_load: unknown key '%s'\n", key.c_str());
            _exit(2);
        }
    }
    return o;
}

int g_function = 0; // a CUfunction the stand-in accepts (any non-null pointer)

// The launch functions the job calls (resolve=).
struct Launchers {
    decltype(&cuLaunchKernel) kernel = &cuLaunchKernel;
    decltype(&cuLaunchKernel_ptsz) kernel_ptsz = &cuLaunchKernel_ptsz;
    decltype(&cuLaunchKernelEx) ex = &cuLaunchKernelEx;
    decltype(&cuLaunchCooperativeKernel) coop = &cuLaunchCooperativeKernel;
    decltype(&cuGraphLaunch) graph = &cuGraphLaunch;
};

template <typename Function>
void get_proc(Function& function, const char* symbol, cuuint64_t flags) {
    void* pointer = nullptr;
    check(cuGetProcAddress_v2(symbol, &pointer, 12000, flags, nullptr), symbol);
    function = reinterpret_cast<Function>(pointer);
}

Launchers launchers(bool getproc) {
    Launchers l;
    if (getproc) {
        get_proc(l.kernel, "cuLaunchKernel", CU_GET_PROC_ADDRESS_LEGACY_STREAM);
        get_proc(l.kernel_ptsz, "cuLaunchKernel", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
        get_proc(l.ex, "cuLaunchKernelEx", CU_GET_PROC_ADDRESS_LEGACY_STREAM);
        get_proc(l.coop, "cuLaunchCooperativeKernel", CU_GET_PROC_ADDRESS_LEGACY_STREAM);
        get_proc(l.graph, "cuGraphLaunch", CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    }
    return l;
}

// Captures launches on its own stream over and over until told to stop;
// records how long the slowest capture-time launch took.
struct CaptureProbe {
    std::atomic<bool> stop{false};
    uint64_t launches = 0;
    uint64_t max_ns = 0;
    void run(CUcontext ctx) {
        check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
        CUstream stream = nullptr;
        check(cuStreamCreate(&stream, 1), "cuStreamCreate");
        while (!stop.load()) {
            check(cuStreamBeginCapture_v2(stream, 0), "cuStreamBeginCapture_v2");
            for (int i = 0; i < 10; ++i) {
                const uint64_t t0 = now_ns();
                check(cuLaunchKernel(&g_function, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr),
                      "cuLaunchKernel (capturing)");
                max_ns = std::max(max_ns, now_ns() - t0);
                ++launches;
            }
            CUgraph graph = nullptr;
            check(cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
            usleep(2000);
        }
    }
};

} // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    auto set_kernel_ns = reinterpret_cast<gpulimit_standin_set_kernel_ns_fn>(
        dlsym(cuda, GPULIMIT_STANDIN_SET_KERNEL_NS));
    auto set_depth = reinterpret_cast<gpulimit_standin_set_queue_depth_fn>(
        dlsym(cuda, GPULIMIT_STANDIN_SET_QUEUE_DEPTH));
    auto busy_ns =
        reinterpret_cast<gpulimit_standin_busy_ns_fn>(dlsym(cuda, GPULIMIT_STANDIN_BUSY_NS));
    if (set_kernel_ns == nullptr || set_depth == nullptr || busy_ns == nullptr) {
        std::fprintf(stderr, "compute_load: not the stand-in driver\n");
        return 1;
    }
    set_kernel_ns(o.kernel_ns);
    set_depth(o.depth);

    check(cuInit(0), "cuInit");
    CUcontext ctx = nullptr;
    check(cuDevicePrimaryCtxRetain(&ctx, o.device), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    CUstream stream = nullptr;
    check(cuStreamCreate(&stream, 1), "cuStreamCreate");

    CUgraphExec exec = nullptr;
    if (o.api == "graph") {
        check(cuStreamBeginCapture_v2(stream, 0), "cuStreamBeginCapture_v2");
        for (unsigned i = 0; i < o.graph; ++i) {
            check(cuLaunchKernel(&g_function, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr),
                  "cuLaunchKernel (capturing)");
        }
        CUgraph graph = nullptr;
        check(cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
        check(cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
    }
    LaunchConfig config{1, 1, 1, 1, 1, 1, 0, stream, nullptr, 0};
    const Launchers l = launchers(o.getproc);
    const auto launch = [&] {
        if (o.api == "kernel") {
            return l.kernel(&g_function, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
        }
        if (o.api == "ptsz") { // the per-thread default stream
            return l.kernel_ptsz(&g_function, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
        }
        if (o.api == "ex") {
            return l.ex(&config, &g_function, nullptr, nullptr);
        }
        if (o.api == "coop") {
            return l.coop(&g_function, 1, 1, 1, 1, 1, 1, 0, stream, nullptr);
        }
        if (o.api == "graph") {
            return l.graph(exec, stream);
        }
        std::fprintf(stderr, "compute_load: unknown api '%s'\n", o.api.c_str());
        _exit(2);
    };
    CUstream sync_stream = o.api == "ptsz" ? reinterpret_cast<CUstream>(2) : stream;

    CaptureProbe probe;
    std::thread capture_thread;
    if (o.capture) {
        capture_thread = std::thread([&] { probe.run(ctx); });
    }

    const uint64_t start = now_ns();
    const uint64_t measure_from = start + static_cast<uint64_t>(o.warmup * 1e9);
    const uint64_t until = measure_from + static_cast<uint64_t>(o.seconds * 1e9);
    uint64_t launches = 0;
    uint64_t max_launch_ns = 0;
    for (uint64_t t = start; t < until; t = now_ns()) {
        check(launch(), "launch");
        const uint64_t took = now_ns() - t;
        if (t >= measure_from) {
            max_launch_ns = std::max(max_launch_ns, took);
        }
        ++launches;
        if (o.sync != 0 && launches % o.sync == 0) {
            check(cuStreamSynchronize(sync_stream), "cuStreamSynchronize");
        }
    }
    if (o.capture) {
        probe.stop.store(true);
        capture_thread.join();
    }
    const uint64_t busy = busy_ns(o.device, getpid(), measure_from, until);
    const uint64_t wall = until - measure_from;
    if (o.trace_ns != 0) {
        std::fprintf(stderr,
                     "slices of %llu ms:", static_cast<unsigned long long>(o.trace_ns / 1'000'000));
        for (uint64_t t = start; t + o.trace_ns <= until; t += o.trace_ns) {
            std::fprintf(stderr, " %.2f",
                         static_cast<double>(busy_ns(o.device, getpid(), t, t + o.trace_ns)) /
                             static_cast<double>(o.trace_ns));
        }
        std::fprintf(stderr, "\n");
    }
    std::printf("share=%.4f busy_ns=%llu wall_ns=%llu launches=%llu max_launch_us=%llu",
                static_cast<double>(busy) / static_cast<double>(wall),
                static_cast<unsigned long long>(busy), static_cast<unsigned long long>(wall),
                static_cast<unsigned long long>(launches),
                static_cast<unsigned long long>(max_launch_ns / 1000));
    if (o.capture) {
        std::printf(" capture_launches=%llu capture_max_us=%llu",
                    static_cast<unsigned long long>(probe.launches),
                    static_cast<unsigned long long>(probe.max_ns / 1000));
    }
    std::printf("\n");
    std::fflush(stdout);
    // Kernels still queued (sync=0) need not run: leave without waiting.
    _exit(0);
}
