// NVIDIA's nvml.h, the one place every NVML type, constant and signature in
// the project comes from (found or fetched by cmake/Nvml.cmake: Debian's
// libnvidia-ml-dev, NVML API 11 as of CUDA 11.8, or any newer nvml.h).
//
// NVML_NO_UNVERSIONED_FUNC_DEFS: nvml.h then declares each function under its
// exported ABI name (nvmlDeviceGetComputeRunningProcesses is the v1 symbol
// with nvmlProcessInfo_v1_t) instead of #defining the old names to the
// newest versions, so a dlsym'd pointer and its declared type always agree.
#pragma once

#ifndef NVML_NO_UNVERSIONED_FUNC_DEFS
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#endif
#include <nvml.h>

// What drivers since R535 export beyond an NVML API 11 header: the one
// addition the project uses, declared only when nvml.h lacks it (an NVML
// API 12 or newer nvml.h declares it itself). Checked against
// NVIDIA/go-nvml pkg/nvml/nvml.h at 2f9e261f (NVML API 13, "sync-nvml-h",
// 2026-07), and against a real driver: 580.159.04 on an H100 filled
// 32-byte nvmlProcessDetail_v1_t entries.
#if NVML_API_VERSION < 12
extern "C" {
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessDetail_v1_t;

typedef enum nvmlProcessMode_enum {
    NVML_PROCESS_MODE_COMPUTE = 0,
    NVML_PROCESS_MODE_GRAPHICS = 1,
    NVML_PROCESS_MODE_MPS = 2,
} nvmlProcessMode_t;

typedef struct {
    unsigned int version;
    unsigned int mode;
    unsigned int numProcArrayEntries;
    nvmlProcessDetail_v1_t* procArray;
} nvmlProcessDetailList_v1_t;
typedef nvmlProcessDetailList_v1_t nvmlProcessDetailList_t;
#define nvmlProcessDetailList_v1 NVML_STRUCT_VERSION(ProcessDetailList, 1)

nvmlReturn_t DECLDIR nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                           nvmlProcessDetailList_t* plist);
}
#endif

static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvml.h: nvmlProcessInfo_v1_t");
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "nvml.h: nvmlProcessInfo_v2_t");
static_assert(sizeof(nvmlProcessDetail_v1_t) == 32, "nvml.h: nvmlProcessDetail_v1_t");
