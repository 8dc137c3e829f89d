#include "gpuinit/host/accounts.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit {

using testing::TempDir;

TEST(Accounts, ParsesGroupAndPasswdFiles) {
    Diagnostics diagnostics;
    AccountDb db =
        AccountDb::from_text("root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/h:/bin/sh\n",
                             "root:x:0:\nnvidia0:x:1001:alice\nnvidia0:x:2001:\n", diagnostics);
    EXPECT_EQ(db.group("nvidia0"), 1001u); // the first entry wins, as over files in NSS
    EXPECT_EQ(db.user("alice"), 1000u);
    EXPECT_EQ(db.group("root"), 0u);
    EXPECT_FALSE(db.group("nvidia9"));
    EXPECT_FALSE(db.user("bob"));
    EXPECT_TRUE(diagnostics.empty());
}

TEST(Accounts, HostileLinesAreSkippedAndReported) {
    Diagnostics diagnostics;
    AccountDb db = AccountDb::from_text("",
                                        "ok:x:5:\n"
                                        "noid:x::\n"
                                        "neg:x:-1:\n"
                                        "big:x:4294967295:\n"
                                        "sp ace:x:7:\n"
                                        "short\n",
                                        diagnostics);
    EXPECT_EQ(db.group("ok"), 5u);
    EXPECT_FALSE(db.group("noid"));
    EXPECT_FALSE(db.group("neg"));
    EXPECT_FALSE(db.group("big")); // (gid_t)-1 means "unchanged" to chown
    EXPECT_FALSE(db.group("sp ace"));
    ASSERT_EQ(diagnostics.count(Severity::Warning), 5u);
    EXPECT_EQ(diagnostics.items()[0].text(), "group:2: malformed line skipped");
}

// A big site's /etc/group (over the 4 MiB it once took, silently ignored:
// every GPU node became root:root 0600 with advice to groupadd groups that
// existed) is streamed, and a file that cannot be read is an error.
TEST(Accounts, BigFilesAreReadAndUnreadableOnesAreErrors) {
    TempDir dir;
    ASSERT_EQ(::mkdir((dir / "etc").c_str(), 0755), 0);
    std::string group = "root:x:0:\n";
    std::string members(200, 'u');
    for (int i = 0; i < 60000; ++i) {
        group +=
            "team" + std::to_string(i) + ":x:" + std::to_string(10000 + i) + ":" + members + "\n";
    }
    group += "nvidia0:x:1000:\n";
    ASSERT_GT(group.size(), 8u << 20);
    int fd = ::open((dir / "etc/group").c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_EQ(::write(fd, group.data(), group.size()), static_cast<ssize_t>(group.size()));
    ::close(fd);
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    Diagnostics diagnostics;
    auto db = AccountDb::load(*root, diagnostics);
    ASSERT_TRUE(db) << db.error().text();
    EXPECT_EQ(db->group("nvidia0"), 1000u);
    EXPECT_EQ(db->group("team59999"), 69999u);

    ASSERT_EQ(::unlink((dir / "etc/group").c_str()), 0);
    ASSERT_EQ(::mkfifo((dir / "etc/group").c_str(), 0644), 0);
    auto fifo = AccountDb::load(*root, diagnostics);
    ASSERT_FALSE(fifo);
    EXPECT_NE(fifo.error().text().find(dir / "etc/group"), std::string::npos);
}

TEST(Accounts, NameValidation) {
    EXPECT_TRUE(valid_account_name("nvidia0"));
    EXPECT_FALSE(valid_account_name(""));
    EXPECT_FALSE(valid_account_name("1234"));
    EXPECT_FALSE(valid_account_name("a:b"));
    EXPECT_FALSE(valid_account_name("a\nb"));
}

// A group from a directory service (LDAP, SSSD) that the files do not hold
// can be named by its gid: an all-digit name is the number itself, and is
// never looked up.
TEST(Accounts, AnAllDigitNameIsTheIdItself) {
    Diagnostics diagnostics;
    AccountDb db =
        AccountDb::from_text("root:x:0:0::/root:/bin/sh\n", "video:x:44:\n", diagnostics);
    EXPECT_EQ(db.group("4242"), std::optional<gid_t>(4242));
    EXPECT_EQ(db.group("0"), std::optional<gid_t>(0));
    EXPECT_EQ(db.user("1500"), std::optional<uid_t>(1500));
    EXPECT_EQ(db.group("4294967294"), std::optional<gid_t>(4294967294u));
    // (gid_t)-1 means "leave it" to chown; a leading zero reads as octal elsewhere.
    EXPECT_EQ(db.group("4294967295"), std::nullopt);
    EXPECT_EQ(db.group("044"), std::nullopt);
    EXPECT_EQ(account_number("12a"), std::nullopt);
    EXPECT_EQ(account_number(""), std::nullopt);
    EXPECT_EQ(db.group("video"), std::optional<gid_t>(44));
}

// The static build's way to names only NSS serves: getent, trusted only
// when root's alone, its one line parsed, never waited on without bound.
TEST(Accounts, GetentIsAskedOnlyWhenTrustedAndAnswersOneId) {
    std::string getent(kGetentPath);
    if (::access(getent.c_str(), X_OK) != 0) {
        GTEST_SKIP() << "SKIPPED LOUDLY: no " << getent << " (libc-bin)";
    }
    EXPECT_EQ(getent_id(getent, "group", "root", kGetentTimeout), std::optional<unsigned>(0));
    EXPECT_EQ(getent_id(getent, "passwd", "root", kGetentTimeout), std::optional<unsigned>(0));
    EXPECT_EQ(getent_id(getent, "group", "gpuinit-no-such-group", kGetentTimeout), std::nullopt);
    EXPECT_EQ(getent_id(getent, "group", "", kGetentTimeout), std::nullopt);
    // A program that never stops talking: cut off, not taken for an answer.
    bool late = true;
    EXPECT_EQ(getent_id("/usr/bin/yes", "group", "root", kGetentTimeout, &late), std::nullopt);
    EXPECT_FALSE(late);
    // One that never answers is killed at the timeout, and says it was late
    // (AccountDb then asks no more in that run).
    if (::geteuid() == 0) {
        auto started = std::chrono::steady_clock::now();
        EXPECT_EQ(
            getent_id(HANG_FOREVER_BIN, "group", "root", std::chrono::milliseconds(300), &late),
            std::nullopt);
        EXPECT_TRUE(late);
        EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3));
    }

    // A copy others could have written is not run.
    TempDir dir;
    std::string copy = dir / "getent";
    ASSERT_EQ(testing::run_process({"/bin/cp", getent, copy}), 0);
    ASSERT_EQ(::chmod(copy.c_str(), 0777), 0);
    EXPECT_EQ(getent_id(copy, "group", "root", kGetentTimeout), std::nullopt);
    if (::geteuid() == 0) {
        ASSERT_EQ(::chmod(copy.c_str(), 0755), 0);
        ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
        EXPECT_EQ(getent_id(copy, "group", "root", kGetentTimeout), std::optional<unsigned>(0));
    }
}

} // namespace gpuinit
