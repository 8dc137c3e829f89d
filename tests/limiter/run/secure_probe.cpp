// gpulimit_secure_probe (tests only): cuInit, cuMemGetInfo_v2's total and a
// 2 GiB cuMemAlloc_v2 on the stand-in driver, bound to it by name through an
// absolute RUNPATH (which the loader still honours in a setuid program, where
// LD_LIBRARY_PATH is ignored), so that setuid.sh can run it setuid root with
// libgpulimit.so in /etc/ld.so.preload.
// Output: "init=<CUresult> total=<bytes>", flushed (an over-cap allocation
// may end the process), then "alloc=<CUresult>".
#include "cuda_abi.hpp"

#include <cstdio>

extern "C" {
CUresult cuInit(unsigned flags);
CUresult cuDeviceGet(CUdevice* device, int ordinal);
CUresult cuCtxCreate_v2(CUcontext* context, unsigned flags, CUdevice device);
CUresult cuMemGetInfo_v2(size_t* free, size_t* total);
CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes);
}

int main() {
    const CUresult init = cuInit(0);
    CUdevice device = 0;
    CUcontext context = nullptr;
    size_t free = 0;
    size_t total = 0;
    CUdeviceptr pointer = 0;
    CUresult alloc = init;
    if (init == CUDA_SUCCESS && cuDeviceGet(&device, 0) == CUDA_SUCCESS &&
        cuCtxCreate_v2(&context, 0, device) == CUDA_SUCCESS) {
        cuMemGetInfo_v2(&free, &total);
    }
    std::printf("init=%d total=%zu\n", static_cast<int>(init), total);
    std::fflush(stdout);
    if (init == CUDA_SUCCESS && context != nullptr) {
        alloc = cuMemAlloc_v2(&pointer, size_t{2} << 30);
    }
    std::printf("alloc=%d\n", static_cast<int>(alloc));
    return 0;
}
