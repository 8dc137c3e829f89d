// /proc/driver/nvidia/params: "Name: value", numbers in decimal (the kernel
// prints 0666 as 438), strings quoted. The only run-time view of what the
// driver was loaded with.
#pragma once

#include "gpuinit/base/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuinit {

inline constexpr std::string_view kDriverParamsPath = "proc/driver/nvidia/params";

struct DriverParams {
    std::string source; // for messages
    std::vector<std::pair<std::string, std::string>> values;
    std::vector<size_t> lines; // parallel to values

    const std::string* raw(std::string_view name) const;
    // The decimal value of a numeric parameter, quoted or not; nullopt when
    // the parameter is absent; an error naming the line when it is there but
    // not a number (a check must not mistake it for "absent").
    Result<std::optional<uint64_t>> number(std::string_view name) const;
};

Result<DriverParams> parse_driver_params(std::string_view text, std::string_view source);

} // namespace gpuinit
