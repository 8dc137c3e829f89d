#include "gpuinit/fs/sysroot.hpp"
#include "temp_dir.hpp"

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace gpuinit {

using testing::TempDir;

namespace {

void write(const std::string& path, const std::string& text) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fd);
}

size_t open_fds() {
    size_t n = 0;
    if (DIR* dir = ::opendir("/proc/self/fd")) {
        while (::readdir(dir) != nullptr) {
            ++n;
        }
        ::closedir(dir);
    }
    return n;
}

} // namespace

// "" once meant the live root; it is an error now, not "/".
TEST(Sysroot, EmptyRootIsRefused) {
    auto root = Sysroot::open("");
    ASSERT_FALSE(root);
    EXPECT_NE(root.error().message.find("empty"), std::string::npos);
}

// "/." is "/": the same machine, shown the same way.
TEST(Sysroot, HostIsKnownByIdentityNotBySpelling) {
    for (const char* spelling : {"/", "/.", "//", "/tmp/..", "/./"}) {
        auto root = Sysroot::open(spelling);
        ASSERT_TRUE(root) << spelling;
        EXPECT_TRUE(root->is_host()) << spelling;
        EXPECT_EQ(root->display("dev/nvidia0"), "/dev/nvidia0") << spelling;
    }
    TempDir dir;
    auto copy = Sysroot::open(dir.path() + "/");
    ASSERT_TRUE(copy);
    EXPECT_FALSE(copy->is_host());
    EXPECT_EQ(copy->display("dev/x"), dir / "dev/x");
}

TEST(Sysroot, NotADirectory) {
    TempDir dir;
    write(dir / "file", "x");
    auto root = Sysroot::open(dir / "file");
    ASSERT_FALSE(root);
    EXPECT_EQ(root.error().code, ENOTDIR);
}

// A copied tree with an absolute symlink in it: the link resolves inside
// the copy, never to the host's file.
TEST(Sysroot, AbsoluteSymlinksStayInsideTheRoot) {
    TempDir dir;
    ASSERT_EQ(::mkdir((dir / "etc").c_str(), 0755), 0);
    write(dir / "etc/real", "inside\n");
    ASSERT_EQ(::symlink("/etc/real", (dir / "etc/link").c_str()), 0);
    ASSERT_EQ(::symlink("/etc/hostname", (dir / "etc/escape").c_str()), 0);
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    auto text = root->read_file("etc/link");
    ASSERT_TRUE(text) << text.error().message;
    EXPECT_EQ(*text, "inside\n");
    auto escaped = root->read_file("etc/escape");
    EXPECT_FALSE(escaped); // <root>/etc/hostname does not exist
    EXPECT_EQ(root->exists("etc/escape").value_or(true), false);
}

// A FIFO at an input path must not hang the tool (before, it did, after
// taking the run lock), and nothing but a regular file is read.
TEST(Sysroot, OnlyRegularFilesAreRead) {
    TempDir dir;
    ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
    ASSERT_EQ(::mkdir((dir / "dir").c_str(), 0755), 0);
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    for (const char* name : {"fifo", "dir"}) {
        auto text = root->read_file(name);
        ASSERT_FALSE(text) << name;
        EXPECT_NE(text.error().message.find("not a regular file"), std::string::npos)
            << text.error().message;
        EXPECT_NE(text.error().message.find(dir / name), std::string::npos);
    }
    auto lines =
        root->for_each_line("fifo", 100, [](std::string_view, size_t) -> Status { return {}; });
    EXPECT_FALSE(lines);
}

TEST(Sysroot, ReadLimitIsAnErrorThatNamesTheFile) {
    TempDir dir;
    write(dir / "big", std::string(5000, 'x'));
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    auto text = root->read_file("big", 4096);
    ASSERT_FALSE(text);
    EXPECT_EQ(text.error().code, EFBIG);
    EXPECT_NE(text.error().message.find(dir / "big"), std::string::npos);
}

// Streaming: a file of any size is read in blocks; only a line longer than
// the limit is an error.
TEST(Sysroot, ForEachLineStreams) {
    TempDir dir;
    std::string text;
    for (int i = 0; i < 200000; ++i) {
        text += "line" + std::to_string(i) + "\n";
    }
    text += "last without newline";
    write(dir / "many", text);
    write(dir / "long", "short\n" + std::string(70000, 'y') + "\n");
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    size_t count = 0;
    std::string last;
    ASSERT_TRUE(root->for_each_line("many", 1024, [&](std::string_view line, size_t n) -> Status {
        count = n;
        last = line;
        return {};
    }));
    EXPECT_EQ(count, 200001u);
    EXPECT_EQ(last, "last without newline");
    auto refused =
        root->for_each_line("long", 65536, [](std::string_view, size_t) -> Status { return {}; });
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find(dir / "long:2: line longer than 65536"),
              std::string::npos)
        << refused.error().message;
    auto stopped = root->for_each_line("many", 1024, [](std::string_view, size_t n) -> Status {
        return n == 3 ? Status(error("stop")) : Status();
    });
    ASSERT_FALSE(stopped);
    EXPECT_EQ(stopped.error().message, "stop");
}

TEST(Sysroot, ListDirIsSortedWithoutDotsAndClosesItsDirectory) {
    TempDir dir;
    ASSERT_EQ(::mkdir((dir / "d").c_str(), 0755), 0);
    for (const char* name : {"b", "a", "c"}) {
        write(dir / ("d/" + std::string(name)), "");
    }
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root) << root.error().message;
    size_t before = open_fds();
    for (int i = 0; i < 50; ++i) {
        auto names = root->list_dir("d");
        ASSERT_TRUE(names) << names.error().message;
        EXPECT_EQ(*names, (std::vector<std::string>{"a", "b", "c"}));
        auto missing = root->list_dir("nope");
        ASSERT_FALSE(missing);
        EXPECT_EQ(missing.error().code, ENOENT);
        EXPECT_NE(missing.error().message.find(dir / "nope"), std::string::npos);
    }
    EXPECT_EQ(open_fds(), before); // no fd leaked on either path
}

} // namespace gpuinit
