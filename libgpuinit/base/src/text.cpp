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

// Length of the well-formed UTF-8 sequence at the start of `text`, or 0.
size_t utf8_sequence(std::string_view text) {
    auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
    unsigned char lead = byte(0);
    if (lead < 0x80) {
        return 1;
    }
    size_t length = 0;
    unsigned char low = 0x80;
    unsigned char high = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
        length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
        length = 3;
        low = lead == 0xe0 ? 0xa0 : 0x80;  // no overlong forms
        high = lead == 0xed ? 0x9f : 0xbf; // no surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
        length = 4;
        low = lead == 0xf0 ? 0x90 : 0x80;  // no overlong forms
        high = lead == 0xf4 ? 0x8f : 0xbf; // nothing above U+10FFFF
    } else {
        return 0;
    }
    if (text.size() < length || byte(1) < low || byte(1) > high) {
        return 0;
    }
    for (size_t i = 2; i < length; ++i) {
        if (byte(i) < 0x80 || byte(i) > 0xbf) {
            return 0;
        }
    }
    return length;
}

void append_hex_escape(std::string& out, unsigned char c) {
    static constexpr char kDigits[] = "0123456789abcdef";
    out += "\\x";
    out += kDigits[c >> 4];
    out += kDigits[c & 0xf];
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

std::vector<std::string_view> split_fields(std::string_view text, char separator) {
    std::vector<std::string_view> fields;
    while (true) {
        size_t end = text.find(separator);
        fields.push_back(text.substr(0, end));
        if (end == std::string_view::npos) {
            return fields;
        }
        text.remove_prefix(end + 1);
    }
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

std::vector<WordLine> word_lines(std::string_view text) {
    std::vector<WordLine> lines;
    size_t number = 0;
    for (std::string_view raw : split_lines(text)) {
        ++number;
        std::vector<std::string_view> words = split_words(raw.substr(0, raw.find('#')));
        if (!words.empty()) {
            lines.push_back({number, std::move(words)});
        }
    }
    return lines;
}

std::optional<uint64_t> parse_decimal(std::string_view text, uint64_t max) {
    return parse_in_base(text, 10, max);
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

std::string printable(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    while (!text.empty()) {
        auto c = static_cast<unsigned char>(text.front());
        size_t length = utf8_sequence(text);
        // U+0080..U+009F (C2 80..C2 9F) are the C1 controls: CSI is one.
        bool c1 = length == 2 && c == 0xc2 && static_cast<unsigned char>(text[1]) <= 0x9f;
        if (length > 1 && !c1) {
            out.append(text.substr(0, length));
            text.remove_prefix(length);
            continue;
        }
        if (c1) {
            append_hex_escape(out, c);
            c = static_cast<unsigned char>(text[1]);
            text.remove_prefix(1);
            append_hex_escape(out, c);
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c < 0x20 || c >= 0x7f) {
            append_hex_escape(out, c);
        } else {
            out += static_cast<char>(c);
        }
        text.remove_prefix(1);
    }
    return out;
}

std::string shorten(std::string_view value, size_t max_bytes) {
    if (value.size() <= max_bytes) {
        return printable(value);
    }
    // Cut on a character boundary, so the cut itself adds no \x escapes.
    size_t cut = max_bytes;
    while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xc0) == 0x80) {
        --cut;
    }
    return printable(value.substr(0, cut)) + format("... (%zu bytes)", value.size());
}

std::string quote(std::string_view value, size_t max_bytes) {
    if (value.size() <= max_bytes) {
        return "'" + printable(value) + "'";
    }
    std::string cut = shorten(value, max_bytes);
    size_t dots = cut.rfind("... (");
    return "'" + cut.substr(0, dots) + "'" + cut.substr(dots);
}

std::string valid_utf8(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    while (!text.empty()) {
        size_t length = utf8_sequence(text);
        if (length == 0) {
            out += "\xef\xbf\xbd"; // U+FFFD
            length = 1;
        } else {
            out.append(text.substr(0, length));
        }
        text.remove_prefix(length);
    }
    return out;
}

} // namespace gpuinit
