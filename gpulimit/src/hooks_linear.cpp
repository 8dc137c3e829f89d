// Linear allocations (v2 and the 32-bit v1 ABI). Pass-through for now.
#include "runtime.hpp"

GPULIMIT_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
    return GPULIMIT_CALL_REAL(cuMemAlloc_v2, dptr, bytesize);
}

GPULIMIT_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                            size_t Height, unsigned int ElementSizeBytes) {
    return GPULIMIT_CALL_REAL(cuMemAllocPitch_v2, dptr, pPitch, WidthInBytes, Height,
                              ElementSizeBytes);
}

GPULIMIT_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
    return GPULIMIT_CALL_REAL(cuMemAllocManaged, dptr, bytesize, flags);
}

GPULIMIT_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    return GPULIMIT_CALL_REAL(cuMemFree_v2, dptr);
}

GPULIMIT_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
    return GPULIMIT_CALL_REAL(cuMemAlloc, dptr, bytesize);
}

GPULIMIT_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch,
                                         unsigned int WidthInBytes, unsigned int Height,
                                         unsigned int ElementSizeBytes) {
    return GPULIMIT_CALL_REAL(cuMemAllocPitch, dptr, pPitch, WidthInBytes, Height,
                              ElementSizeBytes);
}

GPULIMIT_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
    return GPULIMIT_CALL_REAL(cuMemFree, dptr);
}
