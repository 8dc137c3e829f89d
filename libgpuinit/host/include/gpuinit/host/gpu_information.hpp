// /proc/driver/nvidia/gpus/<bdf>/information: what the driver says of one GPU.
#pragma once

#include "gpuinit/base/result.hpp"

#include <string>
#include <string_view>

namespace gpuinit {

// Largest minor the driver hands to a GPU; 254 and 255 are modeset and ctl.
inline constexpr unsigned kMaxGpuMinor = 253;

struct GpuInformation {
    std::string model;
    std::string uuid;         // empty when the driver did not print one
    std::string bus_location; // as printed, e.g. "0000:17:00.0"
    size_t bus_location_line = 0;
    unsigned minor = 0;
    bool excluded = false;
};

Result<GpuInformation> parse_gpu_information(std::string_view text, std::string_view source);

} // namespace gpuinit
