// The CUDA wrappers as entries: every GPULIMIT_CUDA_HOOK of entry_points.def
// by index, the ABI a cuGetProcAddress request resolves to, and wrappers
// "hooked by name" that call a pointer cuGetProcAddress returned instead of
// libcuda's export (resolve.cpp says when).
#pragma once

#include "cuda_abi.hpp"

namespace gpulimit {

enum CudaHook : int {
#define GPULIMIT_CUDA_HOOK(name, params, args) kHook_##name,
#include "entry_points.def"
    kCudaHookCount
};

// The exported ABI name of a hook ("cuMemAlloc_v2"), and our export of it.
const char* cuda_hook_name(int hook);
void* export_wrapper(int hook);
// The hook whose export (ours) `function` is, or -1.
int hook_of_export(const void* function);

// What cuGetProcAddress(symbol, cudaVersion, flags) gives on success, by the
// driver's rule: the variant of `symbol` introduced last at or before
// cudaVersion, its per-thread-default-stream (_ptsz) variant when flags has
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM and the symbol has one by
// then (entries.cpp has the table and where it was checked).
struct ProcAbi {
    enum Kind {
        kNotHooked,     // a symbol we do not hook, or a variant of it we do not
        kHooked,        // the ABI of hook `hook`
        kUnknownVersion // a symbol we hook, at a version the table cannot answer
    };
    Kind kind = kNotHooked;
    int hook = -1;
    const char* abi = nullptr; // the variant's exported name (kNotHooked: may be null)
};
ProcAbi proc_abi(const char* symbol, int cudaVersion, cuuint64_t flags);

// The newest cudaVersion the table is known to be complete for: a later
// version may have brought a new ABI of a hooked symbol.
inline constexpr int kProcTableCudaVersion = 13000;

// A wrapper of hook `hook` that calls `function` (a pointer the driver gave
// for that ABI) where the export would call libcuda's export. The same
// function gets the same wrapper. Null when the hook's few slots are all
// taken by other pointers (no driver has been seen to use even one).
void* wrapper_by_name(int hook, void* function);

} // namespace gpulimit
