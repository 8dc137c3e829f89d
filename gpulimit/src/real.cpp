// Resolution of the real driver (real.hpp).
//
// Once per library, without a lock: the first caller claims a static
// struct, fills it and publishes its address with a release store; readers
// take the published address with an acquire load. A caller that finds the
// static struct claimed but nothing published yet (another thread is
// filling it, a signal handler interrupted the filler on this very thread,
// or fork() copied a half-done claim into this child) fills a private copy
// in an anonymous mapping instead, and publishes that if it is first. No
// caller ever waits, so there is nothing a signal or a fork can leave held.
// Filling twice is harmless: dlopen and dlsym give the same answers.
#include "real.hpp"

#include <atomic>
#include <dlfcn.h>
#include <sys/mman.h>

namespace gpulimit {
namespace {

template <typename Functions>
class Resolved {
  public:
    const Functions& get(const char* library, void (*fill)(Functions&, void* handle)) {
        const Functions* published = published_.load(std::memory_order_acquire);
        if (published != nullptr) {
            return *published;
        }
        return resolve(library, fill);
    }

  private:
    const Functions& resolve(const char* library, void (*fill)(Functions&, void* handle)) {
        const bool claimed = !claimed_.exchange(true, std::memory_order_acq_rel);
        Functions* target = &storage_;
        if (!claimed) {
            void* page = mmap(nullptr, sizeof(Functions), PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (page == MAP_FAILED) {
                return none_; // every function "missing"; the wrappers say so
            }
            target = static_cast<Functions*>(page);
        }
        *target = Functions{};
        target->handle = open_library(library);
        if (target->handle != nullptr) {
            fill(*target, target->handle);
        }
        const Functions* expected = nullptr;
        if (published_.compare_exchange_strong(expected, target, std::memory_order_acq_rel,
                                               std::memory_order_acquire)) {
            return *target;
        }
        // Someone published first: use theirs. The static struct is never
        // returned to anyone once it lost, so it needs no cleanup.
        if (!claimed) {
            munmap(target, sizeof(Functions));
        }
        return *expected;
    }

    // The copy the process has (whatever path or flags it was opened with),
    // else load it. RTLD_LAZY: the driver's own start-up cost stays where it
    // was. The reference is kept for the life of the process.
    static void* open_library(const char* library) {
        void* handle = dlopen(library, RTLD_NOLOAD | RTLD_LAZY);
        if (handle == nullptr) {
            handle = dlopen(library, RTLD_LAZY);
        }
        if (handle == nullptr) {
            // Ours, not the program's: leave no pending dlerror() behind.
            (void)dlerror();
        }
        return handle;
    }

    std::atomic<const Functions*> published_{nullptr};
    std::atomic<bool> claimed_{false};
    Functions storage_{};
    const Functions none_{};
};

// constinit: no dynamic initializer, nothing runs at load time.
constinit Resolved<RealCuda> g_cuda;
constinit Resolved<RealNvml> g_nvml;

template <typename Function>
void set(Function& slot, void* handle, const char* name) {
    slot = reinterpret_cast<Function>(real_dlsym(handle, name));
}

void fill_cuda(RealCuda& functions, void* handle) {
#define GPULIMIT_CUDA_HOOK(name, params, args) set(functions.name, handle, #name);
#define GPULIMIT_CUDA_REAL(name, params) set(functions.name, handle, #name);
#include "entry_points.def"
}

void fill_nvml(RealNvml& functions, void* handle) {
    gpuinit::nvml::bind(
        functions, [](void* library, const char* name) { return real_dlsym(library, name); },
        handle);
}

// Plain with __atomic builtins rather than std::atomic: std::atomic's
// member functions may stay out of line, instrumented, in a sanitized build
// (see GPULIMIT_NOT_SANITIZED).
constinit DlsymFunction g_real_dlsym = nullptr;

} // namespace

const RealCuda& real_cuda() {
    return g_cuda.get(kCudaLibrary, fill_cuda);
}

const RealNvml& real_nvml() {
    return g_nvml.get(kNvmlLibrary, fill_nvml);
}

GPULIMIT_NOT_SANITIZED DlsymFunction real_dlsym_function() {
    DlsymFunction function = __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
    if (function != nullptr) {
        return function;
    }
    // RTLD_NEXT from this library: glibc's, or that of an interposer loaded
    // after us (which forwards in turn). Our own dlsym is never "next" to us.
    // GLIBC_2.34 first: on older glibc it does not exist, and the first
    // version (in libdl.so.2) is the one.
    function = reinterpret_cast<DlsymFunction>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
    if (function == nullptr) {
        (void)dlerror();
        function = reinterpret_cast<DlsymFunction>(dlvsym(RTLD_NEXT, "dlsym", GPULIMIT_GLIBC_OLD));
    }
    if (function == nullptr) {
        (void)dlerror();
        return nullptr;
    }
    __atomic_store_n(&g_real_dlsym, function, __ATOMIC_RELEASE);
    return function;
}

} // namespace gpulimit
