// Arrays and mipmapped arrays. Pass-through for now.
#include "runtime.hpp"

GPULIMIT_EXPORT CUresult cuArrayCreate_v2(CUarray* pHandle,
                                          const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
    return GPULIMIT_CALL_REAL(cuArrayCreate_v2, pHandle, pAllocateArray);
}

GPULIMIT_EXPORT CUresult cuArray3DCreate_v2(CUarray* pHandle,
                                            const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
    return GPULIMIT_CALL_REAL(cuArray3DCreate_v2, pHandle, pAllocateArray);
}

GPULIMIT_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
    return GPULIMIT_CALL_REAL(cuArrayDestroy, hArray);
}

GPULIMIT_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle,
                                                const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                                unsigned int numMipmapLevels) {
    return GPULIMIT_CALL_REAL(cuMipmappedArrayCreate, pHandle, pMipmappedArrayDesc,
                              numMipmapLevels);
}

GPULIMIT_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
    return GPULIMIT_CALL_REAL(cuMipmappedArrayDestroy, hMipmappedArray);
}
