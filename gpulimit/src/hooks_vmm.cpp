// Virtual memory management: cuMemCreate / cuMemRelease (PyTorch's
// expandable segments, NCCL). Only device locations hold device memory
// (NCCL also creates host ones). Worker threads call these with no current
// context, so the device comes from the properties, never from a context.
#include "runtime.hpp"

// The bodies are gpulimit::hook's: gpulimit's names need no qualification.

CUresult gpulimit::hook::cuMemCreate(cuMemCreate_fn self, CUmemGenericAllocationHandle* handle,
                                     size_t size, const CUmemAllocationProp* prop,
                                     unsigned long long flags) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    DeviceInfo* device = nullptr;
    if (runtime == nullptr || handle == nullptr || prop == nullptr || size == 0 ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        (device = runtime->by_ordinal(prop->location.id)) == nullptr) {
        return GPULIMIT_CALL_SELF(handle, size, prop, flags);
    }
    const uint64_t bytes = device->round(size);
    if (!runtime->admit(*device, bytes)) {
        return gpulimit::kRefused;
    }
    const CUresult result = GPULIMIT_CALL_SELF(handle, size, prop, flags);
    if (result != CUDA_SUCCESS) {
        runtime->release(*device, bytes);
        return result;
    }
    const CUmemGenericAllocationHandle created = *handle;
    return gpulimit::remember(*runtime, *device, Kind::Vmm, created, bytes,
                              [&] { GPULIMIT_CALL_REAL(cuMemRelease, created); });
}

CUresult gpulimit::hook::cuMemRelease(cuMemRelease_fn self, CUmemGenericAllocationHandle handle) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    if (runtime == nullptr) {
        return GPULIMIT_CALL_SELF(handle);
    }
    return gpulimit::forget(*runtime, Kind::Vmm, handle,
                            [&] { return GPULIMIT_CALL_SELF(handle); });
}
