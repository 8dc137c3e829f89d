// libgpulimit's own CUDA declarations (gpulimit/src/cuda_abi.hpp and the
// signatures of gpulimit/src/entry_points.def) against NVIDIA's cuda.h and
// cudaTypedefs.h, where a CUDA toolkit is installed. Everything is checked
// at compile time: this program only says which CUDA it was compiled
// against. tests/limiter/abi/CMakeLists.txt builds it when it finds the
// headers; without them the test is skipped, saying so.
//
// Signatures: each entry is compared, parameter by parameter, with the
// PFN_<symbol>_v<version>[_ptsz] typedef of its exported ABI (an enum and
// int are the same ABI). Structs: size and every field's offset and size.
// Constants: value.
//
// The old ABIs' typedefs (cuMemAlloc's 32-bit v2000 ...) are declared only
// for the driver's own build.
#define __CUDA_API_VERSION_INTERNAL 1 // NOLINT(bugprone-reserved-identifier): cuda.h's switch
#include <cstddef>
#include <cstdio>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <type_traits>

namespace ours {
#include "cuda_abi.hpp"
} // namespace ours

namespace {

// ---- Signatures ------------------------------------------------------------------

template <typename A, typename B>
struct SameAbi : std::bool_constant<std::is_same_v<A, B>> {};
// An enum passed where we say int (or unsigned), or the reverse.
template <typename A, typename B>
requires((std::is_enum_v<A> && std::is_integral_v<B>) ||
         (std::is_integral_v<A> && std::is_enum_v<B>)) struct SameAbi<A, B>
    : std::bool_constant<sizeof(A) == sizeof(B)> {
};
template <typename A, typename B>
struct SameAbi<A*, B*>
    : std::bool_constant<std::is_const_v<A> == std::is_const_v<B> &&
                         SameAbi<std::remove_const_t<A>, std::remove_const_t<B>>::value> {};

template <typename Ours, typename Theirs>
struct SameSignature : std::false_type {};
template <typename R, typename... A, typename... B>
struct SameSignature<R (*)(A...), R (*)(B...)>
    : std::bool_constant<sizeof...(A) == sizeof...(B) && (SameAbi<A, B>::value && ...)> {};

// Our declarations in cuda.h's types (the same names).
// NOLINTBEGIN(bugprone-macro-parentheses): params is a parameter list
#define GPULIMIT_CUDA_HOOK(name, params, args) using ours_##name = CUresult(*) params;
#define GPULIMIT_CUDA_REAL(name, params) using ours_##name = CUresult(*) params;
#include "entry_points.def"
// NOLINTEND(bugprone-macro-parentheses)

constexpr int count_entries() {
    int n = 0;
#define GPULIMIT_CUDA_HOOK(name, params, args) ++n;
#define GPULIMIT_CUDA_REAL(name, params) ++n;
#include "entry_points.def"
    return n;
}

int g_checked = 0;
#define SIGNATURE(abi, pfn)                                                                        \
    static_assert(SameSignature<ours_##abi, pfn>::value, #abi " differs from " #pfn);              \
    ++g_checked;

void check_signatures(){
    SIGNATURE(cuInit, PFN_cuInit_v2000) SIGNATURE(cuGetProcAddress, PFN_cuGetProcAddress_v11030) SIGNATURE(
        cuGetProcAddress_v2,
        PFN_cuGetProcAddress_v12000) SIGNATURE(cuMemAlloc_v2,
                                               PFN_cuMemAlloc_v3020) SIGNATURE(cuMemAllocPitch_v2,
                                                                               PFN_cuMemAllocPitch_v3020)
        SIGNATURE(cuMemAllocManaged, PFN_cuMemAllocManaged_v6000) SIGNATURE(
            cuMemFree_v2,
            PFN_cuMemFree_v3020) SIGNATURE(cuMemAlloc,
                                           PFN_cuMemAlloc_v2000) SIGNATURE(cuMemAllocPitch,
                                                                           PFN_cuMemAllocPitch_v2000)
            SIGNATURE(cuMemFree, PFN_cuMemFree_v2000) SIGNATURE(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020) SIGNATURE(
                cuMemAllocAsync_ptsz,
                PFN_cuMemAllocAsync_v11020_ptsz) SIGNATURE(cuMemAllocFromPoolAsync,
                                                           PFN_cuMemAllocFromPoolAsync_v11020)
                SIGNATURE(cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync_v11020_ptsz) SIGNATURE(
                    cuMemFreeAsync,
                    PFN_cuMemFreeAsync_v11020) SIGNATURE(cuMemFreeAsync_ptsz,
                                                         PFN_cuMemFreeAsync_v11020_ptsz) SIGNATURE(cuMemPoolCreate,
                                                                                                   PFN_cuMemPoolCreate_v11020)
                    SIGNATURE(cuMemPoolDestroy, PFN_cuMemPoolDestroy_v11020) SIGNATURE(
                        cuMemPoolTrimTo,
                        PFN_cuMemPoolTrimTo_v11020) SIGNATURE(cuMemCreate,
                                                              PFN_cuMemCreate_v10020) SIGNATURE(cuMemRelease,
                                                                                                PFN_cuMemRelease_v10020)
                        SIGNATURE(cuArrayCreate_v2, PFN_cuArrayCreate_v3020) SIGNATURE(
                            cuArray3DCreate_v2,
                            PFN_cuArray3DCreate_v3020) SIGNATURE(cuArrayDestroy,
                                                                 PFN_cuArrayDestroy_v2000) SIGNATURE(cuMipmappedArrayCreate,
                                                                                                     PFN_cuMipmappedArrayCreate_v5000)
                            SIGNATURE(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy_v5000) SIGNATURE(
                                cuGraphInstantiateWithFlags,
                                PFN_cuGraphInstantiateWithFlags_v11040) SIGNATURE(cuGraphInstantiateWithParams, PFN_cuGraphInstantiateWithParams_v12000)
                                SIGNATURE(cuGraphInstantiateWithParams_ptsz, PFN_cuGraphInstantiateWithParams_v12000_ptsz) SIGNATURE(
                                    cuGraphInstantiate_v2,
                                    PFN_cuGraphInstantiate_v11000) SIGNATURE(cuGraphLaunch,
                                                                             PFN_cuGraphLaunch_v10000)
                                    SIGNATURE(cuGraphLaunch_ptsz, PFN_cuGraphLaunch_v10000_ptsz) SIGNATURE(
                                        cuDeviceGraphMemTrim,
                                        PFN_cuDeviceGraphMemTrim_v11040) SIGNATURE(cuLaunchKernel,
                                                                                   PFN_cuLaunchKernel_v4000)
                                        SIGNATURE(cuLaunchKernel_ptsz, PFN_cuLaunchKernel_v7000_ptsz) SIGNATURE(
                                            cuLaunchKernelEx,
                                            PFN_cuLaunchKernelEx_v11060) SIGNATURE(cuLaunchKernelEx_ptsz, PFN_cuLaunchKernelEx_v11060_ptsz)
                                            SIGNATURE(cuLaunchCooperativeKernel, PFN_cuLaunchCooperativeKernel_v9000) SIGNATURE(
                                                cuLaunchCooperativeKernel_ptsz,
                                                PFN_cuLaunchCooperativeKernel_v9000_ptsz)
                                                SIGNATURE(cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020) SIGNATURE(
                                                    cuDeviceTotalMem_v2,
                                                    PFN_cuDeviceTotalMem_v3020) SIGNATURE(cuMemGetInfo, PFN_cuMemGetInfo_v2000)
                                                    SIGNATURE(
                                                        cuDeviceTotalMem,
                                                        PFN_cuDeviceTotalMem_v2000) SIGNATURE(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)
                                                        SIGNATURE(cuDeviceGet, PFN_cuDeviceGet_v2000) SIGNATURE(
                                                            cuDeviceGetUuid,
                                                            PFN_cuDeviceGetUuid_v9020) SIGNATURE(cuDeviceGetUuid_v2,
                                                                                                 PFN_cuDeviceGetUuid_v11040)
                                                            SIGNATURE(cuDeviceGetPCIBusId, PFN_cuDeviceGetPCIBusId_v4010) SIGNATURE(
                                                                cuCtxGetDevice,
                                                                PFN_cuCtxGetDevice_v2000) SIGNATURE(cuStreamGetCtx, PFN_cuStreamGetCtx_v9020)
                                                                SIGNATURE(cuStreamGetCtx_ptsz, PFN_cuStreamGetCtx_v9020_ptsz) SIGNATURE(
                                                                    cuCtxPushCurrent_v2,
                                                                    PFN_cuCtxPushCurrent_v4000)
                                                                    SIGNATURE(cuCtxPopCurrent_v2, PFN_cuCtxPopCurrent_v4000) SIGNATURE(
                                                                        cuMemGetAllocationGranularity,
                                                                        PFN_cuMemGetAllocationGranularity_v10020)
                                                                        SIGNATURE(
                                                                            cuMemPoolGetAttribute,
                                                                            PFN_cuMemPoolGetAttribute_v11020)
                                                                            SIGNATURE(
                                                                                cuDeviceGetMemPool,
                                                                                PFN_cuDeviceGetMemPool_v11020)
                                                                                SIGNATURE(
                                                                                    cuDeviceGetDefaultMemPool,
                                                                                    PFN_cuDeviceGetDefaultMemPool_v11020)
                                                                                    SIGNATURE(
                                                                                        cuArrayGetMemoryRequirements,
                                                                                        PFN_cuArrayGetMemoryRequirements_v11060)
                                                                                        SIGNATURE(
                                                                                            cuMipmappedArrayGetMemoryRequirements,
                                                                                            PFN_cuMipmappedArrayGetMemoryRequirements_v11060)
                                                                                            SIGNATURE(
                                                                                                cuDeviceGetGraphMemAttribute,
                                                                                                PFN_cuDeviceGetGraphMemAttribute_v11040)
                                                                                                SIGNATURE(
                                                                                                    cuStreamIsCapturing,
                                                                                                    PFN_cuStreamIsCapturing_v10000)
                                                                                                    SIGNATURE(
                                                                                                        cuStreamIsCapturing_ptsz,
                                                                                                        PFN_cuStreamIsCapturing_v10000_ptsz)}

// ---- Types, structs and constants ------------------------------------------------------

// NOLINTBEGIN(bugprone-sizeof-expression): handles are pointers, compared as such
#define SAME_SIZE(type) static_assert(sizeof(ours::type) == sizeof(::type), #type "'s size");
#define FIELD(type, field)                                                                         \
    static_assert(offsetof(ours::type, field) == offsetof(::type, field) &&                        \
                      sizeof(ours::type::field) == sizeof(::type::field),                          \
                  #type "::" #field);
#define VALUE(name)                                                                                \
    static_assert(static_cast<long long>(ours::name) == static_cast<long long>(::name), #name);

SAME_SIZE(CUresult) SAME_SIZE(CUdevice) SAME_SIZE(CUdeviceptr) SAME_SIZE(CUdeviceptr_v1)
    SAME_SIZE(cuuint64_t) SAME_SIZE(CUcontext) SAME_SIZE(CUstream) SAME_SIZE(CUmemoryPool)
        SAME_SIZE(CUarray) SAME_SIZE(CUmipmappedArray) SAME_SIZE(CUgraph) SAME_SIZE(CUgraphExec)
            SAME_SIZE(CUgraphNode) SAME_SIZE(CUmemGenericAllocationHandle) SAME_SIZE(CUfunction)
                SAME_SIZE(CUdriverProcAddressQueryResult) static_assert(
                    std::is_unsigned_v<ours::CUdeviceptr> && std::is_unsigned_v<::CUdeviceptr>);
static_assert(std::is_unsigned_v<ours::CUmemGenericAllocationHandle>);

VALUE(CUDA_SUCCESS)
VALUE(CUDA_ERROR_INVALID_VALUE)
VALUE(CUDA_ERROR_OUT_OF_MEMORY)
VALUE(CUDA_ERROR_NOT_INITIALIZED)
VALUE(CUDA_ERROR_INVALID_DEVICE)
VALUE(CUDA_ERROR_INVALID_CONTEXT)
VALUE(CUDA_ERROR_NOT_FOUND)
VALUE(CUDA_ERROR_NOT_PERMITTED)
VALUE(CUDA_ERROR_NOT_SUPPORTED)
VALUE(CU_GET_PROC_ADDRESS_DEFAULT)
VALUE(CU_GET_PROC_ADDRESS_LEGACY_STREAM)
VALUE(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
VALUE(CU_GET_PROC_ADDRESS_SUCCESS)
VALUE(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
VALUE(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
VALUE(CU_MEM_ALLOCATION_TYPE_PINNED)
VALUE(CU_MEM_LOCATION_TYPE_DEVICE)
VALUE(CU_MEM_LOCATION_TYPE_HOST)
VALUE(CU_MEM_LOCATION_TYPE_HOST_NUMA)
VALUE(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
VALUE(CU_MEM_ALLOC_GRANULARITY_MINIMUM)
VALUE(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
VALUE(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
VALUE(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
VALUE(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
VALUE(CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
VALUE(CU_MEMPOOL_ATTR_USED_MEM_HIGH)
VALUE(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)
VALUE(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
VALUE(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)
VALUE(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
VALUE(CU_STREAM_CAPTURE_STATUS_NONE)
VALUE(CU_STREAM_CAPTURE_STATUS_ACTIVE)
VALUE(CU_STREAM_CAPTURE_STATUS_INVALIDATED)

SAME_SIZE(CUuuid)
FIELD(CUuuid, bytes)
SAME_SIZE(CUmemLocation)
FIELD(CUmemLocation, type)
FIELD(CUmemLocation, id)
SAME_SIZE(CUmemAllocationProp)
FIELD(CUmemAllocationProp, type)
FIELD(CUmemAllocationProp, requestedHandleTypes)
FIELD(CUmemAllocationProp, location)
FIELD(CUmemAllocationProp, win32HandleMetaData)
FIELD(CUmemAllocationProp, allocFlags)
FIELD(CUmemAllocationProp, allocFlags.compressionType)
FIELD(CUmemAllocationProp, allocFlags.gpuDirectRDMACapable)
FIELD(CUmemAllocationProp, allocFlags.usage)
FIELD(CUmemAllocationProp, allocFlags.reserved)
SAME_SIZE(CUmemPoolProps)
FIELD(CUmemPoolProps, allocType)
FIELD(CUmemPoolProps, handleTypes)
FIELD(CUmemPoolProps, location)
FIELD(CUmemPoolProps, win32SecurityAttributes)
FIELD(CUmemPoolProps, maxSize)
FIELD(CUmemPoolProps, usage)
FIELD(CUmemPoolProps, reserved)
SAME_SIZE(CUDA_ARRAY_DESCRIPTOR)
FIELD(CUDA_ARRAY_DESCRIPTOR, Width)
FIELD(CUDA_ARRAY_DESCRIPTOR, Height)
FIELD(CUDA_ARRAY_DESCRIPTOR, Format)
FIELD(CUDA_ARRAY_DESCRIPTOR, NumChannels)
SAME_SIZE(CUDA_ARRAY3D_DESCRIPTOR)
FIELD(CUDA_ARRAY3D_DESCRIPTOR, Width)
FIELD(CUDA_ARRAY3D_DESCRIPTOR, Height)
FIELD(CUDA_ARRAY3D_DESCRIPTOR, Depth)
FIELD(CUDA_ARRAY3D_DESCRIPTOR, Format)
FIELD(CUDA_ARRAY3D_DESCRIPTOR, NumChannels)
FIELD(CUDA_ARRAY3D_DESCRIPTOR, Flags)
SAME_SIZE(CUDA_ARRAY_MEMORY_REQUIREMENTS)
FIELD(CUDA_ARRAY_MEMORY_REQUIREMENTS, size)
FIELD(CUDA_ARRAY_MEMORY_REQUIREMENTS, alignment)
FIELD(CUDA_ARRAY_MEMORY_REQUIREMENTS, reserved)
SAME_SIZE(CUDA_GRAPH_INSTANTIATE_PARAMS)
FIELD(CUDA_GRAPH_INSTANTIATE_PARAMS, flags)
FIELD(CUDA_GRAPH_INSTANTIATE_PARAMS, hUploadStream)
FIELD(CUDA_GRAPH_INSTANTIATE_PARAMS, hErrNode_out)
FIELD(CUDA_GRAPH_INSTANTIATE_PARAMS, result_out)
SAME_SIZE(CUlaunchConfig)
FIELD(CUlaunchConfig, gridDimX)
FIELD(CUlaunchConfig, gridDimY)
FIELD(CUlaunchConfig, gridDimZ)
FIELD(CUlaunchConfig, blockDimX)
FIELD(CUlaunchConfig, blockDimY)
FIELD(CUlaunchConfig, blockDimZ)
FIELD(CUlaunchConfig, sharedMemBytes)
FIELD(CUlaunchConfig, hStream)
FIELD(CUlaunchConfig, attrs)
FIELD(CUlaunchConfig, numAttrs)
// NOLINTEND(bugprone-sizeof-expression)

} // namespace

int main() {
    check_signatures();
    if (g_checked != count_entries()) {
        std::printf("FAIL: %d signatures checked, entry_points.def has %d CUDA entries\n",
                    g_checked, count_entries());
        return 1;
    }
    std::printf("cuda_abi.hpp and entry_points.def (%d signatures) agree with cuda.h and "
                "cudaTypedefs.h of CUDA_VERSION %d\n",
                g_checked, CUDA_VERSION);
    return 0;
}
