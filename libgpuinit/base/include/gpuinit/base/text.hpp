// Small string helpers shared by the parsers and the reports. Input is
// treated as hostile: every number is range-checked, nothing throws, and text
// from files is escaped before it reaches a terminal or a log.
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
// The lines of a small config file, split into words: '#' starts a comment,
// lines with no words are left out; `number` counts from 1 for messages.
struct WordLine {
    size_t number = 0;
    std::vector<std::string_view> words;
};
std::vector<WordLine> word_lines(std::string_view text);
// Every field between separators, empty ones included: "a,,b" is 3 fields,
// "" is one empty field.
std::vector<std::string_view> split_fields(std::string_view text, char separator);

// Strict unsigned parsers: the whole of `text` must be digits in the base,
// and the value must fit in `max`.
std::optional<uint64_t> parse_decimal(std::string_view text, uint64_t max = UINT64_MAX);
// Hex digits only, no prefix.
std::optional<uint64_t> parse_hex_digits(std::string_view text, uint64_t max = UINT64_MAX);
std::optional<uint64_t> parse_octal(std::string_view text, uint64_t max = UINT64_MAX);

// "0660" style rendering of a permission mode.
std::string format_mode(unsigned mode);
// printf into a std::string. Never pass file content through %s: it stops at
// a NUL byte; append quote(value) instead.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Text safe for one line of a terminal or a log: control characters (C0, DEL
// and the C1 range, which terminals take as escape sequences), NUL and bytes
// that are not UTF-8 become \xHH (\t, \n, \r as themselves escaped).
std::string printable(std::string_view text);
// A value from a file, for a message: printable(), and a value longer than
// `max_bytes` is cut and says how long it was. quote() adds single quotes.
std::string shorten(std::string_view value, size_t max_bytes = 64);
std::string quote(std::string_view value, size_t max_bytes = 64);
// Valid UTF-8: every byte that does not start or continue a well-formed
// sequence (overlong forms, surrogates and values above U+10FFFF included)
// becomes U+FFFD.
std::string valid_utf8(std::string_view text);

} // namespace gpuinit
