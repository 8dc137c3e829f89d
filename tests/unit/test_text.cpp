#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/host/pci.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

TEST(Text, NumbersAreStrictAndRangeChecked) {
    EXPECT_EQ(parse_decimal("438"), 438u);
    EXPECT_FALSE(parse_decimal(""));
    EXPECT_FALSE(parse_decimal("12a"));
    EXPECT_FALSE(parse_decimal("-1"));
    EXPECT_FALSE(parse_decimal("256", 255));
    EXPECT_FALSE(parse_decimal("99999999999999999999999"));
    EXPECT_EQ(parse_hex("0x10de"), 0x10deu);
    EXPECT_EQ(parse_octal("0660"), 0660u);
    EXPECT_FALSE(parse_octal("0680"));
    EXPECT_EQ(format_mode(0660), "0660");
}

TEST(Text, PciAddressesNormalize) {
    EXPECT_EQ(normalize_bdf("17:00.0"), "0000:17:00.0");
    EXPECT_EQ(normalize_bdf("0000:3B:00.0"), "0000:3b:00.0");
    EXPECT_EQ(normalize_bdf("10000:00:01.0"), "10000:00:01.0");
    EXPECT_FALSE(normalize_bdf("17:00"));
    EXPECT_FALSE(normalize_bdf("0000:17:20.0")); // device > 0x1f
    EXPECT_FALSE(normalize_bdf("0000:17:00.8"));
    EXPECT_FALSE(normalize_bdf("../../etc"));
}

TEST(Text, FormatShortAndLongerThanItsBuffer) {
    EXPECT_EQ(format("c %u:%u %s", 195u, 255u, "root"), "c 195:255 root");
    EXPECT_EQ(format("%s", ""), "");
    std::string path(300, 'x');
    std::string formatted = format("cannot stat %s: %s", path.c_str(), "No such file");
    EXPECT_EQ(formatted, "cannot stat " + path + ": No such file");
    std::string exact(255, 'y'); // fills the first buffer but its terminator
    EXPECT_EQ(format("%s", exact.c_str()), exact);
    EXPECT_EQ(format("%s", (exact + "z").c_str()), exact + "z");
}

TEST(Text, JsonEscapes) {
    JsonWriter json;
    json.begin_object().key("a\"b").value("x\ny\x01").key("n").value(3u).end_object();
    EXPECT_EQ(json.str(), "{\"a\\\"b\":\"x\\ny\\u0001\",\"n\":3}");
}

} // namespace gpuinit
