// The CUDA wrappers as entries (entries.hpp): the exports, the wrappers
// hooked by name, and the table of what cuGetProcAddress answers.
//
// Both kinds of wrapper are generated from entry_points.def and only pass
// the real function to call to the hook's body (gpulimit::hook::NAME in
// hooks_*.cpp and resolve.cpp): the export passes libcuda's export of the
// same name, a wrapper hooked by name passes the pointer cuGetProcAddress
// returned. So a caller that reached the driver through an internal pointer
// is counted exactly like one that reached the export, and still calls the
// very function the driver chose for it.
#include "entries.hpp"

#include "real.hpp"

#include <atomic>
#include <cstring>
#include <string_view>

// ---- The exports -------------------------------------------------------------

#define GPULIMIT_CUDA_HOOK(name, params, args)                                                     \
    GPULIMIT_EXPORT CUresult name params {                                                         \
        return ::gpulimit::hook::name(::gpulimit::real_cuda().name, GPULIMIT_EXPAND args);         \
    }
#include "entry_points.def"

namespace gpulimit {
namespace {

constexpr const char* kHookNames[kCudaHookCount] = {
#define GPULIMIT_CUDA_HOOK(name, params, args) #name,
#include "entry_points.def"
};

constexpr int hook_named(std::string_view abi) {
    for (int i = 0; i < kCudaHookCount; ++i) {
        if (abi == kHookNames[i]) {
            return i;
        }
    }
    return -1;
}

// ---- What cuGetProcAddress answers ---------------------------------------------
//
// Every symbol (cuda.h's name without a version suffix) that has a hooked
// variant, with every variant it has had: the CUDA version that introduced
// it (1000 * major + 10 * minor) and its exported ABI name. Taken from the
// PFN_<symbol>_v<version>[_ptsz] typedefs of cudaTypedefs.h, CUDA 12.6.3
// (github.com/zspace/system.cuda-12.6, include/cudaTypedefs.h, commit
// b3d92c837713411301ae5df45b0c7758df7d931e), and checked against a real
// driver: on an H100 with driver 580.159.04 (CUDA 13.0), cuGetProcAddress_v2
// at cudaVersion 3020 to 13000 with flags 0, 1 and 2 answered every one of
// these symbols with exactly the export this table names, no symbol had a
// variant newer than 12000, flags 0 gave the legacy variants, and
// cuGraphInstantiate at 12000 and later gave cuGraphInstantiate_v2 (cuda.h
// 12's macro cuGraphInstantiate -> cuGraphInstantiateWithFlags is the
// compiler's business, not the driver's).
struct ProcRow {
    const char* symbol;
    int version;
    bool per_thread;
    bool hooked;
    int hook;
    const char* abi;
};

// NOLINTBEGIN(bugprone-macro-parentheses): stringized names
#define ROW(symbol, version, abi)                                                                  \
    ProcRow {                                                                                      \
#symbol, version, false, true, hook_named(#abi), #abi                                      \
    }
#define PTROW(symbol, version, abi)                                                                \
    ProcRow {                                                                                      \
#symbol, version, true, true, hook_named(#abi), #abi                                       \
    }
// A variant we do not wrap (an ABI older than the one we hook).
#define UNHOOKED(symbol, version, abi)                                                             \
    ProcRow {                                                                                      \
#symbol, version, false, false, -1, #abi                                                   \
    }

constexpr ProcRow kRows[] = {
    ROW(cuInit, 2000, cuInit),
    ROW(cuGetProcAddress, 11030, cuGetProcAddress),
    ROW(cuGetProcAddress, 12000, cuGetProcAddress_v2),
    ROW(cuMemAlloc, 2000, cuMemAlloc),
    ROW(cuMemAlloc, 3020, cuMemAlloc_v2),
    ROW(cuMemAllocPitch, 2000, cuMemAllocPitch),
    ROW(cuMemAllocPitch, 3020, cuMemAllocPitch_v2),
    ROW(cuMemAllocManaged, 6000, cuMemAllocManaged),
    ROW(cuMemFree, 2000, cuMemFree),
    ROW(cuMemFree, 3020, cuMemFree_v2),
    ROW(cuMemAllocAsync, 11020, cuMemAllocAsync),
    PTROW(cuMemAllocAsync, 11020, cuMemAllocAsync_ptsz),
    ROW(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync),
    PTROW(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync_ptsz),
    ROW(cuMemFreeAsync, 11020, cuMemFreeAsync),
    PTROW(cuMemFreeAsync, 11020, cuMemFreeAsync_ptsz),
    ROW(cuMemPoolCreate, 11020, cuMemPoolCreate),
    ROW(cuMemPoolDestroy, 11020, cuMemPoolDestroy),
    ROW(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo),
    ROW(cuMemCreate, 10020, cuMemCreate),
    ROW(cuMemRelease, 10020, cuMemRelease),
    UNHOOKED(cuArrayCreate, 2000, cuArrayCreate),
    ROW(cuArrayCreate, 3020, cuArrayCreate_v2),
    UNHOOKED(cuArray3DCreate, 2000, cuArray3DCreate),
    ROW(cuArray3DCreate, 3020, cuArray3DCreate_v2),
    ROW(cuArrayDestroy, 2000, cuArrayDestroy),
    ROW(cuMipmappedArrayCreate, 5000, cuMipmappedArrayCreate),
    ROW(cuMipmappedArrayDestroy, 5000, cuMipmappedArrayDestroy),
    UNHOOKED(cuGraphInstantiate, 10000, cuGraphInstantiate),
    ROW(cuGraphInstantiate, 11000, cuGraphInstantiate_v2),
    ROW(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags),
    ROW(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams),
    PTROW(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams_ptsz),
    ROW(cuGraphLaunch, 10000, cuGraphLaunch),
    PTROW(cuGraphLaunch, 10000, cuGraphLaunch_ptsz),
    ROW(cuDeviceGraphMemTrim, 11040, cuDeviceGraphMemTrim),
    ROW(cuLaunchKernel, 4000, cuLaunchKernel),
    PTROW(cuLaunchKernel, 7000, cuLaunchKernel_ptsz),
    ROW(cuLaunchKernelEx, 11060, cuLaunchKernelEx),
    PTROW(cuLaunchKernelEx, 11060, cuLaunchKernelEx_ptsz),
    ROW(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel),
    PTROW(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel_ptsz),
    ROW(cuMemGetInfo, 2000, cuMemGetInfo),
    ROW(cuMemGetInfo, 3020, cuMemGetInfo_v2),
    ROW(cuDeviceTotalMem, 2000, cuDeviceTotalMem),
    ROW(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2),
};

#undef ROW
#undef PTROW
#undef UNHOOKED
// NOLINTEND(bugprone-macro-parentheses)

// A hooked row names a hook, an unhooked one none, and every hook is some
// row's answer: a hook added to entry_points.def needs its rows here.
constexpr bool rows_match_hooks() {
    for (const ProcRow& row : kRows) {
        if (row.hooked != (row.hook >= 0) || row.version > kProcTableCudaVersion) {
            return false;
        }
    }
    for (int hook = 0; hook < kCudaHookCount; ++hook) {
        bool found = false;
        for (const ProcRow& row : kRows) {
            found = found || row.hook == hook;
        }
        if (!found) {
            return false;
        }
    }
    return true;
}
static_assert(rows_match_hooks(), "entry_points.def and kRows disagree");

// ---- Wrappers hooked by name -----------------------------------------------------
//
// Each hook has kSlots wrappers, each calling the pointer in its own slot:
// the same ABI may come back as more than one internal pointer (one per
// cudaVersion, say). A slot is claimed once, by compare-and-swap, and never
// changes after: a wrapper handed out always calls the same function.
constexpr int kSlots = 4;
struct Slots {
    std::atomic<void*> function[kSlots];
};
constinit Slots g_slots[kCudaHookCount] = {};

#define GPULIMIT_CUDA_HOOK(name, params, args)                                                     \
    template <int Slot>                                                                            \
    CUresult by_name_##name params {                                                               \
        return ::gpulimit::hook::name(                                                             \
            reinterpret_cast<::gpulimit::hook::name##_fn>(                                         \
                g_slots[kHook_##name].function[Slot].load(std::memory_order_acquire)),             \
            GPULIMIT_EXPAND args);                                                                 \
    }
#include "entry_points.def"

template <typename Function>
void* pick(int slot, Function s0, Function s1, Function s2, Function s3) {
    static_assert(kSlots == 4);
    const Function wrappers[kSlots] = {s0, s1, s2, s3};
    return reinterpret_cast<void*>(wrappers[slot]);
}

void* slot_wrapper(int hook, int slot) {
    switch (hook) {
#define GPULIMIT_CUDA_HOOK(name, params, args)                                                     \
    case kHook_##name:                                                                             \
        return pick(slot, &by_name_##name<0>, &by_name_##name<1>, &by_name_##name<2>,              \
                    &by_name_##name<3>);
#include "entry_points.def"
    default:
        return nullptr;
    }
}

} // namespace

void* export_wrapper(int hook) {
    switch (hook) {
#define GPULIMIT_CUDA_HOOK(name, params, args)                                                     \
    case kHook_##name:                                                                             \
        return reinterpret_cast<void*>(&::name);
#include "entry_points.def"
    default:
        return nullptr;
    }
}

int hook_of_export(const void* function) {
    for (int hook = 0; hook < kCudaHookCount; ++hook) {
        if (function == export_wrapper(hook)) {
            return hook;
        }
    }
    return -1;
}

const char* cuda_hook_name(int hook) {
    return hook >= 0 && hook < kCudaHookCount ? kHookNames[hook] : "?";
}

ProcAbi proc_abi(const char* symbol, int cudaVersion, cuuint64_t flags) {
    if (symbol == nullptr) {
        return {};
    }
    const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const ProcRow* legacy = nullptr;
    const ProcRow* threaded = nullptr;
    bool known = false;
    for (const ProcRow& row : kRows) {
        if (std::strcmp(row.symbol, symbol) != 0) {
            continue;
        }
        known = true;
        if (row.version > cudaVersion) {
            continue;
        }
        const ProcRow*& best = row.per_thread ? threaded : legacy;
        if (best == nullptr || row.version > best->version) {
            best = &row;
        }
    }
    if (!known) {
        return {};
    }
    const ProcRow* row = per_thread && threaded != nullptr ? threaded : legacy;
    if (cudaVersion > kProcTableCudaVersion || row == nullptr) {
        return {ProcAbi::kUnknownVersion, -1, nullptr};
    }
    if (!row->hooked) {
        return {ProcAbi::kNotHooked, -1, row->abi};
    }
    return {ProcAbi::kHooked, row->hook, row->abi};
}

void* wrapper_by_name(int hook, void* function) {
    if (hook < 0 || hook >= kCudaHookCount || function == nullptr) {
        return nullptr;
    }
    for (int slot = 0; slot < kSlots; ++slot) {
        std::atomic<void*>& claimed = g_slots[hook].function[slot];
        void* current = claimed.load(std::memory_order_acquire);
        if (current == nullptr &&
            claimed.compare_exchange_strong(current, function, std::memory_order_acq_rel)) {
            return slot_wrapper(hook, slot);
        }
        if (current == function) {
            return slot_wrapper(hook, slot);
        }
    }
    return nullptr;
}

} // namespace gpulimit
