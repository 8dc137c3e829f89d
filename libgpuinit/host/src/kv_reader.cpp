#include "gpuinit/host/kv_reader.hpp"

#include "gpuinit/base/text.hpp"

namespace gpuinit {

namespace {

bool is_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool valid_key_char(char c, KeyStyle style) {
    if (is_alnum(c) || c == '_' || c == '-' || c == '.') {
        return true;
    }
    return style == KeyStyle::Words && (c == ' ' || c == '(' || c == ')');
}

bool has_control_characters(std::string_view text) {
    for (unsigned char c : text) {
        if (c < 0x20 || c == 0x7f) {
            return true;
        }
    }
    return false;
}

} // namespace

Result<std::vector<KeyValue>> read_key_values(std::string_view text, std::string_view source,
                                              KeyStyle style) {
    std::vector<KeyValue> entries;
    size_t line_number = 0;
    for (std::string_view line : split_lines(text)) {
        ++line_number;
        if (trim(line).empty()) {
            continue;
        }
        size_t colon = line.find(':');
        std::string_view key = colon == std::string_view::npos ? "" : trim(line.substr(0, colon));
        if (key.empty()) {
            return parse_error(source, line_number, "expected 'Name: value'");
        }
        for (char c : key) {
            if (!valid_key_char(c, style)) {
                return parse_error(source, line_number,
                                   "name " + quote(key) + " has an invalid character");
            }
        }
        std::string_view value = trim(line.substr(colon + 1));
        if (has_control_characters(value)) {
            return parse_error(source, line_number,
                               "value of " + std::string(key) + " has control characters");
        }
        if (find_key(entries, key) != nullptr) {
            return parse_error(source, line_number, std::string(key) + " given twice");
        }
        entries.push_back({key, value, line_number});
    }
    return entries;
}

const KeyValue* find_key(const std::vector<KeyValue>& entries, std::string_view key) {
    for (const KeyValue& entry : entries) {
        if (entry.key == key) {
            return &entry;
        }
    }
    return nullptr;
}

} // namespace gpuinit
