#include "gpuinit/base/text.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

TEST(Text, NumbersAreStrictAndRangeChecked) {
    EXPECT_EQ(parse_decimal("438"), 438u);
    EXPECT_FALSE(parse_decimal(""));
    EXPECT_FALSE(parse_decimal("12a"));
    EXPECT_FALSE(parse_decimal("-1"));
    EXPECT_FALSE(parse_decimal("256", 255));
    EXPECT_FALSE(parse_decimal("99999999999999999999999"));
    EXPECT_EQ(parse_hex_digits("10de"), 0x10deu);
    EXPECT_FALSE(parse_hex_digits("0x10de"));
    EXPECT_EQ(parse_octal("0660"), 0660u);
    EXPECT_FALSE(parse_octal("0680"));
    EXPECT_EQ(format_mode(0660), "0660");
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

// Text from files reaches terminals and logs only escaped: an ESC or BEL
// there would drive the terminal, a CSI (U+009B) too, and a NUL would cut
// the message short if it went through %s.
TEST(Text, PrintableEscapesControlsAndBadBytesButKeepsUtf8) {
    EXPECT_EQ(printable("plain text: 0660"), "plain text: 0660");
    EXPECT_EQ(printable("a\x1b[31mred\x07"), "a\\x1b[31mred\\x07");
    EXPECT_EQ(printable(std::string("nul\0after", 9)), "nul\\x00after");
    EXPECT_EQ(printable("tab\tnl\ncr\r"), "tab\\tnl\\ncr\\r");
    EXPECT_EQ(printable("\xc2\x9b"
                        "2J"),
              "\\xc2\\x9b2J"); // C1 CSI
    EXPECT_EQ(printable("gr\xffp"), "gr\\xffp");
    EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");
    EXPECT_EQ(printable("\x7f"), "\\x7f");
}

TEST(Text, QuoteShortensHugeValues) {
    EXPECT_EQ(quote("abc"), "'abc'");
    std::string huge(100000, 'x');
    std::string quoted = quote(huge);
    EXPECT_LT(quoted.size(), 100u) << quoted;
    EXPECT_NE(quoted.find("(100000 bytes)"), std::string::npos) << quoted;
    // Cut on a character boundary: no half character escaped.
    std::string euros;
    for (int i = 0; i < 30; ++i) {
        euros += "\xe2\x82\xac";
    }
    EXPECT_EQ(quote(euros, 64).find("\\x"), std::string::npos) << quote(euros, 64);
    EXPECT_EQ(shorten("short"), "short");
}

TEST(Text, ValidUtf8ReplacesEveryBadSequence) {
    EXPECT_EQ(valid_utf8("ok \xc3\xa9"), "ok \xc3\xa9");
    EXPECT_EQ(valid_utf8("gr\xffp"), "gr\xef\xbf\xbdp");
    EXPECT_EQ(valid_utf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");                 // overlong '/'
    EXPECT_EQ(valid_utf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"); // surrogate
    EXPECT_EQ(valid_utf8("\xf4\x90\x80\x80").substr(0, 3), "\xef\xbf\xbd");        // > U+10FFFF
    EXPECT_EQ(valid_utf8("\xe2\x82"), "\xef\xbf\xbd\xef\xbf\xbd");                 // cut short
    EXPECT_EQ(valid_utf8("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");
}

} // namespace gpuinit

namespace gpuinit {

TEST(Text, SplitFieldsKeepsEmptyFields) {
    EXPECT_EQ(split_fields("a,,b", ','), (std::vector<std::string_view>{"a", "", "b"}));
    EXPECT_EQ(split_fields("", ','), (std::vector<std::string_view>{""}));
    EXPECT_EQ(split_fields("gpu1/gi7/ci0", '/'),
              (std::vector<std::string_view>{"gpu1", "gi7", "ci0"}));
    EXPECT_EQ(split_fields("x/", '/'), (std::vector<std::string_view>{"x", ""}));
}

} // namespace gpuinit
