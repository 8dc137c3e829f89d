// Parsers for the driver's procfs files. Their input is hostile: every parser
// checks each line and reports the first bad one as "file:line: what".
#pragma once

#include "gpuinit/base/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuinit {

// The "Character devices:" section of /proc/devices.
struct CharDevices {
    std::vector<std::pair<unsigned, std::string>> entries;

    // Exact name match: "nvidia" never matches "nvidia-uvm".
    std::optional<unsigned> major(std::string_view name) const;
};

Result<CharDevices> parse_proc_devices(std::string_view text, std::string_view source);

// /proc/driver/nvidia/gpus/<bdf>/information
struct GpuInformation {
    std::string model;
    std::string uuid;         // empty when the driver did not print one
    std::string bus_location; // as printed, e.g. "0000:17:00.0"
    unsigned minor = 0;
    bool excluded = false;
};

Result<GpuInformation> parse_gpu_information(std::string_view text, std::string_view source);

// /proc/driver/nvidia/params: "Name: value", numbers in decimal.
struct DriverParams {
    std::vector<std::pair<std::string, std::string>> values;

    const std::string* raw(std::string_view name) const;
    // Decimal value of a numeric parameter; nullopt when absent.
    std::optional<uint64_t> number(std::string_view name) const;
};

Result<DriverParams> parse_driver_params(std::string_view text, std::string_view source);

// Largest minor the driver hands to a GPU; 254 and 255 are modeset and ctl.
inline constexpr unsigned kMaxGpuMinor = 253;

} // namespace gpuinit
