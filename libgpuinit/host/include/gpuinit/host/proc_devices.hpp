// /proc/devices: the character majors the drivers registered.
#pragma once

#include "gpuinit/base/result.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuinit {

// The "Character devices:" section.
struct CharDevices {
    std::vector<std::pair<unsigned, std::string>> entries;

    // Exact name match: "nvidia" never matches "nvidia-uvm".
    std::optional<unsigned> major(std::string_view name) const;
    // The line of the entry for `name` (for messages); 0 when absent.
    size_t line_of(std::string_view name) const;

    std::vector<size_t> lines; // parallel to entries
};

Result<CharDevices> parse_proc_devices(std::string_view text, std::string_view source);

} // namespace gpuinit
