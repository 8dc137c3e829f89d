#include "gpuinit/base/json.hpp"

#include "gpuinit/base/text.hpp"

namespace gpuinit {

void JsonWriter::separate() {
    if (need_comma_) {
        out_ += ',';
    }
    need_comma_ = true;
}

JsonWriter& JsonWriter::begin_object() {
    separate();
    out_ += '{';
    need_comma_ = false;
    return *this;
}

JsonWriter& JsonWriter::end_object() {
    out_ += '}';
    need_comma_ = true;
    return *this;
}

JsonWriter& JsonWriter::begin_array() {
    separate();
    out_ += '[';
    need_comma_ = false;
    return *this;
}

JsonWriter& JsonWriter::end_array() {
    out_ += ']';
    need_comma_ = true;
    return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
    value(name);
    out_ += ':';
    need_comma_ = false;
    return *this;
}

void append_json_string(std::string& out, std::string_view text) {
    out += '"';
    // Text from files may hold any byte; JSON must be UTF-8, and control
    // characters (C1 too: terminals act on them) are escaped.
    std::string valid = valid_utf8(text);
    for (size_t i = 0; i < valid.size(); ++i) {
        auto c = static_cast<unsigned char>(valid[i]);
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (c < 0x20 || c == 0x7f) {
                out += format("\\u%04x", c);
            } else if (c == 0xc2 && i + 1 < valid.size() &&
                       static_cast<unsigned char>(valid[i + 1]) <= 0x9f) {
                out += format("\\u%04x", static_cast<unsigned char>(valid[++i]));
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    out += '"';
}

JsonWriter& JsonWriter::value(std::string_view text) {
    separate();
    append_json_string(out_, text);
    return *this;
}

JsonWriter& JsonWriter::value(uint64_t number) {
    separate();
    out_ += std::to_string(number);
    return *this;
}

JsonWriter& JsonWriter::value(int number) {
    separate();
    out_ += std::to_string(number);
    return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
    separate();
    out_ += flag ? "true" : "false";
    return *this;
}

JsonWriter& JsonWriter::null() {
    separate();
    out_ += "null";
    return *this;
}

} // namespace gpuinit
