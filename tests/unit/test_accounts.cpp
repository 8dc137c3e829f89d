#include "gpuinit/host/accounts.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

TEST(Accounts, ParsesGroupAndPasswdFiles) {
    AccountDb db =
        AccountDb::from_text("root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/h:/bin/sh\n",
                             "root:x:0:\nnvidia0:x:1001:alice\nnvidia0:x:2001:\n");
    EXPECT_EQ(db.group("nvidia0"), 1001u); // the first entry wins, as over files in NSS
    EXPECT_EQ(db.user("alice"), 1000u);
    EXPECT_EQ(db.group("root"), 0u);
    EXPECT_FALSE(db.group("nvidia9"));
    EXPECT_FALSE(db.user("bob"));
    EXPECT_TRUE(db.warnings().empty());
}

TEST(Accounts, HostileLinesAreSkippedAndReported) {
    AccountDb db = AccountDb::from_text("", "ok:x:5:\n"
                                            "noid:x::\n"
                                            "neg:x:-1:\n"
                                            "big:x:4294967295:\n"
                                            "sp ace:x:7:\n"
                                            "short\n");
    EXPECT_EQ(db.group("ok"), 5u);
    EXPECT_FALSE(db.group("noid"));
    EXPECT_FALSE(db.group("neg"));
    EXPECT_FALSE(db.group("big")); // (gid_t)-1 means "unchanged" to chown
    EXPECT_FALSE(db.group("sp ace"));
    ASSERT_EQ(db.warnings().size(), 5u);
    EXPECT_EQ(db.warnings()[0], "group:2: malformed line skipped");
}

TEST(Accounts, NameValidation) {
    EXPECT_TRUE(valid_account_name("nvidia0"));
    EXPECT_FALSE(valid_account_name(""));
    EXPECT_FALSE(valid_account_name("1234"));
    EXPECT_FALSE(valid_account_name("a:b"));
    EXPECT_FALSE(valid_account_name("a\nb"));
}

} // namespace gpuinit
