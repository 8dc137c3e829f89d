// The real driver behind libgpulimit.so: libcuda.so.1's and
// libnvidia-ml.so.1's functions, one pointer per entry of entry_points.def,
// and glibc's own dlsym.
//
// Each library is resolved once, on first use, from its dlopen handle
// (dlopen(RTLD_NOLOAD) finds the copy the process already has; dlopen loads
// it otherwise) with the real dlsym. Never RTLD_NEXT: a program may have
// dlopened libcuda RTLD_LOCAL, and then it is not "next" to anything. A name
// the driver lacks (an old driver, a newer ABI version) is a null pointer.
//
// Safe from any thread, at any time, in a forked child and in a signal
// handler that interrupted a resolution: no lock, no heap (see real.cpp).
#pragma once

#include "cuda_abi.hpp"
#include "gpuinit/nvml/api.hpp"

// Our exports: extern "C" with default visibility (the library is built
// -fvisibility=hidden; the version script can only export what is visible).
// The same tokens as in runtime.hpp, so both headers may define it.
#ifndef GPULIMIT_EXPORT
#define GPULIMIT_EXPORT extern "C" __attribute__((visibility("default")))
#endif

// Our wrappers, by exported ABI name: the CUDA ones generated in entries.cpp,
// the NVML ones defined in hooks_report.cpp.
#define GPULIMIT_CUDA_HOOK(name, params, args) GPULIMIT_EXPORT CUresult name params;
#define GPULIMIT_NVML_HOOK(name, params) GPULIMIT_EXPORT nvmlReturn_t name params;
#include "entry_points.def"

// The parameter list of an entry without its parentheses.
#define GPULIMIT_EXPAND(...) __VA_ARGS__

// What each CUDA wrapper does, defined in hooks_*.cpp and resolve.cpp:
// gpulimit::hook::NAME(self, params...) with self the real function to call
// for it, of type gpulimit::hook::NAME_fn. Two kinds of wrapper call it
// (entries.cpp): the export NAME, with libcuda's export of that name, and
// the wrappers hooked by name, with the pointer cuGetProcAddress returned.
// self may be null (an old driver lacks the function): the body then says
// CUDA_ERROR_NOT_FOUND where it would call it (GPULIMIT_CALL_SELF).
namespace gpulimit::hook {
#define GPULIMIT_CUDA_HOOK(name, params, args)                                                     \
    using name##_fn = CUresult(*) params;                                                          \
    CUresult name(name##_fn self, GPULIMIT_EXPAND params);
#include "entry_points.def"
} // namespace gpulimit::hook

#define GPULIMIT_CALL_SELF(...) (self != nullptr ? self(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND)

namespace gpulimit {

// libcuda.so.1: every CUDA entry of entry_points.def, hooked or not.
struct RealCuda {
#define GPULIMIT_CUDA_HOOK(name, params, args) CUresult(*name) params;
#define GPULIMIT_CUDA_REAL(name, params) CUresult(*name) params;
#include "entry_points.def"
    void* handle; // libcuda.so.1's dlopen handle; null when it cannot be loaded
};

// libnvidia-ml.so.1: libgpuinit's NVML table (gpuinit/nvml/api.hpp), the
// hooked functions' real ones among them.
struct RealNvml : gpuinit::nvml::Functions {
    void* handle = nullptr; // libnvidia-ml.so.1's dlopen handle; null when it cannot be loaded
};

// Resolved on the first call (which loads the library if the process has
// not), the same answer ever after. Separate, so that a CUDA program does
// not load NVML.
const RealCuda& real_cuda();
const RealNvml& real_nvml();

inline constexpr const char* kCudaLibrary = "libcuda.so.1";
inline constexpr const char* kNvmlLibrary = gpuinit::nvml::kLibraryName;

using DlsymFunction = void* (*)(void* handle, const char* name);

// For code on dlsym's path before a sanitizer runtime has initialized: the
// ASan and TSan runtimes look their interceptees up with dlsym(RTLD_NEXT)
// during their own start-up, which reaches our dlsym before there is shadow
// memory. Such code must not be instrumented (sanitized test builds only;
// a no-op otherwise).
#define GPULIMIT_NOT_SANITIZED __attribute__((no_sanitize("address", "thread", "undefined")))

// glibc's dlsym (dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"), else the port's
// first version), never our own; null only if glibc has none (cannot happen
// with glibc). Cached after the first call.
GPULIMIT_NOT_SANITIZED DlsymFunction real_dlsym_function();

// glibc's dlsym called from this library: for explicit handles only (for
// RTLD_NEXT the caller would be this library, not the program).
inline void* real_dlsym(void* handle, const char* name) {
    const DlsymFunction function = real_dlsym_function();
    return function != nullptr ? function(handle, name) : nullptr;
}

} // namespace gpulimit
