// Linear allocations: cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged and
// their frees, in the v2 ABI and the 32-bit v1 ABI of pre-3.2 programs.
//
// Admission (a charge on the group's total) comes before the real
// allocation and is rolled back when the driver fails.
#include "runtime.hpp"

using gpulimit::DeviceInfo;
using gpulimit::Kind;
using gpulimit::Runtime;

namespace {

constexpr uint64_t kPitchAlignment = 512; // the widest pitch alignment of any CUDA GPU

uint64_t saturating_product(uint64_t a, uint64_t b) {
    uint64_t product = 0;
    return __builtin_mul_overflow(a, b, &product) ? UINT64_MAX : product;
}

// The pitch is known only after the call: admit the widest pitch the driver
// can choose first, then settle on what it chose (a smaller figure gives the
// difference back; a larger one must be admitted too, or the allocation is
// undone).
template <typename RealAlloc, typename RealFree>
CUresult pitched(Runtime& runtime, DeviceInfo& device, uint64_t width, uint64_t height,
                 RealAlloc&& real_alloc, RealFree&& real_free, uint64_t& handle) {
    const uint64_t estimate =
        device.round(saturating_product(gpuinit::limit::round_up(width, kPitchAlignment), height));
    if (!runtime.admit(device, estimate)) {
        return gpulimit::kRefused;
    }
    uint64_t pitch = 0;
    const CUresult result = real_alloc(handle, pitch);
    if (result != CUDA_SUCCESS) {
        runtime.release(device, estimate);
        return result;
    }
    const uint64_t actual = device.round(saturating_product(pitch, height));
    if (actual > estimate) {
        if (!runtime.admit(device, actual - estimate)) {
            real_free(handle);
            runtime.release(device, estimate);
            return gpulimit::kRefused;
        }
    } else {
        runtime.release(device, estimate - actual);
    }
    return gpulimit::remember(runtime, device, Kind::Linear, handle, actual,
                              [&] { real_free(handle); });
}

// cuMemAlloc_v2, cuMemAllocManaged and cuMemAlloc (v1): one size, the
// current context's device.
template <typename RealAlloc, typename RealFree>
CUresult counted(Runtime& runtime, DeviceInfo& device, uint64_t size, RealAlloc&& real_alloc,
                 RealFree&& real_free) {
    const uint64_t bytes = device.round(size);
    if (!runtime.admit(device, bytes)) {
        return gpulimit::kRefused;
    }
    uint64_t handle = 0;
    const CUresult result = real_alloc(handle);
    if (result != CUDA_SUCCESS) {
        runtime.release(device, bytes);
        return result;
    }
    return gpulimit::remember(runtime, device, Kind::Linear, handle, bytes,
                              [&] { real_free(handle); });
}

} // namespace

CUresult gpulimit::hook::cuMemAlloc_v2(cuMemAlloc_v2_fn self, CUdeviceptr* dptr, size_t bytesize) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    DeviceInfo* device = nullptr;
    if (runtime == nullptr || dptr == nullptr || bytesize == 0 ||
        (device = runtime->current()) == nullptr) {
        return GPULIMIT_CALL_SELF(dptr, bytesize);
    }
    return counted(
        *runtime, *device, bytesize,
        [&](uint64_t& handle) {
            const CUresult result = GPULIMIT_CALL_SELF(dptr, bytesize);
            handle = *dptr;
            return result;
        },
        [](uint64_t handle) { GPULIMIT_CALL_REAL(cuMemFree_v2, handle); });
}

CUresult gpulimit::hook::cuMemAllocManaged(cuMemAllocManaged_fn self, CUdeviceptr* dptr,
                                           size_t bytesize, unsigned int flags) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    DeviceInfo* device = nullptr;
    if (runtime == nullptr || dptr == nullptr || bytesize == 0 ||
        (device = runtime->current()) == nullptr) {
        return GPULIMIT_CALL_SELF(dptr, bytesize, flags);
    }
    return counted(
        *runtime, *device, bytesize,
        [&](uint64_t& handle) {
            const CUresult result = GPULIMIT_CALL_SELF(dptr, bytesize, flags);
            handle = *dptr;
            return result;
        },
        [](uint64_t handle) { GPULIMIT_CALL_REAL(cuMemFree_v2, handle); });
}

CUresult gpulimit::hook::cuMemAllocPitch_v2(cuMemAllocPitch_v2_fn self, CUdeviceptr* dptr,
                                            size_t* pPitch, size_t WidthInBytes, size_t Height,
                                            unsigned int ElementSizeBytes) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    DeviceInfo* device = nullptr;
    if (runtime == nullptr || dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 ||
        Height == 0 || (device = runtime->current()) == nullptr) {
        return GPULIMIT_CALL_SELF(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    }
    uint64_t handle = 0;
    return pitched(
        *runtime, *device, WidthInBytes, Height,
        [&](uint64_t& out, uint64_t& pitch) {
            const CUresult result =
                GPULIMIT_CALL_SELF(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
            out = *dptr;
            pitch = *pPitch;
            return result;
        },
        [](uint64_t ptr) { GPULIMIT_CALL_REAL(cuMemFree_v2, ptr); }, handle);
}

CUresult gpulimit::hook::cuMemFree_v2(cuMemFree_v2_fn self, CUdeviceptr dptr) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    if (runtime == nullptr || dptr == 0) {
        return GPULIMIT_CALL_SELF(dptr);
    }
    return gpulimit::forget(*runtime, Kind::Linear, dptr, [&] { return GPULIMIT_CALL_SELF(dptr); });
}

CUresult gpulimit::hook::cuMemAlloc(cuMemAlloc_fn self, CUdeviceptr_v1* dptr,
                                    unsigned int bytesize) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    DeviceInfo* device = nullptr;
    if (runtime == nullptr || dptr == nullptr || bytesize == 0 ||
        (device = runtime->current()) == nullptr) {
        return GPULIMIT_CALL_SELF(dptr, bytesize);
    }
    return counted(
        *runtime, *device, bytesize,
        [&](uint64_t& handle) {
            const CUresult result = GPULIMIT_CALL_SELF(dptr, bytesize);
            handle = *dptr;
            return result;
        },
        [](uint64_t handle) {
            GPULIMIT_CALL_REAL(cuMemFree, static_cast<CUdeviceptr_v1>(handle));
        });
}

CUresult gpulimit::hook::cuMemAllocPitch(cuMemAllocPitch_fn self, CUdeviceptr_v1* dptr,
                                         unsigned int* pPitch, unsigned int WidthInBytes,
                                         unsigned int Height, unsigned int ElementSizeBytes) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    DeviceInfo* device = nullptr;
    if (runtime == nullptr || dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 ||
        Height == 0 || (device = runtime->current()) == nullptr) {
        return GPULIMIT_CALL_SELF(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    }
    uint64_t handle = 0;
    return pitched(
        *runtime, *device, WidthInBytes, Height,
        [&](uint64_t& out, uint64_t& pitch) {
            const CUresult result =
                GPULIMIT_CALL_SELF(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
            out = *dptr;
            pitch = *pPitch;
            return result;
        },
        [](uint64_t ptr) { GPULIMIT_CALL_REAL(cuMemFree, static_cast<CUdeviceptr_v1>(ptr)); },
        handle);
}

CUresult gpulimit::hook::cuMemFree(cuMemFree_fn self, CUdeviceptr_v1 dptr) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    if (runtime == nullptr || dptr == 0) {
        return GPULIMIT_CALL_SELF(dptr);
    }
    return gpulimit::forget(*runtime, Kind::Linear, dptr, [&] { return GPULIMIT_CALL_SELF(dptr); });
}
