// gpulimit_cudart_probe: drives Debian's real CUDA runtime (libcudart 11.8)
// through steps named on the command line, so tests reach the driver the way
// applications do: through cudart's own cuGetProcAddress table, with or
// without libgpulimit.so preloaded, over the stand-in libcuda.so.1.
//
//   gpulimit_cudart_probe [--hold] STEP...
//
// One line per step, "step=NAME key=value ...", with err=<cudaError_t> and
// error=<its name> for every runtime call. A CUDA error is printed, not
// fatal: tests check out-of-memory answers. Exit status 2 only for a usage
// error. --hold (or the step "hold") sleeps after the steps until killed, so
// concurrency tests can keep processes and their memory alive.
//
// The runtime's functions are declared here (no CUDA toolkit headers).
#include "standin_control.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" {
using cudaError_t = int;
using cudaStream_t = void*;
using cudaMemPool_t = void*;
using cudaArray_t = void*;
struct cudaChannelFormatDesc {
    int x, y, z, w;
    int f; // cudaChannelFormatKind
};
struct cudaExtent {
    size_t width, height, depth;
};
struct cudaMemLocation {
    int type; // cudaMemLocationType
    int id;
};
struct cudaMemPoolProps {
    int allocType;
    int handleTypes;
    cudaMemLocation location;
    void* win32SecurityAttributes;
    unsigned char reserved[64];
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMalloc(void** devPtr, size_t size);
cudaError_t cudaFree(void* devPtr);
cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height);
cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags);
cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream);
cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool);
cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t minBytesToKeep);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, int attr, void* value);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, int attr, void* value);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
cudaError_t cudaMalloc3DArray(cudaArray_t* array, const cudaChannelFormatDesc* desc,
                              cudaExtent extent, unsigned int flags);
cudaError_t cudaFreeArray(cudaArray_t array);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize(void);
const char* cudaGetErrorName(cudaError_t error);
}

namespace {

constexpr int kMemAttachGlobal = 1;
constexpr int kMemPoolAttrReleaseThreshold = 4;
constexpr int kMemPoolAttrReservedMemCurrent = 5;
constexpr int kMemPoolAttrUsedMemCurrent = 7;
constexpr int kChannelFormatKindFloat = 2;

enum class Kind { plain, async, array };
struct Allocation {
    void* ptr;
    Kind kind;
};

std::vector<Allocation> g_allocations;
cudaMemPool_t g_pool = nullptr; // created by pool-create; else the default pool
int g_device = 0;

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "gpulimit_cudart_probe: %s\n"
                 "usage: gpulimit_cudart_probe [--hold] STEP...\n"
                 "steps: count | device N | meminfo | malloc BYTES | pitch WIDTH HEIGHT |\n"
                 "       managed BYTES | async BYTES | pool-create | pool-alloc BYTES |\n"
                 "       pool-threshold BYTES | pool-trim BYTES | pool-reserved | pool-destroy |\n"
                 "       array3d WIDTH HEIGHT DEPTH | free | sync | free-all |\n"
                 "       calls ABI_NAME | used ORDINAL | sleep MS | hold\n",
                 why);
    std::exit(2);
}

void report(const char* step, cudaError_t err, const std::string& extra = "") {
    std::printf("step=%s err=%d error=%s%s%s\n", step, err, cudaGetErrorName(err),
                extra.empty() ? "" : " ", extra.c_str());
    std::fflush(stdout);
}

std::string kv(const char* key, unsigned long long value) {
    return std::string(key) + "=" + std::to_string(value);
}

std::string ptr_kv(const void* p) {
    char text[32];
    std::snprintf(text, sizeof text, "ptr=%p", p);
    return text;
}

cudaMemPool_t current_pool(cudaError_t* err) {
    if (g_pool != nullptr) {
        *err = 0;
        return g_pool;
    }
    cudaMemPool_t pool = nullptr;
    *err = cudaDeviceGetDefaultMemPool(&pool, g_device);
    return pool;
}

cudaError_t free_one(const Allocation& a) {
    switch (a.kind) {
    case Kind::plain:
        return cudaFree(a.ptr);
    case Kind::async:
        return cudaFreeAsync(a.ptr, nullptr);
    case Kind::array:
        return cudaFreeArray(a.ptr);
    }
    return 0;
}

// The stand-in's controls, when the libcuda.so.1 loaded is the stand-in.
void* standin_symbol(const char* name) {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return cuda != nullptr ? dlsym(cuda, name) : nullptr;
}

[[noreturn]] void hold() {
    std::printf("step=hold pid=%d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    for (;;) {
        pause();
    }
}

class Args {
  public:
    Args(int argc, char** argv) : argc_(argc), argv_(argv) {}
    bool more() const { return next_ < argc_; }
    const char* word() { return argv_[next_++]; }
    unsigned long long number(const char* step) {
        if (!more()) {
            usage((std::string(step) + " needs a number").c_str());
        }
        const char* text = word();
        char* end = nullptr;
        const unsigned long long v = std::strtoull(text, &end, 0);
        if (end == text || *end != '\0') {
            usage((std::string(step) + ": not a number: " + text).c_str());
        }
        return v;
    }

  private:
    int argc_;
    char** argv_;
    int next_ = 1;
};

} // namespace

int main(int argc, char** argv) {
    Args args(argc, argv);
    bool hold_at_end = false;
    if (!args.more()) {
        usage("no steps");
    }
    while (args.more()) {
        const std::string step = args.word();
        const char* s = step.c_str();
        if (step == "--hold") {
            hold_at_end = true;
        } else if (step == "count") {
            int n = -1;
            const cudaError_t err = cudaGetDeviceCount(&n);
            report(s, err, kv("count", static_cast<unsigned long long>(n < 0 ? 0 : n)));
        } else if (step == "device") {
            g_device = static_cast<int>(args.number(s));
            report(s, cudaSetDevice(g_device),
                   kv("device", static_cast<unsigned long long>(g_device)));
        } else if (step == "meminfo") {
            size_t free = 0, total = 0;
            const cudaError_t err = cudaMemGetInfo(&free, &total);
            report(s, err, kv("free", free) + " " + kv("total", total));
        } else if (step == "malloc" || step == "managed" || step == "async") {
            const unsigned long long bytes = args.number(s);
            void* p = nullptr;
            const cudaError_t err = step == "malloc" ? cudaMalloc(&p, bytes)
                                    : step == "managed"
                                        ? cudaMallocManaged(&p, bytes, kMemAttachGlobal)
                                        : cudaMallocAsync(&p, bytes, nullptr);
            if (err == 0) {
                g_allocations.push_back({p, step == "async" ? Kind::async : Kind::plain});
            }
            report(s, err, kv("bytes", bytes) + " " + ptr_kv(p));
        } else if (step == "pitch") {
            const unsigned long long width = args.number(s);
            const unsigned long long height = args.number(s);
            void* p = nullptr;
            size_t pitch = 0;
            const cudaError_t err = cudaMallocPitch(&p, &pitch, width, height);
            if (err == 0) {
                g_allocations.push_back({p, Kind::plain});
            }
            report(s, err,
                   kv("width", width) + " " + kv("height", height) + " " + kv("pitch", pitch) +
                       " " + ptr_kv(p));
        } else if (step == "pool-create") {
            cudaMemPoolProps props{};
            props.allocType = 1;     // cudaMemAllocationTypePinned
            props.location.type = 1; // cudaMemLocationTypeDevice
            props.location.id = g_device;
            cudaMemPool_t pool = nullptr;
            const cudaError_t err = cudaMemPoolCreate(&pool, &props);
            if (err == 0) {
                g_pool = pool;
            }
            report(s, err, kv("device", static_cast<unsigned long long>(g_device)));
        } else if (step == "pool-alloc") {
            const unsigned long long bytes = args.number(s);
            cudaError_t err = 0;
            cudaMemPool_t pool = current_pool(&err);
            void* p = nullptr;
            if (err == 0) {
                err = cudaMallocFromPoolAsync(&p, bytes, pool, nullptr);
            }
            if (err == 0) {
                g_allocations.push_back({p, Kind::async});
            }
            report(s, err, kv("bytes", bytes) + " " + ptr_kv(p));
        } else if (step == "pool-threshold" || step == "pool-trim") {
            unsigned long long bytes = args.number(s);
            cudaError_t err = 0;
            cudaMemPool_t pool = current_pool(&err);
            if (err == 0) {
                err = step == "pool-trim"
                          ? cudaMemPoolTrimTo(pool, bytes)
                          : cudaMemPoolSetAttribute(pool, kMemPoolAttrReleaseThreshold, &bytes);
            }
            report(s, err, kv("bytes", bytes));
        } else if (step == "pool-reserved") {
            cudaError_t err = 0;
            cudaMemPool_t pool = current_pool(&err);
            unsigned long long reserved = 0, used = 0;
            if (err == 0) {
                err = cudaMemPoolGetAttribute(pool, kMemPoolAttrReservedMemCurrent, &reserved);
            }
            if (err == 0) {
                err = cudaMemPoolGetAttribute(pool, kMemPoolAttrUsedMemCurrent, &used);
            }
            report(s, err, kv("reserved", reserved) + " " + kv("used", used));
        } else if (step == "pool-destroy") {
            if (g_pool == nullptr) {
                usage("pool-destroy without pool-create");
            }
            const cudaError_t err = cudaMemPoolDestroy(g_pool);
            g_pool = nullptr;
            report(s, err);
        } else if (step == "array3d") {
            const unsigned long long w = args.number(s);
            const unsigned long long h = args.number(s);
            const unsigned long long d = args.number(s);
            const cudaChannelFormatDesc desc{32, 0, 0, 0, kChannelFormatKindFloat};
            cudaArray_t array = nullptr;
            const cudaError_t err = cudaMalloc3DArray(&array, &desc, cudaExtent{w, h, d}, 0);
            if (err == 0) {
                g_allocations.push_back({array, Kind::array});
            }
            report(s, err, kv("width", w) + " " + kv("height", h) + " " + kv("depth", d));
        } else if (step == "free") {
            if (g_allocations.empty()) {
                usage("free with nothing allocated");
            }
            const Allocation a = g_allocations.back();
            g_allocations.pop_back();
            report(s, free_one(a), ptr_kv(a.ptr));
        } else if (step == "sync") {
            report(s, cudaStreamSynchronize(nullptr));
        } else if (step == "free-all") {
            cudaError_t first = 0;
            const size_t n = g_allocations.size();
            while (!g_allocations.empty()) {
                const cudaError_t err = free_one(g_allocations.back());
                g_allocations.pop_back();
                first = first != 0 ? first : err;
            }
            report(s, first, kv("freed", n));
        } else if (step == "calls") {
            const char* name = args.more() ? args.word() : nullptr;
            if (name == nullptr) {
                usage("calls needs an ABI name");
            }
            auto calls =
                reinterpret_cast<gpulimit_standin_calls_fn>(standin_symbol(GPULIMIT_STANDIN_CALLS));
            std::printf("step=calls name=%s count=%s\n", name,
                        calls != nullptr ? std::to_string(calls(name)).c_str() : "unavailable");
            std::fflush(stdout);
        } else if (step == "used") {
            const auto ordinal = static_cast<int>(args.number(s));
            auto used = reinterpret_cast<gpulimit_standin_device_used_fn>(
                standin_symbol(GPULIMIT_STANDIN_DEVICE_USED));
            std::printf("step=used device=%d bytes=%s\n", ordinal,
                        used != nullptr ? std::to_string(used(ordinal)).c_str() : "unavailable");
            std::fflush(stdout);
        } else if (step == "sleep") {
            usleep(static_cast<useconds_t>(args.number(s) * 1000));
        } else if (step == "hold") {
            hold();
        } else {
            usage(("unknown step: " + step).c_str());
        }
    }
    if (hold_at_end) {
        hold();
    }
    return 0;
}
