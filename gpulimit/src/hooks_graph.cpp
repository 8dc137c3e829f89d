// Graph memory. Pass-through for now.
#include "runtime.hpp"

GPULIMIT_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                     unsigned long long flags) {
    return GPULIMIT_CALL_REAL(cuGraphInstantiateWithFlags, phGraphExec, hGraph, flags);
}

GPULIMIT_EXPORT CUresult cuGraphInstantiateWithParams(
    CUgraphExec* phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
    return GPULIMIT_CALL_REAL(cuGraphInstantiateWithParams, phGraphExec, hGraph, instantiateParams);
}

GPULIMIT_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(
    CUgraphExec* phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
    return GPULIMIT_CALL_REAL(cuGraphInstantiateWithParams_ptsz, phGraphExec, hGraph,
                              instantiateParams);
}

GPULIMIT_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph,
                                               CUgraphNode* phErrorNode, char* logBuffer,
                                               size_t bufferSize) {
    return GPULIMIT_CALL_REAL(cuGraphInstantiate_v2, phGraphExec, hGraph, phErrorNode, logBuffer,
                              bufferSize);
}

GPULIMIT_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    return GPULIMIT_CALL_REAL(cuGraphLaunch, hGraphExec, hStream);
}

GPULIMIT_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    return GPULIMIT_CALL_REAL(cuGraphLaunch_ptsz, hGraphExec, hStream);
}

GPULIMIT_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
    return GPULIMIT_CALL_REAL(cuDeviceGraphMemTrim, device);
}
