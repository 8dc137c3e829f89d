// The text helpers every report goes through, and JsonWriter: whatever the
// bytes, printable()/quote()/shorten() give one safe line, valid_utf8() is
// a fixed point, the number parsers are exact, and JSON is valid JSON.
#include "fuzz_check.hpp"
#include "gpuinit/base/json.hpp"
#include "json_check.hpp"

#include <string>

namespace {

using namespace gpuinit;
using namespace gpuinit::fuzz;

void check_text(std::string_view text) {
    std::string shown = printable(text);
    FUZZ_CHECK(one_safe_line(shown));
    FUZZ_CHECK(printable(shown) == shown);
    // ASCII that needs no escape is kept as it is.
    bool plain = true;
    for (unsigned char c : text) {
        plain = plain && c >= 0x20 && c < 0x7f;
    }
    FUZZ_CHECK(!plain || shown == text);

    std::string valid = valid_utf8(text);
    FUZZ_CHECK(valid_utf8(valid) == valid);
    FUZZ_CHECK(valid.size() >= text.size() && valid.size() <= 3 * text.size());
    // Each bad byte grows into U+FFFD (3 bytes): same size means unchanged.
    FUZZ_CHECK((valid.size() == text.size()) == (valid == text));

    for (size_t max : {size_t{0}, size_t{1}, size_t{5}, size_t{64}, text.size()}) {
        std::string cut = shorten(text, max);
        FUZZ_CHECK(one_safe_line(cut));
        FUZZ_CHECK(text.size() > max || cut == shown);
        std::string quoted = quote(text, max);
        FUZZ_CHECK(one_safe_line(quoted));
        FUZZ_CHECK(quoted.size() >= 2 && quoted.front() == '\'');
        FUZZ_CHECK(text.size() > max || quoted == "'" + shown + "'");
    }
    FUZZ_CHECK(one_safe_line(format("%s", shown.c_str())));

    std::string_view trimmed = trim(text);
    FUZZ_CHECK(trim(trimmed) == trimmed);
    size_t line_bytes = 0;
    for (std::string_view line : split_lines(text)) {
        FUZZ_CHECK(line.find('\n') == std::string_view::npos);
        line_bytes += line.size() + 1;
    }
    FUZZ_CHECK(line_bytes >= text.size() && line_bytes <= text.size() + 1);
    for (std::string_view word : split_words(text)) {
        FUZZ_CHECK(!word.empty() && trim(word) == word);
        FUZZ_CHECK(word.find_first_of(" \t\r\n\v") == std::string_view::npos);
    }

    // Strict numbers: what parses is in range and prints back the same,
    // leading zeros aside.
    for (uint64_t max : {uint64_t{0777}, uint64_t{4095}, uint64_t{0xffffffff}, UINT64_MAX}) {
        if (auto n = parse_decimal(text, max)) {
            FUZZ_CHECK(*n <= max);
            FUZZ_CHECK(parse_decimal(std::to_string(*n), max) == n);
            FUZZ_CHECK(text.find_first_not_of("0123456789") == std::string_view::npos);
        }
        if (auto n = parse_hex_digits(text, max)) {
            FUZZ_CHECK(*n <= max);
            FUZZ_CHECK(parse_hex_digits(format("%llx", static_cast<unsigned long long>(*n)), max) ==
                       n);
        }
        if (auto n = parse_octal(text, max)) {
            FUZZ_CHECK(*n <= max);
            FUZZ_CHECK(parse_octal(format("%llo", static_cast<unsigned long long>(*n)), max) == n);
            FUZZ_CHECK(text.find_first_not_of("01234567") == std::string_view::npos);
        }
    }
}

// A JSON document whose shape and strings come from the input: NUL bytes
// cut it into strings; the first byte of each picks what the string
// becomes (a key and value, an array of it, a nested object, a number).
std::string json_of(std::string_view text) {
    JsonWriter json;
    json.begin_object();
    json.key("input").value(text);
    json.key("parts").begin_array();
    unsigned depth = 0;
    for (std::string_view part : split_at_nul(text)) {
        unsigned char op = part.empty() ? 0 : static_cast<unsigned char>(part.front());
        switch (op % 8) {
        case 0:
            json.value(part);
            break;
        case 1:
            json.begin_object().key(part).value(part).key("").null().end_object();
            break;
        case 2:
            json.begin_array().value(part).value(static_cast<uint64_t>(part.size())).end_array();
            break;
        case 3:
            json.value(static_cast<int>(op) - 200).value(op % 2 == 0).value(UINT64_MAX);
            break;
        case 4:
            if (depth < 32) {
                json.begin_object().key(part).begin_array();
                ++depth;
            }
            break;
        case 5:
            if (depth > 0) {
                json.end_array().end_object();
                --depth;
            }
            break;
        case 6:
            json.begin_object().end_object().begin_array().end_array();
            break;
        default:
            json.value(printable(part)).value(valid_utf8(part)).value(quote(part));
            break;
        }
    }
    for (; depth > 0; --depth) {
        json.end_array().end_object();
    }
    json.end_array();
    json.key(text).value(text);
    json.end_object();
    return json.str();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text = as_text(data, size);
    check_text(text);
    std::string json = json_of(text);
    std::string why;
    if (!gpuinit::testing::valid_json(json, &why)) {
        std::fprintf(stderr, "invalid JSON (%s): %s\n", why.c_str(), printable(json).c_str());
        __builtin_trap();
    }
    FUZZ_CHECK(valid_utf8(json) == json);
    return 0;
}
