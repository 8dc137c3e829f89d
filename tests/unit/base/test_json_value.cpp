// The strict JSON parser and its writer (json_value.hpp), whose input is
// whatever a container's creator wrote into config.json.
#include "gpuinit/base/json.hpp"
#include "gpuinit/base/json_value.hpp"

#include <gtest/gtest.h>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

namespace {

JsonValue parse_ok(std::string_view text) {
    auto parsed = parse_json(text);
    EXPECT_TRUE(parsed.ok()) << text << ": " << parsed.error().message;
    return parsed.ok() ? std::move(parsed).value() : JsonValue::make_null();
}

} // namespace

TEST(StrictJson, SerializingWhatWasParsedKeepsOrderAndNumbers) {
    const std::string text =
        R"({"z":1,"a":[true,false,null,-0.5e+10,18446744073709551616,1E400],"m":{"y":"\u00e9\ud83d\ude00","b":"tab\tq\"bs\\"}})";
    JsonValue value = parse_ok(text);
    // Escapes come back in the writer's own spelling; everything else as read.
    EXPECT_EQ(serialize_json(value),
              "{\"z\":1,\"a\":[true,false,null,-0.5e+10,18446744073709551616,1E400],"
              "\"m\":{\"y\":\"\xc3\xa9\xf0\x9f\x98\x80\",\"b\":\"tab\\tq\\\"bs\\\\\"}}");
    ASSERT_EQ(value.members().size(), 3u);
    EXPECT_EQ(value.members()[0].key, "z");
    EXPECT_EQ(value.members()[2].key, "m");
    EXPECT_EQ(serialize_json(parse_ok(serialize_json(value))), serialize_json(value));
}

TEST(StrictJson, ControlCharactersAreEscapedOnOutput) {
    JsonValue value = JsonValue::make_string(std::string("a\x01\x1f\n", 4));
    EXPECT_EQ(serialize_json(value), "\"a\\u0001\\u001f\\n\"");
}

TEST(StrictJson, RefusesWhatRfc8259Refuses) {
    const std::vector<std::string> bad = {
        "",
        "{",
        "{\"a\":1,}",
        "[1,]",
        "{\"a\":1}x",
        "{'a':1}",
        "[01]",
        "[1.]",
        "[.5]",
        "[1e]",
        "[-]",
        "[NaN]",
        "[Infinity]",
        "[tru]",
        "[\"a\nb\"]",  // a raw control character
        "[\"\\x41\"]", // an unknown escape
        "[\"\\u12\"]",
        "\xef\xbb\xbf{}", // a byte order mark
        "{\"a\" 1}",
        "{1:2}",
    };
    for (const std::string& text : bad) {
        EXPECT_FALSE(parse_json(text).ok()) << text;
    }
}

TEST(StrictJson, RefusesDuplicateKeysAtAnyDepth) {
    EXPECT_FALSE(parse_json(R"({"a":1,"a":1})").ok());
    EXPECT_FALSE(parse_json(R"({"x":[{"k":"v","k":"w"}]})").ok());
    // Equal after unescaping is a duplicate too.
    EXPECT_FALSE(parse_json(R"({"ab":1,"a\u0062":2})").ok());
    EXPECT_TRUE(parse_json(R"({"a":{"a":1}})").ok());
}

TEST(StrictJson, RefusesMalformedUtf8AndLoneSurrogates) {
    const std::vector<std::string> bad = {
        "[\"\xc0\x80\"]",         // overlong NUL
        "[\"\xe0\x80\xaf\"]",     // overlong '/'
        "[\"\xed\xa0\x80\"]",     // a surrogate, raw
        "[\"\xf4\x90\x80\x80\"]", // above U+10FFFF
        "[\"\xf5\x80\x80\x80\"]",
        "[\"\x80\"]",     // a continuation byte alone
        "[\"\xc3\"]",     // cut short
        "[\"\xe2\x82\"]", // cut short
        "[\"\\ud800\"]",  // lone high surrogate escape
        "[\"\\udc00\"]",  // lone low surrogate escape
        "[\"\\ud800\\u0041\"]",
    };
    for (const std::string& text : bad) {
        EXPECT_FALSE(parse_json(text).ok()) << text;
    }
    EXPECT_TRUE(parse_json("[\"\xf4\x8f\xbf\xbf \xe2\x82\xac \xc3\xa9\"]").ok());
}

TEST(StrictJson, LimitsDepthAndSize) {
    JsonLimits limits;
    limits.max_depth = 8;
    std::string deep(8, '[');
    deep += std::string(8, ']');
    EXPECT_TRUE(parse_json(deep, limits).ok());
    std::string deeper(9, '[');
    deeper += std::string(9, ']');
    EXPECT_FALSE(parse_json(deeper, limits).ok());
    // The default limit stops a hostile nesting long before the stack does.
    std::string hostile(1000000, '[');
    EXPECT_FALSE(parse_json(hostile).ok());

    limits.max_bytes = 16;
    EXPECT_TRUE(parse_json(R"({"a":"01234567"})", limits).ok()); // 16 bytes
    EXPECT_FALSE(parse_json(R"({"a":"012345678"})", limits).ok());
}

TEST(StrictJson, ManyKeysAreNotQuadratic) {
    std::string text = "{";
    for (int i = 0; i < 200000; ++i) {
        text += (i != 0 ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
    }
    text += "}";
    auto parsed = parse_json(text);
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(parsed->members().size(), 200000u);
}

// --- the spec ---

// One escaper for both writers: a string comes out of serialize_json as
// JsonWriter writes it.
TEST(StrictJson, OneEscaperForBothWriters) {
    for (const std::string& text :
         {std::string("plain"), std::string("q\"b\\n\nt\tr\r"), std::string("\x01\x7f", 2),
          std::string("c1 \xc2\x9b csi"), std::string("bad \xff byte")}) {
        JsonWriter writer;
        writer.value(text);
        EXPECT_EQ(serialize_json(JsonValue::make_string(text)), writer.str()) << text;
        std::string appended;
        append_json_string(appended, text);
        EXPECT_EQ(appended, writer.str());
    }
}

} // namespace gpuinit
