// Small string helpers shared by the parsers. Input is treated as hostile:
// every number is range-checked, nothing throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

std::string_view trim(std::string_view text);
std::vector<std::string_view> split_lines(std::string_view text);
std::vector<std::string_view> split_words(std::string_view text);
bool starts_with(std::string_view text, std::string_view prefix);

// Strict unsigned parsers: the whole of `text` must be digits in the base,
// and the value must fit in `max`.
std::optional<uint64_t> parse_decimal(std::string_view text, uint64_t max = UINT64_MAX);
// Hex with an optional "0x" prefix, as sysfs prints it.
std::optional<uint64_t> parse_hex(std::string_view text, uint64_t max = UINT64_MAX);
// Hex digits only, no prefix.
std::optional<uint64_t> parse_hex_digits(std::string_view text, uint64_t max = UINT64_MAX);
std::optional<uint64_t> parse_octal(std::string_view text, uint64_t max = UINT64_MAX);

// "0660" style rendering of a permission mode.
std::string format_mode(unsigned mode);
// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

} // namespace gpuinit
