// The in-process compute driver: when a device of the group has a compute
// cap and the host daemon does not drive the group, one process of the
// group measures the group's busy time through NVML and steps the
// controller that opens and closes the gate (see compute_driver.cpp).
// Declared in runtime.hpp (ensure_compute_driver, compute_driver_after_fork);
// this header holds what the driver's measurement needs beyond that.
#pragma once

#include "runtime.hpp"

#include <cstdint>

namespace gpulimit {

// NVML's per-process sampling, for one device, as the driver sees it: the
// group's busy time in the samples that arrived since the previous call.
struct ComputeSampler {
    nvmlDevice_t nvml = nullptr;
    bool nvml_tried = false;
    bool ever_matched = false;
    unsigned long long last_seen_us = 0;   // NVML's lastSeenTimeStamp
    unsigned long long device_seen_us = 0; // the same, for the device's own samples
    uint64_t last_poll_ns = 0;
    uint64_t started_ns = 0; // when this process began to drive the device
    limit::SampleClock clock;
    // The last poll, for GPU_LIMIT_TRACE_COMPUTE.
    struct Poll {
        uint64_t nvml_ns = 0; // time spent in NVML
        int code = 0;         // nvmlDeviceGetProcessUtilization's result
        unsigned samples = 0;
        unsigned matched = 0;
        uint64_t busy_ns = 0;
        bool device_wide = false;
    } poll;
};

} // namespace gpulimit
