#include "gpuinit/fs/run_dir.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "temp_dir.hpp"

#include <cerrno>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mutex>
#include <set>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace gpuinit {

using testing::TempDir;

namespace {

struct Umask {
    explicit Umask(mode_t mask) : old(::umask(mask)) {}
    ~Umask() { ::umask(old); }
    mode_t old;
};

mode_t mode_of(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
}

} // namespace

// Created directories get their mode exactly: under umask 077 a 0700
// run/gpuinit (or dev/char) would lock group members out.
TEST(RunDir, CreatedWithItsModeWhateverTheUmask) {
    TempDir dir;
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    Umask strict(077);
    auto run = RunDir::open(*root, true);
    ASSERT_TRUE(run) << run.error().message;
    EXPECT_EQ(mode_of(dir / "run"), 0755u);
    EXPECT_EQ(mode_of(dir / "run/gpuinit"), 0755u);
    EXPECT_TRUE(RunDir::open(*root, false));
}

TEST(RunDir, AWritableRunDirIsRefused) {
    TempDir dir;
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(RunDir::open(*root, true));
    ASSERT_EQ(::chmod((dir / "run/gpuinit").c_str(), 0777), 0);
    auto run = RunDir::open(*root, false);
    ASSERT_FALSE(run);
    EXPECT_NE(run.error().message.find("chmod 0755"), std::string::npos) << run.error().message;
}

// The lock is root-only: a lock file others can open (one pre-created
// under umask 022) lets any user flock it and block every run. It is
// replaced, so fds opened on the old one lock nothing.
TEST(RunDir, ALockOthersCanOpenIsReplaced) {
    TempDir dir;
    auto root = Sysroot::open(dir.path());
    auto run = RunDir::open(*root, true);
    ASSERT_TRUE(run);
    std::string path = dir / "run/gpuinit/lock";
    int planted = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(planted, 0);
    ASSERT_EQ(::fchmod(planted, 0644), 0);
    ASSERT_EQ(::flock(planted, LOCK_EX), 0); // "another user" holds it
    auto lock = run->lock(kMknodLock, std::chrono::milliseconds(200));
    ASSERT_TRUE(lock) << lock.error().message;
    EXPECT_EQ(mode_of(path), 0600u);
    ::close(planted);
}

TEST(RunDir, WaitingForTheLockIsBounded) {
    TempDir dir;
    auto root = Sysroot::open(dir.path());
    auto run = RunDir::open(*root, true);
    ASSERT_TRUE(run);
    auto held = run->lock(kMknodLock, std::chrono::milliseconds(100));
    ASSERT_TRUE(held);
    // flock() locks belong to the open file: a second open competes.
    auto start = std::chrono::steady_clock::now();
    auto second = run->lock(kMknodLock, std::chrono::milliseconds(300));
    auto waited = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(second);
    EXPECT_EQ(second.error().code, ETIMEDOUT);
    EXPECT_NE(second.error().message.find("still held by another run"), std::string::npos);
    EXPECT_NE(second.error().message.find(dir / "run/gpuinit/lock"), std::string::npos);
    EXPECT_GE(waited, std::chrono::milliseconds(300));
    EXPECT_LT(waited, std::chrono::seconds(3));
    auto busy = run->try_lock(kMknodLock);
    ASSERT_FALSE(busy);
    EXPECT_EQ(busy.error().code, EWOULDBLOCK);
    held->reset();
    EXPECT_TRUE(run->try_lock(kMknodLock));
}

TEST(RunDir, LeasesEndWithTheirHolder) {
    TempDir dir;
    auto root = Sysroot::open(dir.path());
    auto run = RunDir::open(*root, true);
    ASSERT_TRUE(run);
    EXPECT_EQ(run->lease_holder("mig-0-1").value_or(std::string("?")), std::nullopt);
    auto lease = run->take_lease("mig-0-1", "pid 42 gpu-mig");
    ASSERT_TRUE(lease) << lease.error().message;
    auto holder = run->lease_holder("mig-0-1");
    ASSERT_TRUE(holder);
    EXPECT_EQ(*holder, std::optional<std::string>("pid 42 gpu-mig"));
    EXPECT_FALSE(run->take_lease("mig-0-1", "pid 43"));
    lease->reset();
    EXPECT_EQ(run->lease_holder("mig-0-1").value_or(std::string("?")), std::nullopt);
    EXPECT_FALSE(run->take_lease("../escape", "x"));
    EXPECT_FALSE(run->take_lease(".gpuinit.x", "x"));
}

TEST(RunDir, RecordsAreReplacedAtomicallyAndReadOnlyAsFiles) {
    TempDir dir;
    auto root = Sysroot::open(dir.path());
    auto run = RunDir::open(*root, true);
    ASSERT_TRUE(run);
    EXPECT_EQ(run->read_record("gpus", 100).value_or(std::string("?")), std::nullopt);
    ASSERT_TRUE(run->write_record("gpus", "one\n"));
    ASSERT_TRUE(run->write_record("gpus", "two\n"));
    EXPECT_EQ(run->read_record("gpus", 100).value_or(std::nullopt), std::string("two\n"));
    EXPECT_EQ(mode_of(dir / "run/gpuinit/gpus"), 0644u);
    ASSERT_EQ(::unlink((dir / "run/gpuinit/gpus").c_str()), 0);
    ASSERT_EQ(::mkfifo((dir / "run/gpuinit/gpus").c_str(), 0644), 0);
    auto fifo = run->read_record("gpus", 100);
    ASSERT_FALSE(fifo);
    EXPECT_NE(fifo.error().message.find("not a regular file"), std::string::npos);
}

// A hard link at the record's name: the write replaces the name, and the
// file the link shares is never written through.
TEST(RunDir, ARecordNeverWritesThroughAHardLink) {
    TempDir dir;
    TempDir outside;
    auto root = Sysroot::open(dir.path());
    auto run = RunDir::open(*root, true);
    ASSERT_TRUE(run);
    int fd = ::open((outside / "precious").c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_EQ(::write(fd, "keep\n", 5), 5);
    ::close(fd);
    ASSERT_EQ(::link((outside / "precious").c_str(), (dir / "run/gpuinit/gpus").c_str()), 0);
    ASSERT_TRUE(run->write_record("gpus", "new\n"));
    char buffer[16] = {};
    fd = ::open((outside / "precious").c_str(), O_RDONLY);
    ASSERT_EQ(::read(fd, buffer, sizeof buffer), 5);
    ::close(fd);
    EXPECT_STREQ(buffer, "keep\n");
}

// Temporary names are unique across threads of one process, not only
// across processes.
TEST(SafeFs, TempNamesAreUniqueAcrossThreads) {
    std::set<std::string> names;
    std::mutex lock;
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&] {
            for (int i = 0; i < 200; ++i) {
                std::string name = temp_name("gpus");
                std::lock_guard<std::mutex> guard(lock);
                names.insert(name);
            }
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(names.size(), 1600u);
    EXPECT_TRUE(names.begin()->starts_with(kTempPrefix));
}

} // namespace gpuinit
