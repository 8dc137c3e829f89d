// The driver's procfs files are "Key: value" lines (information, params,
// the MIG capability access files). One reader for all of them; their
// input is hostile, so every line is checked and the first bad one is
// reported as "file:line: what".
#pragma once

#include "gpuinit/base/result.hpp"

#include <string_view>
#include <vector>

namespace gpuinit {

struct KeyValue {
    std::string_view key;   // trimmed
    std::string_view value; // trimmed
    size_t line = 0;
};

enum class KeyStyle {
    Words,      // "GPU UUID", "Device Minor": letters, digits, spaces, '_', '-', '(', ')', '.'
    Identifier, // "ModifyDeviceFiles": letters, digits, '_', '-', '.'
};

// Blank lines are skipped. Every other line must hold a ':' after a
// non-empty key in `style`, and a value without control characters; a key
// given twice is an error. The views point into `text`.
Result<std::vector<KeyValue>> read_key_values(std::string_view text, std::string_view source,
                                              KeyStyle style);

// The entry for `key`, or nullptr.
const KeyValue* find_key(const std::vector<KeyValue>& entries, std::string_view key);

} // namespace gpuinit
