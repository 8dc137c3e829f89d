// Stream-ordered allocations and pools. Pass-through for now.
#include "runtime.hpp"

GPULIMIT_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
    return GPULIMIT_CALL_REAL(cuMemAllocAsync, dptr, bytesize, hStream);
}

GPULIMIT_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                              CUstream hStream) {
    return GPULIMIT_CALL_REAL(cuMemAllocAsync_ptsz, dptr, bytesize, hStream);
}

GPULIMIT_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                                 CUmemoryPool pool, CUstream hStream) {
    return GPULIMIT_CALL_REAL(cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream);
}

GPULIMIT_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                      CUmemoryPool pool, CUstream hStream) {
    return GPULIMIT_CALL_REAL(cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream);
}

GPULIMIT_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    return GPULIMIT_CALL_REAL(cuMemFreeAsync, dptr, hStream);
}

GPULIMIT_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
    return GPULIMIT_CALL_REAL(cuMemFreeAsync_ptsz, dptr, hStream);
}

GPULIMIT_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
    return GPULIMIT_CALL_REAL(cuMemPoolCreate, pool, poolProps);
}

GPULIMIT_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    return GPULIMIT_CALL_REAL(cuMemPoolDestroy, pool);
}

GPULIMIT_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
    return GPULIMIT_CALL_REAL(cuMemPoolTrimTo, pool, minBytesToKeep);
}
