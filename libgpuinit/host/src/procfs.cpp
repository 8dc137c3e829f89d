#include "gpuinit/host/procfs.hpp"

#include "gpuinit/base/text.hpp"

#include <cerrno>

namespace gpuinit {

namespace {

Error parse_error(std::string_view source, size_t line, std::string_view what) {
    return Error{EINVAL, format("%.*s:%zu: %.*s", static_cast<int>(source.size()), source.data(),
                                line, static_cast<int>(what.size()), what.data())};
}

bool printable(std::string_view text) {
    for (unsigned char c : text) {
        if (c < 0x20 || c == 0x7f) {
            return false;
        }
    }
    return true;
}

bool is_device_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '/' || c == ':';
}

} // namespace

std::optional<unsigned> CharDevices::major(std::string_view name) const {
    for (const auto& [number, entry_name] : entries) {
        if (entry_name == name) {
            return number;
        }
    }
    return std::nullopt;
}

Result<CharDevices> parse_proc_devices(std::string_view text, std::string_view source) {
    CharDevices devices;
    bool in_char_section = false;
    bool saw_char_header = false;
    size_t line_number = 0;
    for (std::string_view line : split_lines(text)) {
        ++line_number;
        if (line == "Character devices:") {
            if (saw_char_header) {
                return parse_error(source, line_number, "second 'Character devices:' header");
            }
            in_char_section = saw_char_header = true;
            continue;
        }
        if (trim(line).empty()) {
            in_char_section = false;
            continue;
        }
        if (!in_char_section) {
            continue;
        }
        auto words = split_words(line);
        if (words.size() != 2) {
            return parse_error(source, line_number, "expected '<major> <name>'");
        }
        auto number = parse_decimal(words[0], 4095); // MAJORBITS is 12
        if (!number) {
            return parse_error(source, line_number,
                               "major '" + std::string(words[0]) + "' is not a number 0..4095");
        }
        for (char c : words[1]) {
            if (!is_device_name_char(c)) {
                return parse_error(source, line_number, "device name has an invalid character");
            }
        }
        devices.entries.emplace_back(static_cast<unsigned>(*number), std::string(words[1]));
    }
    if (!saw_char_header) {
        return parse_error(source, line_number == 0 ? 1 : line_number,
                           "no 'Character devices:' section");
    }
    return devices;
}

Result<GpuInformation> parse_gpu_information(std::string_view text, std::string_view source) {
    GpuInformation info;
    bool have_minor = false;
    size_t line_number = 0;
    for (std::string_view line : split_lines(text)) {
        ++line_number;
        if (trim(line).empty()) {
            continue;
        }
        size_t colon = line.find(':');
        if (colon == std::string_view::npos) {
            return parse_error(source, line_number, "expected 'Field: value'");
        }
        std::string_view key = trim(line.substr(0, colon));
        std::string_view value = trim(line.substr(colon + 1));
        if (!printable(value)) {
            return parse_error(source, line_number, "value has control characters");
        }
        if (key == "Device Minor") {
            auto minor = parse_decimal(value, kMaxGpuMinor);
            if (!minor) {
                return parse_error(source, line_number,
                                   format("Device Minor '%.*s' is not a number 0..%u",
                                          static_cast<int>(value.size()), value.data(),
                                          kMaxGpuMinor));
            }
            if (have_minor) {
                return parse_error(source, line_number, "Device Minor given twice");
            }
            info.minor = static_cast<unsigned>(*minor);
            have_minor = true;
        } else if (key == "GPU UUID") {
            if (!starts_with(value, "GPU-") || value.size() > 64) {
                return parse_error(source, line_number, "GPU UUID does not start with 'GPU-'");
            }
            info.uuid = value;
        } else if (key == "Model") {
            info.model = value;
        } else if (key == "Bus Location") {
            info.bus_location = value;
        } else if (key == "GPU Excluded") {
            info.excluded = value == "Yes";
        }
    }
    if (!have_minor) {
        return parse_error(source, line_number == 0 ? 1 : line_number,
                           "no 'Device Minor:' line; the driver did not assign this GPU a minor");
    }
    return info;
}

const std::string* DriverParams::raw(std::string_view name) const {
    for (const auto& [key, value] : values) {
        if (key == name) {
            return &value;
        }
    }
    return nullptr;
}

std::optional<uint64_t> DriverParams::number(std::string_view name) const {
    const std::string* value = raw(name);
    if (value == nullptr) {
        return std::nullopt;
    }
    return parse_decimal(*value);
}

Result<DriverParams> parse_driver_params(std::string_view text, std::string_view source) {
    DriverParams params;
    size_t line_number = 0;
    for (std::string_view line : split_lines(text)) {
        ++line_number;
        if (trim(line).empty()) {
            continue;
        }
        size_t colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0) {
            return parse_error(source, line_number, "expected 'Name: value'");
        }
        std::string_view key = trim(line.substr(0, colon));
        std::string_view value = trim(line.substr(colon + 1));
        for (char c : key) {
            if (!is_device_name_char(c) || c == '/' || c == ':') {
                return parse_error(source, line_number, "parameter name has an invalid character");
            }
        }
        if (!printable(value)) {
            return parse_error(source, line_number, "value has control characters");
        }
        bool quoted = value.size() >= 2 && value.front() == '"' && value.back() == '"';
        if (!quoted && !parse_decimal(value)) {
            return parse_error(source, line_number,
                               "value of " + std::string(key) +
                                   " is neither a decimal number nor a quoted string");
        }
        if (params.raw(key) != nullptr) {
            return parse_error(source, line_number, std::string(key) + " given twice");
        }
        params.values.emplace_back(std::string(key), std::string(value));
    }
    return params;
}

} // namespace gpuinit
