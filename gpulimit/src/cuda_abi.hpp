// The driver ABI as libgpulimit sees it: our own declarations by exported
// (versioned) name, so no cuda.h or nvml.h is needed to build, and the
// macros of cuda.h (cuMemAlloc -> cuMemAlloc_v2) cannot rename anything.
// Values are those of CUDA 12/13's cuda.h and nvml.h, which never renumber.
//
// Every type, constant and struct layout below, and every signature of
// entry_points.def against its PFN_<name>_v<version> typedef, was checked
// against cuda.h and cudaTypedefs.h of CUDA 12.6.3
// (github.com/zspace/system.cuda-12.6, include/, commit
// b3d92c837713411301ae5df45b0c7758df7d931e, CUDA_VERSION 12060) and of CUDA
// 13.0 (CUDA_VERSION 13000, the toolkit in /usr/local/cuda of the project's
// machines): no difference. tests/limiter/abi/cuda_headers.cpp repeats the
// check at compile time wherever a toolkit is installed.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUdeviceptr_v1 = unsigned int;
using cuuint64_t = uint64_t;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUmemoryPool = struct CUmemPoolHandle_st*;
using CUarray = struct CUarray_st*;
using CUmipmappedArray = struct CUmipmappedArray_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;
using CUgraphNode = struct CUgraphNode_st*;
using CUmemGenericAllocationHandle = unsigned long long;
using CUfunction = struct CUfunc_st*;

enum : CUresult {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_PERMITTED = 800,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};

struct CUuuid {
    char bytes[16];
};

// cuGetProcAddress flags and the _v2 query result.
enum : cuuint64_t {
    CU_GET_PROC_ADDRESS_DEFAULT = 0,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2,
};
using CUdriverProcAddressQueryResult = int;
enum : CUdriverProcAddressQueryResult {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

// Virtual memory management.
enum : int {
    CU_MEM_ALLOCATION_TYPE_PINNED = 1,
    CU_MEM_LOCATION_TYPE_DEVICE = 1,
    CU_MEM_LOCATION_TYPE_HOST = 2,
    CU_MEM_LOCATION_TYPE_HOST_NUMA = 3,
    CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 4,
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
};
struct CUmemLocation {
    int type; // CU_MEM_LOCATION_TYPE_*
    int id;   // the device ordinal for a device location
};
struct CUmemAllocationProp {
    int type;                 // CU_MEM_ALLOCATION_TYPE_*
    int requestedHandleTypes; // CUmemAllocationHandleType
    CUmemLocation location;
    void* win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
};

// Stream-ordered pools.
enum : int {
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
    CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8,
};
struct CUmemPoolProps {
    int allocType; // CU_MEM_ALLOCATION_TYPE_*
    int handleTypes;
    CUmemLocation location;
    void* win32SecurityAttributes;
    size_t maxSize; // CUDA 12.2+; zero before
    unsigned short usage;
    unsigned char reserved[54];
};

// Arrays.
struct CUDA_ARRAY_DESCRIPTOR {
    size_t Width;
    size_t Height;
    int Format; // CUarray_format
    unsigned int NumChannels;
};
struct CUDA_ARRAY3D_DESCRIPTOR {
    size_t Width;
    size_t Height;
    size_t Depth;
    int Format;
    unsigned int NumChannels;
    unsigned int Flags;
};
struct CUDA_ARRAY_MEMORY_REQUIREMENTS {
    size_t size;
    size_t alignment;
    unsigned int reserved[4];
};

// Graph memory.
enum : int {
    CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0,
    CU_GRAPH_MEM_ATTR_USED_MEM_HIGH = 1,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH = 3,
};
struct CUDA_GRAPH_INSTANTIATE_PARAMS {
    cuuint64_t flags;
    CUstream hUploadStream;
    CUgraphNode hErrNode_out;
    int result_out;
};

// Kernel launches (the compute cap). cuLaunchKernelEx's configuration: only
// hStream is read.
struct CUlaunchAttribute;
struct CUlaunchConfig {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute* attrs;
    unsigned int numAttrs;
};
enum : int {
    CU_STREAM_CAPTURE_STATUS_NONE = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
};

} // extern "C"
