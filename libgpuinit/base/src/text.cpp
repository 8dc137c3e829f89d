#include "gpuinit/base/text.hpp"

#include <cstdarg>
#include <cstdio>

namespace gpuinit {

namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v';
}

std::optional<uint64_t> parse_in_base(std::string_view text, unsigned base, uint64_t max) {
    if (text.empty()) {
        return std::nullopt;
    }
    uint64_t value = 0;
    for (char c : text) {
        unsigned digit = 0;
        if (c >= '0' && c <= '9') {
            digit = static_cast<unsigned>(c - '0');
        } else if (base == 16 && c >= 'a' && c <= 'f') {
            digit = static_cast<unsigned>(c - 'a' + 10);
        } else if (base == 16 && c >= 'A' && c <= 'F') {
            digit = static_cast<unsigned>(c - 'A' + 10);
        } else {
            return std::nullopt;
        }
        if (digit >= base || digit > max) {
            return std::nullopt;
        }
        if (value > (max - digit) / base) {
            return std::nullopt;
        }
        value = value * base + digit;
    }
    return value;
}

} // namespace

std::string_view trim(std::string_view text) {
    while (!text.empty() && is_space(text.front())) {
        text.remove_prefix(1);
    }
    while (!text.empty() && is_space(text.back())) {
        text.remove_suffix(1);
    }
    return text;
}

std::vector<std::string_view> split_lines(std::string_view text) {
    std::vector<std::string_view> lines;
    while (!text.empty()) {
        size_t end = text.find('\n');
        if (end == std::string_view::npos) {
            lines.push_back(text);
            break;
        }
        lines.push_back(text.substr(0, end));
        text.remove_prefix(end + 1);
    }
    return lines;
}

std::vector<std::string_view> split_words(std::string_view text) {
    std::vector<std::string_view> words;
    size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && is_space(text[i])) {
            ++i;
        }
        size_t start = i;
        while (i < text.size() && !is_space(text[i])) {
            ++i;
        }
        if (i > start) {
            words.push_back(text.substr(start, i - start));
        }
    }
    return words;
}

bool starts_with(std::string_view text, std::string_view prefix) {
    return text.substr(0, prefix.size()) == prefix;
}

std::optional<uint64_t> parse_decimal(std::string_view text, uint64_t max) {
    return parse_in_base(text, 10, max);
}

std::optional<uint64_t> parse_hex(std::string_view text, uint64_t max) {
    if (starts_with(text, "0x") || starts_with(text, "0X")) {
        text.remove_prefix(2);
    }
    return parse_in_base(text, 16, max);
}

std::optional<uint64_t> parse_hex_digits(std::string_view text, uint64_t max) {
    return parse_in_base(text, 16, max);
}

std::optional<uint64_t> parse_octal(std::string_view text, uint64_t max) {
    return parse_in_base(text, 8, max);
}

std::string format_mode(unsigned mode) {
    return format("%04o", mode & 07777u);
}

std::string format(const char* fmt, ...) {
    // Most messages fit; only a longer one is formatted a second time.
    char small[256];
    va_list args;
    va_start(args, fmt);
    int size = std::vsnprintf(small, sizeof small, fmt, args);
    va_end(args);
    if (size < 0) {
        return {};
    }
    if (static_cast<size_t>(size) < sizeof small) {
        return std::string(small, static_cast<size_t>(size));
    }
    std::string out(static_cast<size_t>(size) + 1, '\0');
    va_start(args, fmt);
    std::vsnprintf(out.data(), out.size(), fmt, args);
    va_end(args);
    out.resize(static_cast<size_t>(size));
    return out;
}

} // namespace gpuinit
