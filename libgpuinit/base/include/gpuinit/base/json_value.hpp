// A JSON document as a tree, for editing OCI runtime specs (gpu-limit's
// container tools; never reached from libgpulimit.so). The parser is strict,
// because its input comes from whoever writes the container's config: RFC
// 8259 only, valid UTF-8 only (no lone surrogates, escaped or raw), no
// duplicate keys, and limits on size and depth. Objects keep their members
// in document order and numbers keep their text, so that serializing what
// was parsed changes nothing but whitespace.
#pragma once

#include "gpuinit/base/result.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

struct JsonMember;

class JsonValue {
  public:
    enum class Kind { Null, Bool, Number, String, Array, Object };

    // Out of line: JsonMember is complete only below, and a value's
    // destructor needs it (clang insists; GCC is lenient).
    static JsonValue make_null();
    static JsonValue make_bool(bool flag);
    static JsonValue make_string(std::string text);
    static JsonValue make_array();
    static JsonValue make_object();

    Kind kind() const { return kind_; }
    bool is_string() const { return kind_ == Kind::String; }
    bool is_array() const { return kind_ == Kind::Array; }
    bool is_object() const { return kind_ == Kind::Object; }

    bool boolean() const { return boolean_; }
    // A string's decoded text, or a number's text as written.
    const std::string& text() const { return text_; }
    std::vector<JsonValue>& items() { return items_; }
    const std::vector<JsonValue>& items() const { return items_; }
    std::vector<JsonMember>& members() { return members_; }
    const std::vector<JsonMember>& members() const { return members_; }

    // An object's member by key, or null.
    const JsonValue* find(std::string_view key) const;
    JsonValue* find(std::string_view key);
    // An object's member by key, appended (null) when missing.
    JsonValue& member(std::string_view key);

  private:
    friend class JsonParser;
    explicit JsonValue(Kind kind); // out of line, as make_null

    Kind kind_ = Kind::Null;
    bool boolean_ = false;
    std::string text_;
    std::vector<JsonValue> items_;
    std::vector<JsonMember> members_;
};

struct JsonMember {
    std::string key;
    JsonValue value;
};

struct JsonLimits {
    size_t max_bytes = 8u << 20; // an OCI config is kilobytes; 8 MiB is generous
    int max_depth = 64;          // a spec nests about 6 deep (seccomp arguments)
};

// The whole text must be one value (whitespace around it allowed, no BOM).
// A failure names the byte offset and what was wrong.
Result<JsonValue> parse_json(std::string_view text, const JsonLimits& limits = {});

// Compact JSON (no whitespace), members in order, strings escaped by
// append_json_string (json.hpp), as JsonWriter writes them.
std::string serialize_json(const JsonValue& value);

} // namespace gpuinit
