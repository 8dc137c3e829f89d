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

CUresult gpulimit::hook::cuGraphInstantiateWithFlags(cuGraphInstantiateWithFlags_fn self,
                                                     CUgraphExec* phGraphExec, CUgraph hGraph,
                                                     unsigned long long flags) {
    return then_reconcile([&] { return GPULIMIT_CALL_SELF(phGraphExec, hGraph, flags); });
}

CUresult
gpulimit::hook::cuGraphInstantiateWithParams(cuGraphInstantiateWithParams_fn self,
                                             CUgraphExec* phGraphExec, CUgraph hGraph,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
    return then_reconcile(
        [&] { return GPULIMIT_CALL_SELF(phGraphExec, hGraph, instantiateParams); });
}

CUresult gpulimit::hook::cuGraphInstantiateWithParams_ptsz(
    cuGraphInstantiateWithParams_ptsz_fn self, CUgraphExec* phGraphExec, CUgraph hGraph,
    CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
    return then_reconcile(
        [&] { return GPULIMIT_CALL_SELF(phGraphExec, hGraph, instantiateParams); });
}

CUresult gpulimit::hook::cuGraphInstantiate_v2(cuGraphInstantiate_v2_fn self,
                                               CUgraphExec* phGraphExec, CUgraph hGraph,
                                               CUgraphNode* phErrorNode, char* logBuffer,
                                               size_t bufferSize) {
    return then_reconcile([&] {
        return GPULIMIT_CALL_SELF(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
    });
}

CUresult gpulimit::hook::cuGraphLaunch(cuGraphLaunch_fn self, CUgraphExec hGraphExec,
                                       CUstream hStream) {
    return gated_then_reconcile(hStream, false,
                                [&] { return GPULIMIT_CALL_SELF(hGraphExec, hStream); });
}

CUresult gpulimit::hook::cuGraphLaunch_ptsz(cuGraphLaunch_ptsz_fn self, CUgraphExec hGraphExec,
                                            CUstream hStream) {
    return gated_then_reconcile(hStream, true,
                                [&] { return GPULIMIT_CALL_SELF(hGraphExec, hStream); });
}

CUresult gpulimit::hook::cuDeviceGraphMemTrim(cuDeviceGraphMemTrim_fn self, CUdevice device) {
    return then_reconcile([&] { return GPULIMIT_CALL_SELF(device); });
}
