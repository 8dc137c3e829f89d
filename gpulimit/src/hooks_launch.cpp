// Kernel launches and the compute cap (GPU_UTIL_PER_DEVICE): every launch
// path waits at its device's gate while the group is over its share (see
// libgpuinit/limit's compute.hpp). Graph launches (hooks_graph.cpp) pass the
// same gate; a stream that is capturing a graph never waits, since it runs
// nothing: the graph's launch is gated instead.
//
// Cost: without a compute cap, one load of a flag after enter(); with one,
// one acquire load per capped device while the gates are open. Only a closed
// gate costs more (the stream's device, its capture status, the sleep).
#include "runtime.hpp"

using gpulimit::Runtime;

namespace gpulimit {
namespace {

bool capturing(CUstream stream, bool per_thread) {
    const RealCuda& r = real();
    const auto is_capturing = per_thread && r.cuStreamIsCapturing_ptsz != nullptr
                                  ? r.cuStreamIsCapturing_ptsz
                                  : r.cuStreamIsCapturing;
    int status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (is_capturing == nullptr || is_capturing(stream, &status) != CUDA_SUCCESS) {
        return false;
    }
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

} // namespace

void gate_launch(Runtime& runtime, CUstream stream, bool per_thread) {
    bool all_open = true;
    for (int i = 0; i < runtime.compute_count; ++i) {
        if (runtime.compute_records[i]->gate.load(std::memory_order_acquire) != 0) {
            all_open = false;
            break;
        }
    }
    ensure_compute_driver(runtime);
    if (all_open) {
        return;
    }
    DeviceInfo* device = runtime.launch_device(stream, per_thread);
    if (device == nullptr || device->compute == nullptr ||
        device->compute->gate.load(std::memory_order_acquire) == 0 ||
        capturing(stream, per_thread)) {
        return;
    }
    limit::gate_pass(*device->compute);
}

} // namespace gpulimit

namespace {

// enter(), the gate, then the real call.
template <typename RealCall>
CUresult gated(CUstream stream, bool per_thread, RealCall&& real_call) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    if (runtime != nullptr && runtime->compute_capped) {
        gpulimit::gate_launch(*runtime, stream, per_thread);
    }
    return real_call();
}

} // namespace

CUresult gpulimit::hook::cuLaunchKernel(cuLaunchKernel_fn self, CUfunction f, unsigned int gridDimX,
                                        unsigned int gridDimY, unsigned int gridDimZ,
                                        unsigned int blockDimX, unsigned int blockDimY,
                                        unsigned int blockDimZ, unsigned int sharedMemBytes,
                                        CUstream hStream, void** kernelParams, void** extra) {
    return gated(hStream, false, [&] {
        return GPULIMIT_CALL_SELF(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                  sharedMemBytes, hStream, kernelParams, extra);
    });
}

CUresult gpulimit::hook::cuLaunchKernel_ptsz(cuLaunchKernel_ptsz_fn self, CUfunction f,
                                             unsigned int gridDimX, unsigned int gridDimY,
                                             unsigned int gridDimZ, unsigned int blockDimX,
                                             unsigned int blockDimY, unsigned int blockDimZ,
                                             unsigned int sharedMemBytes, CUstream hStream,
                                             void** kernelParams, void** extra) {
    return gated(hStream, true, [&] {
        return GPULIMIT_CALL_SELF(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                  sharedMemBytes, hStream, kernelParams, extra);
    });
}

CUresult gpulimit::hook::cuLaunchKernelEx(cuLaunchKernelEx_fn self, const CUlaunchConfig* config,
                                          CUfunction f, void** kernelParams, void** extra) {
    // A null config is the driver's error to report; the gate then has no
    // stream to look at and uses the default one.
    return gated(config != nullptr ? config->hStream : nullptr, false,
                 [&] { return GPULIMIT_CALL_SELF(config, f, kernelParams, extra); });
}

CUresult gpulimit::hook::cuLaunchKernelEx_ptsz(cuLaunchKernelEx_ptsz_fn self,
                                               const CUlaunchConfig* config, CUfunction f,
                                               void** kernelParams, void** extra) {
    return gated(config != nullptr ? config->hStream : nullptr, true,
                 [&] { return GPULIMIT_CALL_SELF(config, f, kernelParams, extra); });
}

CUresult gpulimit::hook::cuLaunchCooperativeKernel(cuLaunchCooperativeKernel_fn self, CUfunction f,
                                                   unsigned int gridDimX, unsigned int gridDimY,
                                                   unsigned int gridDimZ, unsigned int blockDimX,
                                                   unsigned int blockDimY, unsigned int blockDimZ,
                                                   unsigned int sharedMemBytes, CUstream hStream,
                                                   void** kernelParams) {
    return gated(hStream, false, [&] {
        return GPULIMIT_CALL_SELF(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                  sharedMemBytes, hStream, kernelParams);
    });
}

CUresult gpulimit::hook::cuLaunchCooperativeKernel_ptsz(
    cuLaunchCooperativeKernel_ptsz_fn self, CUfunction f, unsigned int gridDimX,
    unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void** kernelParams) {
    return gated(hStream, true, [&] {
        return GPULIMIT_CALL_SELF(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                  sharedMemBytes, hStream, kernelParams);
    });
}
