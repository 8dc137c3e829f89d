#include "gpuinit/host/proc_devices.hpp"

#include "gpuinit/base/text.hpp"

namespace gpuinit {

namespace {

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

size_t CharDevices::line_of(std::string_view name) const {
    for (size_t i = 0; i < entries.size(); ++i) {
        if (entries[i].second == name) {
            return lines[i];
        }
    }
    return 0;
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
                               "major " + quote(words[0]) + " is not a number 0..4095");
        }
        for (char c : words[1]) {
            if (!is_device_name_char(c)) {
                return parse_error(source, line_number, "device name has an invalid character");
            }
        }
        devices.entries.emplace_back(static_cast<unsigned>(*number), std::string(words[1]));
        devices.lines.push_back(line_number);
    }
    if (!saw_char_header) {
        return parse_error(source, line_number == 0 ? 1 : line_number,
                           "no 'Character devices:' section");
    }
    return devices;
}

} // namespace gpuinit
