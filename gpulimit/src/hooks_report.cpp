// What the program is told about memory. Pass-through for now.
#include "runtime.hpp"

GPULIMIT_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
    return GPULIMIT_CALL_REAL(cuMemGetInfo_v2, free, total);
}

GPULIMIT_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
    return GPULIMIT_CALL_REAL(cuDeviceTotalMem_v2, bytes, dev);
}

GPULIMIT_EXPORT CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
    return GPULIMIT_CALL_REAL(cuMemGetInfo, free, total);
}

GPULIMIT_EXPORT CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
    return GPULIMIT_CALL_REAL(cuDeviceTotalMem, bytes, dev);
}

GPULIMIT_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
    return GPULIMIT_CALL_REAL_NVML(nvmlDeviceGetMemoryInfo, device, memory);
}

GPULIMIT_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                        nvmlMemory_v2_t* memory) {
    return GPULIMIT_CALL_REAL_NVML(nvmlDeviceGetMemoryInfo_v2, device, memory);
}
