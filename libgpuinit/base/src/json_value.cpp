// Uses the standard library and the heap: libgpulimit.so must never reach
// it (tests/limiter/abi checks its imports).
#include "gpuinit/base/json_value.hpp"

#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"

#include <cstdint>
#include <set>

namespace gpuinit {

JsonValue::JsonValue(Kind kind) : kind_(kind) {}

JsonValue JsonValue::make_null() {
    return JsonValue(Kind::Null);
}
JsonValue JsonValue::make_array() {
    return JsonValue(Kind::Array);
}
JsonValue JsonValue::make_object() {
    return JsonValue(Kind::Object);
}

JsonValue JsonValue::make_bool(bool flag) {
    JsonValue value(Kind::Bool);
    value.boolean_ = flag;
    return value;
}

JsonValue JsonValue::make_string(std::string text) {
    JsonValue value(Kind::String);
    value.text_ = std::move(text);
    return value;
}

const JsonValue* JsonValue::find(std::string_view key) const {
    for (const JsonMember& entry : members_) {
        if (entry.key == key) {
            return &entry.value;
        }
    }
    return nullptr;
}

JsonValue* JsonValue::find(std::string_view key) {
    for (JsonMember& entry : members_) {
        if (entry.key == key) {
            return &entry.value;
        }
    }
    return nullptr;
}

JsonValue& JsonValue::member(std::string_view key) {
    if (JsonValue* found = find(key)) {
        return *found;
    }
    members_.push_back(JsonMember{std::string(key), make_null()});
    return members_.back().value;
}

// Recursive descent over the text; every failure is a Diagnostic with the
// offset, never an exception or a partial value.
class JsonParser {
  public:
    JsonParser(std::string_view text, const JsonLimits& limits) : text_(text), limits_(limits) {}

    Result<JsonValue> document() {
        if (text_.size() > limits_.max_bytes) {
            return error(format("the JSON document is %zu bytes, more than the %zu allowed",
                                text_.size(), limits_.max_bytes));
        }
        skip_space();
        JsonValue value = JsonValue::make_null();
        if (!parse_value(value, 0)) {
            return error(message_);
        }
        skip_space();
        if (pos_ != text_.size()) {
            return error(format("unexpected text after the JSON value at byte %zu", pos_));
        }
        return value;
    }

  private:
    bool fail(const char* what) {
        if (message_.empty()) {
            message_ = format("invalid JSON at byte %zu: %s", pos_, what);
        }
        return false;
    }

    void skip_space() {
        while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                       text_[pos_] == '\n' || text_[pos_] == '\r')) {
            ++pos_;
        }
    }

    bool literal(std::string_view word) {
        if (text_.substr(pos_, word.size()) != word) {
            return fail("not a JSON value");
        }
        pos_ += word.size();
        return true;
    }

    bool parse_value(JsonValue& out, int depth) {
        if (pos_ >= text_.size()) {
            return fail("the document ends where a value should be");
        }
        char c = text_[pos_];
        switch (c) {
        case '{':
            return parse_object(out, depth + 1);
        case '[':
            return parse_array(out, depth + 1);
        case '"':
            out = JsonValue::make_string({});
            return parse_string(out.text_);
        case 't':
            out = JsonValue::make_bool(true);
            return literal("true");
        case 'f':
            out = JsonValue::make_bool(false);
            return literal("false");
        case 'n':
            out = JsonValue::make_null();
            return literal("null");
        default:
            if (c == '-' || (c >= '0' && c <= '9')) {
                return parse_number(out);
            }
            return fail("not a JSON value");
        }
    }

    bool parse_object(JsonValue& out, int depth) {
        if (depth > limits_.max_depth) {
            return fail("nested deeper than allowed");
        }
        out = JsonValue::make_object();
        ++pos_; // '{'
        skip_space();
        if (pos_ < text_.size() && text_[pos_] == '}') {
            ++pos_;
            return true;
        }
        // A set, not a scan of the members: a hostile object of a million
        // keys must not cost a million squared comparisons.
        std::set<std::string, std::less<>> keys;
        while (true) {
            if (pos_ >= text_.size() || text_[pos_] != '"') {
                return fail("expected a string key");
            }
            std::string key;
            size_t key_at = pos_;
            if (!parse_string(key)) {
                return false;
            }
            // Two readers of a spec with a duplicate key may each take a
            // different one (Go takes the last): refuse rather than guess.
            if (!keys.insert(key).second) {
                pos_ = key_at;
                return fail(("duplicate key " + quote(key)).c_str());
            }
            skip_space();
            if (pos_ >= text_.size() || text_[pos_] != ':') {
                return fail("expected ':'");
            }
            ++pos_;
            skip_space();
            out.members_.push_back(JsonMember{std::move(key), JsonValue::make_null()});
            if (!parse_value(out.members_.back().value, depth)) {
                return false;
            }
            skip_space();
            if (pos_ < text_.size() && text_[pos_] == ',') {
                ++pos_;
                skip_space();
                continue;
            }
            if (pos_ < text_.size() && text_[pos_] == '}') {
                ++pos_;
                return true;
            }
            return fail("expected ',' or '}'");
        }
    }

    bool parse_array(JsonValue& out, int depth) {
        if (depth > limits_.max_depth) {
            return fail("nested deeper than allowed");
        }
        out = JsonValue::make_array();
        ++pos_; // '['
        skip_space();
        if (pos_ < text_.size() && text_[pos_] == ']') {
            ++pos_;
            return true;
        }
        while (true) {
            out.items_.push_back(JsonValue::make_null());
            if (!parse_value(out.items_.back(), depth)) {
                return false;
            }
            skip_space();
            if (pos_ < text_.size() && text_[pos_] == ',') {
                ++pos_;
                skip_space();
                continue;
            }
            if (pos_ < text_.size() && text_[pos_] == ']') {
                ++pos_;
                return true;
            }
            return fail("expected ',' or ']'");
        }
    }

    // RFC 8259's number grammar; the text is kept as written.
    bool parse_number(JsonValue& out) {
        size_t start = pos_;
        auto digit = [&] {
            return pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9';
        };
        if (text_[pos_] == '-') {
            ++pos_;
        }
        if (!digit()) {
            return fail("a number needs a digit");
        }
        if (text_[pos_] == '0') {
            ++pos_;
            if (digit()) {
                return fail("a number with a leading zero");
            }
        } else {
            while (digit()) {
                ++pos_;
            }
        }
        if (pos_ < text_.size() && text_[pos_] == '.') {
            ++pos_;
            if (!digit()) {
                return fail("a fraction needs a digit");
            }
            while (digit()) {
                ++pos_;
            }
        }
        if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
            ++pos_;
            if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) {
                ++pos_;
            }
            if (!digit()) {
                return fail("an exponent needs a digit");
            }
            while (digit()) {
                ++pos_;
            }
        }
        out = JsonValue(JsonValue::Kind::Number);
        out.text_.assign(text_.substr(start, pos_ - start));
        return true;
    }

    bool hex4(uint32_t& unit) {
        if (pos_ + 4 > text_.size()) {
            return fail("a \\u escape needs four hex digits");
        }
        unit = 0;
        for (int i = 0; i < 4; ++i) {
            char c = text_[pos_++];
            uint32_t nibble = 0;
            if (c >= '0' && c <= '9') {
                nibble = static_cast<uint32_t>(c - '0');
            } else if (c >= 'a' && c <= 'f') {
                nibble = static_cast<uint32_t>(c - 'a' + 10);
            } else if (c >= 'A' && c <= 'F') {
                nibble = static_cast<uint32_t>(c - 'A' + 10);
            } else {
                return fail("a \\u escape needs four hex digits");
            }
            unit = unit << 4 | nibble;
        }
        return true;
    }

    static void append_utf8(std::string& out, uint32_t code) {
        if (code < 0x80) {
            out += static_cast<char>(code);
        } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | code >> 6);
            out += static_cast<char>(0x80 | (code & 0x3F));
        } else if (code < 0x10000) {
            out += static_cast<char>(0xE0 | code >> 12);
            out += static_cast<char>(0x80 | (code >> 6 & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | code >> 18);
            out += static_cast<char>(0x80 | (code >> 12 & 0x3F));
            out += static_cast<char>(0x80 | (code >> 6 & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
        }
    }

    // One raw UTF-8 sequence starting at pos_ (a byte >= 0x80): the shortest
    // form only, no surrogates, nothing above U+10FFFF.
    bool utf8_sequence(std::string& out) {
        auto byte = [&](size_t at) { return static_cast<uint8_t>(text_[at]); };
        uint8_t lead = byte(pos_);
        size_t length = 0;
        uint32_t code = 0;
        uint32_t minimum = 0;
        if (lead >= 0xC2 && lead <= 0xDF) {
            length = 2, code = lead & 0x1Fu, minimum = 0x80;
        } else if (lead >= 0xE0 && lead <= 0xEF) {
            length = 3, code = lead & 0x0Fu, minimum = 0x800;
        } else if (lead >= 0xF0 && lead <= 0xF4) {
            length = 4, code = lead & 0x07u, minimum = 0x10000;
        } else {
            return fail("not UTF-8");
        }
        if (pos_ + length > text_.size()) {
            return fail("a UTF-8 sequence is cut short");
        }
        for (size_t i = 1; i < length; ++i) {
            uint8_t next = byte(pos_ + i);
            if ((next & 0xC0) != 0x80) {
                return fail("not UTF-8");
            }
            code = code << 6 | (next & 0x3Fu);
        }
        if (code < minimum || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
            return fail("not UTF-8 (an overlong form, a surrogate or beyond U+10FFFF)");
        }
        out.append(text_.substr(pos_, length));
        pos_ += length;
        return true;
    }

    bool parse_string(std::string& out) {
        ++pos_; // '"'
        while (true) {
            if (pos_ >= text_.size()) {
                return fail("a string is not closed");
            }
            auto c = static_cast<uint8_t>(text_[pos_]);
            if (c == '"') {
                ++pos_;
                return true;
            }
            if (c < 0x20) {
                return fail("a control character in a string (it must be escaped)");
            }
            if (c >= 0x80) {
                if (!utf8_sequence(out)) {
                    return false;
                }
                continue;
            }
            if (c != '\\') {
                out += static_cast<char>(c);
                ++pos_;
                continue;
            }
            ++pos_;
            if (pos_ >= text_.size()) {
                return fail("a string is not closed");
            }
            char escape = text_[pos_++];
            switch (escape) {
            case '"':
                out += '"';
                break;
            case '\\':
                out += '\\';
                break;
            case '/':
                out += '/';
                break;
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case 'u': {
                uint32_t unit = 0;
                if (!hex4(unit)) {
                    return false;
                }
                if (unit >= 0xDC00 && unit <= 0xDFFF) {
                    return fail("a lone low surrogate escape");
                }
                if (unit >= 0xD800 && unit <= 0xDBFF) {
                    uint32_t low = 0;
                    if (text_.substr(pos_, 2) != "\\u") {
                        return fail("a high surrogate escape without its low half");
                    }
                    pos_ += 2;
                    if (!hex4(low)) {
                        return false;
                    }
                    if (low < 0xDC00 || low > 0xDFFF) {
                        return fail("a high surrogate escape without its low half");
                    }
                    unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                }
                append_utf8(out, unit);
                break;
            }
            default:
                return fail("an unknown escape in a string");
            }
        }
    }

    std::string_view text_;
    const JsonLimits& limits_;
    size_t pos_ = 0;
    std::string message_;
};

Result<JsonValue> parse_json(std::string_view text, const JsonLimits& limits) {
    return JsonParser(text, limits).document();
}

namespace {

void write_value(std::string& out, const JsonValue& value) {
    switch (value.kind()) {
    case JsonValue::Kind::Null:
        out += "null";
        break;
    case JsonValue::Kind::Bool:
        out += value.boolean() ? "true" : "false";
        break;
    case JsonValue::Kind::Number:
        out += value.text();
        break;
    case JsonValue::Kind::String:
        append_json_string(out, value.text());
        break;
    case JsonValue::Kind::Array: {
        out += '[';
        bool first = true;
        for (const JsonValue& item : value.items()) {
            if (!first) {
                out += ',';
            }
            first = false;
            write_value(out, item);
        }
        out += ']';
        break;
    }
    case JsonValue::Kind::Object: {
        out += '{';
        bool first = true;
        for (const JsonMember& entry : value.members()) {
            if (!first) {
                out += ',';
            }
            first = false;
            append_json_string(out, entry.key);
            out += ':';
            write_value(out, entry.value);
        }
        out += '}';
        break;
    }
    }
}

} // namespace

std::string serialize_json(const JsonValue& value) {
    std::string out;
    write_value(out, value);
    return out;
}

} // namespace gpuinit
