// A minimal streaming JSON writer for --json output (no iostream). Strings
// are written as valid UTF-8: a byte that is not becomes U+FFFD.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gpuinit {

// Appends `text` as a JSON string, quotes included: valid UTF-8 (a byte that
// is not becomes U+FFFD), the quote and backslash escaped, and every control
// character (C0, DEL and C1: terminals act on them) as \n, \t or \u00XX.
// The one string escaper of JsonWriter and serialize_json (json_value.hpp).
void append_json_string(std::string& out, std::string_view text);

class JsonWriter {
  public:
    JsonWriter& begin_object();
    JsonWriter& end_object();
    JsonWriter& begin_array();
    JsonWriter& end_array();
    JsonWriter& key(std::string_view name);
    JsonWriter& value(std::string_view text);
    JsonWriter& value(const char* text) { return value(std::string_view(text)); }
    JsonWriter& value(uint64_t number);
    JsonWriter& value(int number);
    JsonWriter& value(unsigned number) { return value(static_cast<uint64_t>(number)); }
    JsonWriter& value(bool flag);
    JsonWriter& null();

    const std::string& str() const { return out_; }

  private:
    void separate();
    std::string out_;
    bool need_comma_ = false;
};

} // namespace gpuinit
