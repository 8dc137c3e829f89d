// Arrays and mipmapped arrays. Their size is the driver's layout, known
// only once they exist: create, ask the driver what it takes
// (cu*GetMemoryRequirements), charge that, and destroy the array again if
// the charge is refused.
#include "runtime.hpp"

using gpulimit::DeviceInfo;
using gpulimit::Kind;
using gpulimit::Runtime;

namespace {

// Bytes per channel of a CUarray_format; the block-compressed and video
// formats are at most one byte per texel.
uint64_t channel_bytes(int format) {
    switch (format) {
    case 0x02: // UNSIGNED_INT16
    case 0x09: // SIGNED_INT16
    case 0x10: // HALF
        return 2;
    case 0x03: // UNSIGNED_INT32
    case 0x0a: // SIGNED_INT32
    case 0x20: // FLOAT
        return 4;
    default:
        return 1;
    }
}

uint64_t at_least_one(size_t extent) {
    return extent == 0 ? 1 : extent;
}

// When the driver cannot say (before CUDA 11.6): the packed size.
uint64_t packed_size(size_t width, size_t height, size_t depth, int format, unsigned channels) {
    uint64_t bytes = channel_bytes(format) * (channels == 0 ? 1 : channels);
    for (const uint64_t extent : {at_least_one(width), at_least_one(height), at_least_one(depth)}) {
        if (__builtin_mul_overflow(bytes, extent, &bytes)) {
            return UINT64_MAX;
        }
    }
    return bytes;
}

uint64_t array_size(CUarray array, const DeviceInfo& device, uint64_t fallback) {
    CUDA_ARRAY_MEMORY_REQUIREMENTS requirements{};
    const auto query = gpulimit::real().cuArrayGetMemoryRequirements;
    if (query != nullptr && query(&requirements, array, device.handle) == CUDA_SUCCESS &&
        requirements.size != 0) {
        return requirements.size;
    }
    return fallback;
}

uint64_t mipmapped_size(CUmipmappedArray array, const DeviceInfo& device, uint64_t fallback) {
    CUDA_ARRAY_MEMORY_REQUIREMENTS requirements{};
    const auto query = gpulimit::real().cuMipmappedArrayGetMemoryRequirements;
    if (query != nullptr && query(&requirements, array, device.handle) == CUDA_SUCCESS &&
        requirements.size != 0) {
        return requirements.size;
    }
    return fallback;
}

// Charges a created array; on refusal destroys it (the caller never sees it).
template <typename Destroy>
CUresult charge_created(Runtime& runtime, DeviceInfo& device, Kind kind, uint64_t handle,
                        uint64_t size, Destroy&& destroy) {
    const uint64_t bytes = device.round(size);
    if (!runtime.admit(device, bytes)) {
        destroy();
        return gpulimit::kRefused;
    }
    return gpulimit::remember(runtime, device, kind, handle, bytes, destroy);
}

} // namespace

CUresult gpulimit::hook::cuArrayCreate_v2(cuArrayCreate_v2_fn self, CUarray* pHandle,
                                          const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    DeviceInfo* device = nullptr;
    if (runtime == nullptr || pHandle == nullptr || pAllocateArray == nullptr ||
        (device = runtime->current()) == nullptr) {
        return GPULIMIT_CALL_SELF(pHandle, pAllocateArray);
    }
    const CUresult result = GPULIMIT_CALL_SELF(pHandle, pAllocateArray);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    const CUarray array = *pHandle;
    const CUDA_ARRAY_DESCRIPTOR& d = *pAllocateArray;
    const uint64_t size =
        array_size(array, *device, packed_size(d.Width, d.Height, 1, d.Format, d.NumChannels));
    return charge_created(*runtime, *device, Kind::Array, reinterpret_cast<uint64_t>(array), size,
                          [&] { GPULIMIT_CALL_REAL(cuArrayDestroy, array); });
}

CUresult gpulimit::hook::cuArray3DCreate_v2(cuArray3DCreate_v2_fn self, CUarray* pHandle,
                                            const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    DeviceInfo* device = nullptr;
    if (runtime == nullptr || pHandle == nullptr || pAllocateArray == nullptr ||
        (device = runtime->current()) == nullptr) {
        return GPULIMIT_CALL_SELF(pHandle, pAllocateArray);
    }
    const CUresult result = GPULIMIT_CALL_SELF(pHandle, pAllocateArray);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    const CUarray array = *pHandle;
    const CUDA_ARRAY3D_DESCRIPTOR& d = *pAllocateArray;
    const uint64_t size = array_size(
        array, *device, packed_size(d.Width, d.Height, d.Depth, d.Format, d.NumChannels));
    return charge_created(*runtime, *device, Kind::Array, reinterpret_cast<uint64_t>(array), size,
                          [&] { GPULIMIT_CALL_REAL(cuArrayDestroy, array); });
}

CUresult gpulimit::hook::cuArrayDestroy(cuArrayDestroy_fn self, CUarray hArray) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    if (runtime == nullptr || hArray == nullptr) {
        return GPULIMIT_CALL_SELF(hArray);
    }
    return gpulimit::forget(*runtime, Kind::Array, reinterpret_cast<uint64_t>(hArray),
                            [&] { return GPULIMIT_CALL_SELF(hArray); });
}

CUresult gpulimit::hook::cuMipmappedArrayCreate(cuMipmappedArrayCreate_fn self,
                                                CUmipmappedArray* pHandle,
                                                const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                                unsigned int numMipmapLevels) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    DeviceInfo* device = nullptr;
    if (runtime == nullptr || pHandle == nullptr || pMipmappedArrayDesc == nullptr ||
        (device = runtime->current()) == nullptr) {
        return GPULIMIT_CALL_SELF(pHandle, pMipmappedArrayDesc, numMipmapLevels);
    }
    const CUresult result = GPULIMIT_CALL_SELF(pHandle, pMipmappedArrayDesc, numMipmapLevels);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    const CUmipmappedArray array = *pHandle;
    const CUDA_ARRAY3D_DESCRIPTOR& d = *pMipmappedArrayDesc;
    // The levels of a full chain add up to less than twice the base level.
    const uint64_t base = packed_size(d.Width, d.Height, d.Depth, d.Format, d.NumChannels);
    const uint64_t size =
        mipmapped_size(array, *device, base > UINT64_MAX / 2 ? UINT64_MAX : 2 * base);
    return charge_created(*runtime, *device, Kind::Mipmapped, reinterpret_cast<uint64_t>(array),
                          size, [&] { GPULIMIT_CALL_REAL(cuMipmappedArrayDestroy, array); });
}

CUresult gpulimit::hook::cuMipmappedArrayDestroy(cuMipmappedArrayDestroy_fn self,
                                                 CUmipmappedArray hMipmappedArray) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    if (runtime == nullptr || hMipmappedArray == nullptr) {
        return GPULIMIT_CALL_SELF(hMipmappedArray);
    }
    return gpulimit::forget(*runtime, Kind::Mipmapped, reinterpret_cast<uint64_t>(hMipmappedArray),
                            [&] { return GPULIMIT_CALL_SELF(hMipmappedArray); });
}
