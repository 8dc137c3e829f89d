// The SIGBUS guard (libgpuinit/limit/src/sigbus_guard.cpp): a guarded shared
// mapping whose file is truncated under it reads and writes zeros instead of
// killing the process; any other SIGBUS still kills as it did.
#include "gpuinit/limit/group_state.hpp"
#include "gpuinit/limit/sigbus_guard.hpp"
#include "temp_dir.hpp"

#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuinit::limit {

using gpuinit::testing::TempDir;

namespace {

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
const size_t kLength = 3 * kPage;

// A file of three pages of 0x5a, mapped shared; the fd stays open.
struct Mapped {
    explicit Mapped(const std::string& path) {
        fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(kLength)) != 0) {
            return;
        }
        void* address = ::mmap(nullptr, kLength, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (address != MAP_FAILED) {
            bytes = static_cast<volatile unsigned char*>(address);
            std::memset(address, 0x5a, kLength);
        }
    }
    ~Mapped() {
        if (bytes != nullptr) {
            ::munmap(const_cast<unsigned char*>(bytes), kLength);
        }
        if (fd >= 0) {
            ::close(fd);
        }
    }
    Mapped(const Mapped&) = delete;
    Mapped& operator=(const Mapped&) = delete;
    void* base() const { return const_cast<unsigned char*>(bytes); }

    int fd = -1;
    volatile unsigned char* bytes = nullptr;
};

// Runs `body` in a child: how it ended.
template <typename Body>
int in_child(Body body) {
    pid_t pid = ::fork();
    if (pid == 0) {
        body();
        ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
}

} // namespace

TEST(SigbusGuard, ATruncatedGuardedMappingReadsAndWritesZeros) {
    TempDir tmp;
    ASSERT_TRUE(sigbus_guard::install());
    Mapped mapped(tmp / "state");
    ASSERT_NE(mapped.bytes, nullptr);
    int handle = sigbus_guard::guard(mapped.base(), kLength);
    ASSERT_GE(handle, 0);
    EXPECT_FALSE(sigbus_guard::poisoned(handle));
    EXPECT_EQ(mapped.bytes[100], 0x5a);
    ASSERT_EQ(::ftruncate(mapped.fd, 0), 0);
    EXPECT_EQ(mapped.bytes[kLength - 1], 0); // faults: the whole range is zeros now
    EXPECT_TRUE(sigbus_guard::poisoned(handle));
    EXPECT_EQ(mapped.bytes[0], 0);
    mapped.bytes[kPage] = 7;
    EXPECT_EQ(mapped.bytes[kPage], 7);
    // The file is untouched by writes to the anonymous pages.
    struct stat status {};
    ASSERT_EQ(::fstat(mapped.fd, &status), 0);
    EXPECT_EQ(status.st_size, 0);
    sigbus_guard::unguard(handle);
    EXPECT_FALSE(sigbus_guard::poisoned(handle));
}

TEST(SigbusGuard, AWriteFaultIsCaughtToo) {
    TempDir tmp;
    ASSERT_TRUE(sigbus_guard::install());
    Mapped mapped(tmp / "state");
    ASSERT_NE(mapped.bytes, nullptr);
    int handle = sigbus_guard::guard(mapped.base(), kLength);
    ASSERT_GE(handle, 0);
    ASSERT_EQ(::ftruncate(mapped.fd, static_cast<off_t>(kPage)),
              0); // the first page stays the file's
    mapped.bytes[2 * kPage] = 1;
    EXPECT_TRUE(sigbus_guard::poisoned(handle));
    EXPECT_EQ(mapped.bytes[2 * kPage], 1);
    EXPECT_EQ(mapped.bytes[0], 0); // the whole range was replaced
    sigbus_guard::unguard(handle);
}

TEST(SigbusGuard, AnUnguardedMappingStillDiesOfSigbus) {
    TempDir tmp;
    // Installed, with a guarded range elsewhere: the fault outside it goes
    // to the default action.
    int status = in_child([&] {
        sigbus_guard::install();
        Mapped guarded(tmp / "guarded");
        Mapped other(tmp / "other");
        if (guarded.bytes == nullptr || other.bytes == nullptr ||
            sigbus_guard::guard(guarded.base(), kLength) < 0 || ::ftruncate(other.fd, 0) != 0) {
            ::_exit(2);
        }
        (void)other.bytes[0];
        ::_exit(3);
    });
    ASSERT_TRUE(WIFSIGNALED(status)) << status;
    EXPECT_EQ(WTERMSIG(status), SIGBUS);
    // A range unguarded again is not guarded any more.
    status = in_child([&] {
        sigbus_guard::install();
        Mapped mapped(tmp / "again");
        int handle = mapped.bytes == nullptr ? -1 : sigbus_guard::guard(mapped.base(), kLength);
        if (handle < 0 || ::ftruncate(mapped.fd, 0) != 0) {
            ::_exit(2);
        }
        sigbus_guard::unguard(handle);
        (void)mapped.bytes[0];
        ::_exit(3);
    });
    ASSERT_TRUE(WIFSIGNALED(status)) << status;
    EXPECT_EQ(WTERMSIG(status), SIGBUS);
}

namespace {
void previous_handler(int /*signal*/) {
    ::_exit(42);
}
} // namespace

// A handler the process had before install() still gets the faults outside
// guarded ranges. (install() is once per process: when this process had run
// it already, the child's handler replaces the guard's and is reached
// directly; run alone, the guard chains to it.)
// The daemon's second mapping of a group (GroupState::open_vetted) is
// guarded by its hook between mmap and the first read: a process of the
// group that truncates the file right then (here: inside the hook, before
// the guard) costs the daemon nothing but the group.
TEST(SigbusGuard, OpenVettedGuardsItsMappingBeforeItReadsIt) {
    ASSERT_TRUE(sigbus_guard::install());
    TempDir dir;
    {
        GroupState creator;
        Problem problem;
        ASSERT_TRUE(creator.open(dir.path().c_str(), "g", problem)) << problem.text;
    }
    const std::string path = dir.path() + "/g/state";
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    struct Hooked {
        int fd;
        int handle = -1;
    } hooked{fd};
    StateMapHook hook;
    hook.context = &hooked;
    hook.call = [](void* context, void* mapped, size_t length) {
        auto* state = static_cast<Hooked*>(context);
        ASSERT_EQ(::ftruncate(state->fd, 0), 0); // the hostile truncation
        state->handle = sigbus_guard::guard(mapped, length);
    };
    GroupState vetted;
    Problem problem;
    vetted.open_vetted(fd, path.c_str(), problem, hook); // survives, whatever it returns
    ASSERT_GE(hooked.handle, 0);
    EXPECT_TRUE(sigbus_guard::poisoned(hooked.handle));
    vetted.close();
    sigbus_guard::unguard(hooked.handle);
}

TEST(SigbusGuard, AnotherSigbusGoesToThePreviousHandler) {
    TempDir tmp;
    int status = in_child([&] {
        struct sigaction action {};
        action.sa_handler = previous_handler;
        sigemptyset(&action.sa_mask);
        ::sigaction(SIGBUS, &action, nullptr);
        sigbus_guard::install();
        Mapped mapped(tmp / "other");
        if (mapped.bytes == nullptr || ::ftruncate(mapped.fd, 0) != 0) {
            ::_exit(2);
        }
        (void)mapped.bytes[0];
        ::_exit(3);
    });
    ASSERT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), 42);
}

} // namespace gpuinit::limit
