// How a program reaches our wrappers, beyond direct binding to our exports:
//
// - dlsym(handle, name) on libcuda's or NVML's handle (PyTorch, Triton and
//   NVML users dlopen the driver and look names up): we export dlsym, and
//   for those two handles, with the switch on, a hooked name answers our
//   wrapper. Everything else is glibc's answer.
// - cuGetProcAddress / cuGetProcAddress_v2 (the CUDA runtime gets every
//   driver function this way): the real one picks the variant for the
//   caller's cudaVersion and flags, and we keep its choice:
//   1. An answer that is the real driver's export of a hooked ABI name
//      (recognized by address) becomes our export of that name. This is
//      every answer a real driver has been seen to give (all hooked symbols
//      at CUDA 3.2 to 13.0, flags 0, 1 and 2, on driver 580.159.04): the
//      common path, one compare per hook.
//   2. Any other answer for a symbol we hook is hooked by name: its ABI is
//      derived from (symbol, cudaVersion, flags) the way the driver picks a
//      variant (entries.cpp's table, from cudaTypedefs.h), and the answer
//      becomes a wrapper of that ABI which calls the pointer the driver
//      returned (entries.cpp). A driver that hands out internal pointers
//      (another version, a per-thread variant, a trampoline) is capped like
//      one that hands out its exports, and its callers still run the very
//      function it chose for them.
//   3. Fail closed where the ABI cannot be known: a cudaVersion newer than
//      the table (a new variant may have a new ABI) or below the symbol's
//      first variant, or no wrapper slot left. The request then fails as for
//      a symbol the driver lacks (CUDA_ERROR_NOT_FOUND, SYMBOL_NOT_FOUND)
//      and stderr says why: a program that cannot get cuMemAlloc stops
//      loudly, where passing the pointer through would let it allocate
//      around the cap unseen. Wrapping it with a guessed ABI could crash it.
//   An answer that is already one of our exports (a driver whose table goes
//   through the global scope, where we come first) is kept as it is, and a
//   variant we do not hook (an older ABI of a hooked symbol, say the 32-bit
//   cuArrayCreate) and every symbol we do not hook pass through.
//   GPU_LIMIT_TRACE_PROC_ADDRESS records which of these each answer got
//   (proc_trace.hpp).
#include "entries.hpp"
#include "proc_trace.hpp"
#include "real.hpp"
#include "switch.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

namespace gpulimit {
namespace {

enum class DriverLibrary { None, Cuda, Nvml };

// Our wrapper exported under exactly this ABI name, or null. Only where the
// real driver has the name too: a program that probes for a function (an
// old driver lacks the newer ones) must still find it missing, with glibc's
// dlerror(). Code, not a table: a table of function addresses would need a
// dynamic initializer.
void* cuda_wrapper_named(const RealCuda& real, const char* name) {
#define GPULIMIT_CUDA_HOOK(hook, params, args)                                                     \
    if (std::strcmp(name, #hook) == 0) {                                                           \
        return real.hook != nullptr ? reinterpret_cast<void*>(&::hook) : nullptr;                  \
    }
#include "entry_points.def"
    return nullptr;
}

void* nvml_wrapper_named(const RealNvml& real, const char* name) {
#define GPULIMIT_NVML_HOOK(hook, params)                                                           \
    if (std::strcmp(name, #hook) == 0) {                                                           \
        return real.hook != nullptr ? reinterpret_cast<void*>(&::hook) : nullptr;                  \
    }
#include "entry_points.def"
    return nullptr;
}

// The hook whose real address is `function`, or -1 for anything else. The
// real addresses are real_cuda()'s, which the real dlsym found under the
// hooked ABI names: this is the map from a real pointer back to its ABI name.
int cuda_hook_of_real(const RealCuda& real, void* function) {
    if (function == nullptr) {
        return -1;
    }
#define GPULIMIT_CUDA_HOOK(hook, params, args)                                                     \
    if (reinterpret_cast<void*>(real.hook) == function) {                                          \
        return kHook_##hook;                                                                       \
    }
#include "entry_points.def"
    return -1;
}

bool starts_with(const char* text, const char* prefix) {
    return std::strncmp(text, prefix, std::strlen(prefix)) == 0;
}

// The handle of each driver library once a dlsym has been seen on it. We
// keep the reference dlopen(RTLD_NOLOAD) took, so the handle can never be
// recycled for another object.
constinit std::atomic<void*> g_cuda_handle{nullptr};
constinit std::atomic<void*> g_nvml_handle{nullptr};

// Whether `handle` is the process's libcuda.so.1 or libnvidia-ml.so.1.
// Cheap for the common case (any other library): two compares, then the
// file name from the link map (dlinfo, no lock); only a name that looks like
// the driver's is confirmed by identity with dlopen(soname, RTLD_NOLOAD),
// which also matches a copy opened under another path or name.
DriverLibrary driver_library_of(void* handle) {
    if (handle == g_cuda_handle.load(std::memory_order_acquire)) {
        return DriverLibrary::Cuda;
    }
    if (handle == g_nvml_handle.load(std::memory_order_acquire)) {
        return DriverLibrary::Nvml;
    }
    struct link_map* map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) {
        (void)dlerror();
        return DriverLibrary::None;
    }
    const char* slash = std::strrchr(map->l_name, '/');
    const char* file = slash != nullptr ? slash + 1 : map->l_name;
    DriverLibrary library = DriverLibrary::None;
    const char* soname = nullptr;
    std::atomic<void*>* cache = nullptr;
    if (starts_with(file, "libcuda.so")) {
        library = DriverLibrary::Cuda;
        soname = kCudaLibrary;
        cache = &g_cuda_handle;
    } else if (starts_with(file, "libnvidia-ml.so")) {
        library = DriverLibrary::Nvml;
        soname = kNvmlLibrary;
        cache = &g_nvml_handle;
    } else {
        return DriverLibrary::None;
    }
    void* loaded = dlopen(soname, RTLD_NOLOAD | RTLD_LAZY);
    if (loaded == nullptr) {
        (void)dlerror();
        return DriverLibrary::None;
    }
    if (loaded != handle) {
        // Another copy (dlmopen, a private path): not the driver the real
        // pointers came from; let glibc answer.
        dlclose(loaded);
        return DriverLibrary::None;
    }
    void* expected = nullptr;
    if (!cache->compare_exchange_strong(expected, loaded, std::memory_order_acq_rel)) {
        dlclose(loaded); // another thread cached the same handle first
    }
    return library;
}

} // namespace
} // namespace gpulimit

// ---------------------------------------------------------------------------
// dlsym.
//
// glibc's dlsym looks at its return address to know who called it: RTLD_NEXT
// means "after the caller's object", and the caller's namespace decides
// RTLD_DEFAULT. So the forward to it must be a jump with the original
// caller's return address still in place, not a call from here, and GCC
// does not promise a sibling call (sanitizers, the stack protector, -O0).
// The entry is therefore a few instructions of assembly: save the two
// arguments, ask gpulimit_dlsym_route(), then either return its answer or
// restore the arguments and jump to the real dlsym.
//
// The entry is exported twice, as glibc does: dlsym@@GLIBC_2.34 (programs
// linked on glibc 2.34+) and dlsym@GLIBC_OLD (older programs and libraries,
// which reference libdl's). The version script declares the two nodes.
//
// This runs in every process the library is preloaded into, before main
// too: no allocation, no lock of ours, and with the switch off, a load and a
// compare before the jump.

struct DlsymRoute {
    void* result;  // returned as is when forward is null
    void* forward; // the real dlsym to jump to, arguments unchanged
};

extern "C" __attribute__((visibility("hidden"), used)) GPULIMIT_NOT_SANITIZED DlsymRoute
gpulimit_dlsym_route(void* handle, const char* name) {
    using gpulimit::DriverLibrary;
    void* const forward = reinterpret_cast<void*>(gpulimit::real_dlsym_function());
    // RTLD_DEFAULT and RTLD_NEXT first, before anything else is touched:
    // this is the path of sanitizer runtimes and of other interposers
    // resolving their "real" functions, possibly before main.
    if (handle == RTLD_DEFAULT || handle == RTLD_NEXT || name == nullptr) {
        return {nullptr, forward};
    }
    if (!gpulimit::limiter_enabled()) {
        return {nullptr, forward};
    }
    void* wrapper = nullptr;
    switch (gpulimit::driver_library_of(handle)) {
    case DriverLibrary::Cuda:
        wrapper = gpulimit::cuda_wrapper_named(gpulimit::real_cuda(), name);
        break;
    case DriverLibrary::Nvml:
        wrapper = gpulimit::nvml_wrapper_named(gpulimit::real_nvml(), name);
        break;
    case DriverLibrary::None:
        break;
    }
    if (wrapper != nullptr) {
        return {wrapper, nullptr};
    }
    return {nullptr, forward};
}

#if defined(__x86_64__)
// rdi = handle, rsi = name. Two pushes and 8 bytes keep the stack 16-byte
// aligned at the call. route returns {result, forward} in rax:rdx.
__asm__(R"(
    .text
    .p2align 4
    .globl gpulimit_dlsym_entry
    .type gpulimit_dlsym_entry, @function
gpulimit_dlsym_entry:
    .cfi_startproc
    endbr64
    push %rdi
    .cfi_adjust_cfa_offset 8
    push %rsi
    .cfi_adjust_cfa_offset 8
    sub $8, %rsp
    .cfi_adjust_cfa_offset 8
    call gpulimit_dlsym_route
    add $8, %rsp
    .cfi_adjust_cfa_offset -8
    pop %rsi
    .cfi_adjust_cfa_offset -8
    pop %rdi
    .cfi_adjust_cfa_offset -8
    test %rdx, %rdx
    jz 1f
    jmp *%rdx
1:
    ret
    .cfi_endproc
    .size gpulimit_dlsym_entry, .-gpulimit_dlsym_entry
)");
#elif defined(__aarch64__)
// x0 = handle, x1 = name; route returns {result, forward} in x0:x1. The
// frame holds x29/x30 and the two arguments; x30 (the caller's return
// address) is restored before the jump. br through x16 is allowed by BTI.
__asm__(R"(
    .text
    .p2align 4
    .globl gpulimit_dlsym_entry
    .type gpulimit_dlsym_entry, %function
gpulimit_dlsym_entry:
    .cfi_startproc
    hint #34
    stp x29, x30, [sp, #-32]!
    .cfi_def_cfa_offset 32
    .cfi_offset 29, -32
    .cfi_offset 30, -24
    mov x29, sp
    stp x0, x1, [sp, #16]
    bl gpulimit_dlsym_route
    cbz x1, 1f
    mov x16, x1
    ldp x0, x1, [sp, #16]
    ldp x29, x30, [sp], #32
    .cfi_remember_state
    .cfi_def_cfa_offset 0
    .cfi_restore 29
    .cfi_restore 30
    br x16
1:
    .cfi_restore_state
    ldp x29, x30, [sp], #32
    .cfi_def_cfa_offset 0
    .cfi_restore 29
    .cfi_restore 30
    ret
    .cfi_endproc
    .size gpulimit_dlsym_entry, .-gpulimit_dlsym_entry
)");
#else
#error "libgpulimit.so: no dlsym entry for this architecture"
#endif

// The exported names of the entry (the symbol gpulimit_dlsym_entry itself is
// made local by the version script).
__asm__(".symver gpulimit_dlsym_entry, dlsym@@GLIBC_2.34");
__asm__(".symver gpulimit_dlsym_entry, dlsym@" GPULIMIT_GLIBC_OLD);

// ---------------------------------------------------------------------------
// cuGetProcAddress and cuGetProcAddress_v2: the caller's exact arguments go to
// `self` (the real one, or an internal pointer to it hooked by name), whose
// answer we keep but for the pointer (see the top of this file). symbolStatus
// and every error (SYMBOL_NOT_FOUND, VERSION_NOT_SUFFICIENT) are the
// driver's own, but for a refusal. Asking for cuGetProcAddress itself
// returns ours the same way.

namespace {

// The name libcuda (or whoever) exports at exactly `function`, for the trace.
const char* exported_name(void* function) {
    Dl_info info{};
    if (dladdr(function, &info) == 0 || info.dli_saddr != function || info.dli_sname == nullptr) {
        return nullptr;
    }
    return info.dli_sname;
}

CUresult refuse(const char* api, const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                CUdriverProcAddressQueryResult* symbolStatus, const char* why) {
    *pfn = nullptr;
    if (symbolStatus != nullptr) {
        *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    char line[512];
    const int length = snprintf(
        line, sizeof(line),
        "gpulimit: %s(%.128s, %d, %llu) answered a function that is not libcuda's export and %s; "
        "refused (CUDA_ERROR_NOT_FOUND) so that nothing allocates or launches around the cap; "
        "use a libgpulimit.so that knows this driver\n",
        api, symbol, cudaVersion, static_cast<unsigned long long>(flags), why);
    if (length > 0) {
        (void)!write(STDERR_FILENO, line,
                     static_cast<size_t>(length) < sizeof(line) ? static_cast<size_t>(length)
                                                                : sizeof(line) - 1);
    }
    gpulimit::proc_trace(api, symbol, cudaVersion, flags, "not an export, refused: %s", why);
    return CUDA_ERROR_NOT_FOUND;
}

CUresult answer(const char* api, CUresult result, const char* symbol, void** pfn, int cudaVersion,
                cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus) {
    using gpulimit::ProcAbi;
    if (!gpulimit::limiter_enabled()) {
        return result;
    }
    if (result != CUDA_SUCCESS || pfn == nullptr || *pfn == nullptr) {
        gpulimit::proc_trace(api, symbol, cudaVersion, flags, "error %d (symbolStatus %d)", result,
                             symbolStatus != nullptr ? *symbolStatus : -1);
        return result;
    }
    void* const function = *pfn;
    const int hook = gpulimit::cuda_hook_of_real(gpulimit::real_cuda(), function);
    if (hook >= 0) {
        *pfn = gpulimit::export_wrapper(hook);
        gpulimit::proc_trace(api, symbol, cudaVersion, flags, "export %s, hooked",
                             gpulimit::cuda_hook_name(hook));
        return result;
    }
    if (const int own = gpulimit::hook_of_export(function); own >= 0) {
        // Our own export already (a driver that finds its functions through
        // the global scope, where ours come first): wrapping it again would
        // count every call twice.
        gpulimit::proc_trace(api, symbol, cudaVersion, flags, "our export %s, kept",
                             gpulimit::cuda_hook_name(own));
        return result;
    }
    const ProcAbi abi = gpulimit::proc_abi(symbol, cudaVersion, flags);
    if (abi.kind == ProcAbi::kNotHooked) {
        if (gpulimit::proc_trace_enabled()) {
            const char* exported = exported_name(function);
            gpulimit::proc_trace(api, symbol, cudaVersion, flags,
                                 "%s%s, passed through (not hooked)",
                                 exported != nullptr ? "export " : "not an export",
                                 exported != nullptr ? exported : "");
        }
        return result;
    }
    if (abi.kind == ProcAbi::kUnknownVersion) {
        char why[160];
        snprintf(why, sizeof(why),
                 "this libgpulimit.so knows no ABI of it at that version (its table ends at %d)",
                 gpulimit::kProcTableCudaVersion);
        return refuse(api, symbol, pfn, cudaVersion, flags, symbolStatus, why);
    }
    void* const wrapper = gpulimit::wrapper_by_name(abi.hook, function);
    if (wrapper == nullptr) {
        return refuse(api, symbol, pfn, cudaVersion, flags, symbolStatus,
                      "every wrapper slot of its ABI is taken by other pointers");
    }
    *pfn = wrapper;
    gpulimit::proc_trace(api, symbol, cudaVersion, flags, "not an export, hooked by name as %s",
                         abi.abi);
    return result;
}

} // namespace

CUresult gpulimit::hook::cuGetProcAddress(cuGetProcAddress_fn self, const char* symbol, void** pfn,
                                          int cudaVersion, cuuint64_t flags) {
    if (self == nullptr) {
        return CUDA_ERROR_NOT_FOUND;
    }
    return answer("cuGetProcAddress", self(symbol, pfn, cudaVersion, flags), symbol, pfn,
                  cudaVersion, flags, nullptr);
}

CUresult gpulimit::hook::cuGetProcAddress_v2(cuGetProcAddress_v2_fn self, const char* symbol,
                                             void** pfn, int cudaVersion, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* symbolStatus) {
    if (self == nullptr) {
        return CUDA_ERROR_NOT_FOUND;
    }
    return answer("cuGetProcAddress_v2", self(symbol, pfn, cudaVersion, flags, symbolStatus),
                  symbol, pfn, cudaVersion, flags, symbolStatus);
}
