// The limiter's runtime inside a foreign process: one-time settings and
// device discovery, the group's shared state, and the per-device facts the
// hooks need (cap, granularity, group index).
//
// Nothing happens at load time: the first hooked call (cuInit, or any other
// once the switch is on) initializes. Every function here is safe to call
// from any thread, with or without a current context.
#pragma once

#include "cuda_abi.hpp"

#include <cstddef>
#include <cstdint>

#define GPULIMIT_EXPORT extern "C" __attribute__((visibility("default")))

namespace gpulimit {

// Until the resolver's real.hpp lands: the real driver's functions, one
// pointer per entry of entry_points.def, resolved lazily (null when the
// driver lacks one). Replaced by real.hpp's accessor when it lands.
struct RealFunctions {
#define GPULIMIT_CUDA_HOOK(name, params) CUresult(*name) params;
#define GPULIMIT_CUDA_REAL(name, params) CUresult(*name) params;
#define GPULIMIT_NVML_HOOK(name, params) nvmlReturn_t(*name) params;
#define GPULIMIT_NVML_REAL(name, params) nvmlReturn_t(*name) params;
#include "entry_points.def"
};
const RealFunctions& real();

// NVML's "function not found" (nvml.h's NVML_ERROR_FUNCTION_NOT_FOUND).
inline constexpr nvmlReturn_t kNvmlFunctionNotFound = 13;

} // namespace gpulimit

// Calls the real function or answers "not found" when the driver lacks it.
#define GPULIMIT_CALL_REAL(name, ...)                                                              \
    (::gpulimit::real().name ? ::gpulimit::real().name(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND)
#define GPULIMIT_CALL_REAL_NVML(name, ...)                                                         \
    (::gpulimit::real().name ? ::gpulimit::real().name(__VA_ARGS__)                                \
                             : ::gpulimit::kNvmlFunctionNotFound)
