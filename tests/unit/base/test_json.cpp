#include "gpuinit/base/json.hpp"
#include "json_check.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

TEST(Json, Escapes) {
    JsonWriter json;
    json.begin_object().key("a\"b").value("x\ny\x01").key("n").value(3u).end_object();
    EXPECT_EQ(json.str(), "{\"a\\\"b\":\"x\\ny\\u0001\",\"n\":3}");
}

// --json must be JSON whatever a file held: a policy line with a byte that
// is not UTF-8 once gave output no parser accepted.
TEST(Json, AnyBytesGiveValidJson) {
    JsonWriter json;
    json.begin_array();
    json.value("gr\xffp");
    json.value(std::string("nul\0byte", 8));
    json.value("\xc2\x9b"
               "csi \x1b esc");
    json.value("\xed\xa0\x80 \xc0\xaf \xf8");
    json.end_array();
    std::string why;
    EXPECT_TRUE(testing::valid_json(json.str(), &why)) << why << "\n" << json.str();
    EXPECT_NE(json.str().find("gr\xef\xbf\xbdp"), std::string::npos);
    EXPECT_NE(json.str().find("\\u009b"), std::string::npos);
    EXPECT_NE(json.str().find("nul\\u0000byte"), std::string::npos);
}

TEST(Json, TheCheckerRejectsWhatIsNotJson) {
    for (const char* bad :
         {"{", "[1,]", "{\"a\" 1}", "\"\xff\"", "\"\\x41\"", "[1] 2", "\"a\nb\""}) {
        EXPECT_FALSE(testing::valid_json(bad)) << bad;
    }
    EXPECT_TRUE(testing::valid_json("{\"a\":[1,-2.5e3,true,null,\"\\u00e9\"]}"));
}

} // namespace gpuinit
