// What a program is told about memory: the cap as the total and the
// group's usage against it (cuMemGetInfo, cuDeviceTotalMem, and NVML's
// memory info, so that nvidia-smi inside a container shows the cap). Never
// a total above the physical one, never an error when usage is at or over
// the cap (free is then 0).
#include "runtime.hpp"

#include <climits>

using gpulimit::DeviceInfo;
using gpulimit::Runtime;

namespace {

struct Figures {
    uint64_t total;
    uint64_t used;
    uint64_t free;
};

Figures figures(Runtime& runtime, const DeviceInfo& device) {
    runtime.refresh_for_report();
    const uint64_t total = device.reported_total();
    const uint64_t used = runtime.state.group_used(device.group_index);
    return Figures{total, used, used >= total ? 0 : total - used};
}

unsigned int clamp32(uint64_t value) {
    return value > UINT_MAX ? UINT_MAX : static_cast<unsigned int>(value);
}

// The current context's device; the driver's own answer (and errors)
// without one. `free_bytes` is also bounded by what the driver says is free,
// since others outside the group may use the GPU too. `self`: the real
// cuMemGetInfo_v2 to ask (the one the caller reached, or the export).
CUresult mem_info(gpulimit::hook::cuMemGetInfo_v2_fn self, Runtime& runtime, uint64_t& free_bytes,
                  uint64_t& total_bytes) {
    size_t real_free = 0;
    size_t real_total = 0;
    const CUresult result = GPULIMIT_CALL_SELF(&real_free, &real_total);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    free_bytes = real_free;
    total_bytes = real_total;
    const DeviceInfo* device = runtime.current();
    if (device == nullptr) {
        return result;
    }
    const Figures mine = figures(runtime, *device);
    total_bytes = mine.total;
    free_bytes = mine.free < real_free ? mine.free : real_free;
    return result;
}

} // namespace

CUresult gpulimit::hook::cuMemGetInfo_v2(cuMemGetInfo_v2_fn self, size_t* free, size_t* total) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    if (runtime == nullptr || free == nullptr || total == nullptr) {
        return GPULIMIT_CALL_SELF(free, total);
    }
    uint64_t free_bytes = 0;
    uint64_t total_bytes = 0;
    const CUresult result = mem_info(self, *runtime, free_bytes, total_bytes);
    if (result == CUDA_SUCCESS) {
        *free = free_bytes;
        *total = total_bytes;
    }
    return result;
}

CUresult gpulimit::hook::cuMemGetInfo(cuMemGetInfo_fn self, unsigned int* free,
                                      unsigned int* total) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    if (runtime == nullptr || free == nullptr || total == nullptr ||
        gpulimit::real().cuMemGetInfo_v2 == nullptr) {
        return GPULIMIT_CALL_SELF(free, total);
    }
    uint64_t free_bytes = 0;
    uint64_t total_bytes = 0;
    // The 32-bit figures are the 64-bit ones clamped: asked of the export.
    const CUresult result =
        mem_info(gpulimit::real().cuMemGetInfo_v2, *runtime, free_bytes, total_bytes);
    if (result == CUDA_SUCCESS) {
        *free = clamp32(free_bytes);
        *total = clamp32(total_bytes);
    }
    return result;
}

CUresult gpulimit::hook::cuDeviceTotalMem_v2(cuDeviceTotalMem_v2_fn self, size_t* bytes,
                                             CUdevice dev) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    const CUresult result = GPULIMIT_CALL_SELF(bytes, dev);
    if (runtime == nullptr || result != CUDA_SUCCESS) {
        return result;
    }
    if (const DeviceInfo* device = runtime->by_handle(dev); device != nullptr) {
        *bytes = device->reported_total();
    }
    return result;
}

CUresult gpulimit::hook::cuDeviceTotalMem(cuDeviceTotalMem_fn self, unsigned int* bytes,
                                          CUdevice dev) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    const CUresult result = GPULIMIT_CALL_SELF(bytes, dev);
    if (runtime == nullptr || result != CUDA_SUCCESS) {
        return result;
    }
    if (const DeviceInfo* device = runtime->by_handle(dev); device != nullptr) {
        *bytes = clamp32(device->reported_total());
    }
    return result;
}

namespace {

// The group's device behind an NVML handle, matched by UUID (NVML numbers
// devices in PCI order, CUDA need not). nullptr: not ours, pass through.
DeviceInfo* nvml_device(Runtime& runtime, nvmlDevice_t device) {
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (gpulimit::real_nvml().nvmlDeviceGetUUID == nullptr ||
        gpulimit::real_nvml().nvmlDeviceGetUUID(device, uuid, sizeof(uuid)) != NVML_SUCCESS) {
        return nullptr;
    }
    return runtime.by_uuid(uuid);
}

nvmlReturn_t nvml_enter(Runtime*& runtime) {
    return gpulimit::enter(runtime) == CUDA_SUCCESS ? NVML_SUCCESS : NVML_ERROR_NO_PERMISSION;
}

} // namespace

GPULIMIT_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
    Runtime* runtime = nullptr;
    if (const nvmlReturn_t refused = nvml_enter(runtime); refused != NVML_SUCCESS) {
        return refused;
    }
    const nvmlReturn_t result = GPULIMIT_CALL_REAL_NVML(nvmlDeviceGetMemoryInfo, device, memory);
    if (runtime == nullptr || result != NVML_SUCCESS || memory == nullptr) {
        return result;
    }
    if (const DeviceInfo* ours = nvml_device(*runtime, device); ours != nullptr) {
        const Figures mine = figures(*runtime, *ours);
        memory->total = mine.total;
        memory->used = mine.used < mine.total ? mine.used : mine.total;
        memory->free = mine.free;
    }
    return result;
}

GPULIMIT_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                        nvmlMemory_v2_t* memory) {
    Runtime* runtime = nullptr;
    if (const nvmlReturn_t refused = nvml_enter(runtime); refused != NVML_SUCCESS) {
        return refused;
    }
    const nvmlReturn_t result = GPULIMIT_CALL_REAL_NVML(nvmlDeviceGetMemoryInfo_v2, device, memory);
    if (runtime == nullptr || result != NVML_SUCCESS || memory == nullptr) {
        return result;
    }
    if (const DeviceInfo* ours = nvml_device(*runtime, device); ours != nullptr) {
        const Figures mine = figures(*runtime, *ours);
        memory->total = mine.total;
        // The driver's own reserve is outside the cap's accounting.
        memory->reserved = 0;
        memory->used = mine.used < mine.total ? mine.used : mine.total;
        memory->free = mine.free;
    }
    return result;
}
