// Virtual memory management. Pass-through for now.
#include "runtime.hpp"

GPULIMIT_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                     const CUmemAllocationProp* prop, unsigned long long flags) {
    return GPULIMIT_CALL_REAL(cuMemCreate, handle, size, prop, flags);
}

GPULIMIT_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    return GPULIMIT_CALL_REAL(cuMemRelease, handle);
}
