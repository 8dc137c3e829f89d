// Graph memory: allocation nodes take memory from a per-device graph pool
// when a graph is instantiated or launched, and give it back on trim. The
// driver's reserve figure after each of these is what is charged; it is
// memory already taken, so it is charged without a cap check (the next
// admission sees it).
#include "runtime.hpp"

using gpulimit::Runtime;

namespace {

template <typename RealCall>
CUresult then_reconcile(RealCall&& real_call) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    const CUresult result = real_call();
    if (runtime != nullptr && result == CUDA_SUCCESS) {
        runtime->reconcile_graph_memory();
    }
    return result;
}

// A graph's launch runs its kernels: it waits at the compute gate like a
// kernel launch (hooks_launch.cpp).
template <typename RealCall>
CUresult gated_then_reconcile(CUstream stream, bool per_thread, RealCall&& real_call) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    if (runtime != nullptr && runtime->compute_capped) {
        gpulimit::gate_launch(*runtime, stream, per_thread);
    }
    const CUresult result = real_call();
    if (runtime != nullptr && result == CUDA_SUCCESS) {
        runtime->reconcile_graph_memory();
    }
    return result;
}

} // namespace

GPULIMIT_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                     unsigned long long flags) {
    return then_reconcile([&] {
        return GPULIMIT_CALL_REAL(cuGraphInstantiateWithFlags, phGraphExec, hGraph, flags);
    });
}

GPULIMIT_EXPORT CUresult cuGraphInstantiateWithParams(
    CUgraphExec* phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
    return then_reconcile([&] {
        return GPULIMIT_CALL_REAL(cuGraphInstantiateWithParams, phGraphExec, hGraph,
                                  instantiateParams);
    });
}

GPULIMIT_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(
    CUgraphExec* phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
    return then_reconcile([&] {
        return GPULIMIT_CALL_REAL(cuGraphInstantiateWithParams_ptsz, phGraphExec, hGraph,
                                  instantiateParams);
    });
}

GPULIMIT_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph,
                                               CUgraphNode* phErrorNode, char* logBuffer,
                                               size_t bufferSize) {
    return then_reconcile([&] {
        return GPULIMIT_CALL_REAL(cuGraphInstantiate_v2, phGraphExec, hGraph, phErrorNode,
                                  logBuffer, bufferSize);
    });
}

GPULIMIT_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    return gated_then_reconcile(
        hStream, false, [&] { return GPULIMIT_CALL_REAL(cuGraphLaunch, hGraphExec, hStream); });
}

GPULIMIT_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    return gated_then_reconcile(
        hStream, true, [&] { return GPULIMIT_CALL_REAL(cuGraphLaunch_ptsz, hGraphExec, hStream); });
}

GPULIMIT_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
    return then_reconcile([&] { return GPULIMIT_CALL_REAL(cuDeviceGraphMemTrim, device); });
}
