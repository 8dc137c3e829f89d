// MIG leases on fixture roots: what sync makes, keeps, repairs and removes,
// and what a taker refuses. Holder scans on the real /proc.
#include "gpuinit/mig/holders.hpp"
#include "gpuinit/mig/leases.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace gpuinit {

using testing::a100_mig_box;
using testing::TempDir;
using testing::write_fixture;

namespace {

struct MigBox {
    TempDir dir;
    std::optional<Sysroot> root;
    std::vector<MigInstance> instances;

    explicit MigBox(const testing::FakeMachine& fake = a100_mig_box()) {
        EXPECT_TRUE(write_fixture(fake, dir.path()));
        auto opened = Sysroot::open(dir.path());
        EXPECT_TRUE(opened);
        root.emplace(std::move(*opened));
        Diagnostics diagnostics;
        auto machine = discover_machine(*root, diagnostics);
        auto topology = read_mig_topology(*root, diagnostics);
        EXPECT_TRUE(machine && topology);
        instances = join_mig_instances(*machine, *topology, diagnostics);
    }
    std::string lease(const std::string& name) const { return dir / ("run/gpu-mig/" + name); }
};

struct stat stat_of(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st;
}

LeaseSync sync_ok(const MigBox& box) {
    Diagnostics diagnostics;
    auto sync = sync_leases(*box.root, box.instances, true, diagnostics);
    EXPECT_TRUE(sync) << sync.error().text();
    EXPECT_TRUE(diagnostics.empty()) << diagnostics.items().front().text();
    return sync ? *sync : LeaseSync{};
}

int reason_of(const Diagnostic& diagnostic) {
    return diagnostic.reason;
}

} // namespace

TEST(MigLeases, SyncMakesOneReadOnlyFilePerInstance) {
    MigBox box;
    ASSERT_EQ(box.instances.size(), 21u);
    LeaseSync sync = sync_ok(box);
    EXPECT_EQ(sync.created.size(), 21u);
    EXPECT_EQ(sync.created.front(), "gpu1-gi7-ci0");
    struct stat dir = stat_of(box.dir / "run/gpu-mig");
    EXPECT_TRUE(S_ISDIR(dir.st_mode));
    EXPECT_EQ(dir.st_mode & 07777, 0755u);
    struct stat lease = stat_of(box.lease("gpu3-gi14-ci0"));
    EXPECT_TRUE(S_ISREG(lease.st_mode));
    EXPECT_EQ(lease.st_mode & 07777, 0444u);
    EXPECT_EQ(lease.st_uid, ::geteuid());
    EXPECT_EQ(lease.st_size, 0);

    LeaseSync again = sync_ok(box);
    EXPECT_TRUE(again.created.empty());
    EXPECT_EQ(again.kept, 21u);
}

// A held lease stays valid across a sync: its inode is kept, a wrong mode
// is fixed in place.
TEST(MigLeases, SyncKeepsTheInodeOfAGoodLease) {
    MigBox box;
    sync_ok(box);
    ino_t before = stat_of(box.lease("gpu1-gi7-ci0")).st_ino;
    ASSERT_EQ(::chmod(box.lease("gpu1-gi8-ci0").c_str(), 0644), 0);
    LeaseSync sync = sync_ok(box);
    EXPECT_EQ(sync.repaired, std::vector<std::string>{"gpu1-gi8-ci0"});
    EXPECT_EQ(stat_of(box.lease("gpu1-gi7-ci0")).st_ino, before);
    EXPECT_EQ(stat_of(box.lease("gpu1-gi8-ci0")).st_mode & 07777, 0444u);
}

TEST(MigLeases, SyncReplacesSymlinksAndHardLinksAndRemovesStaleOnes) {
    MigBox box;
    sync_ok(box);
    ASSERT_EQ(::unlink(box.lease("gpu1-gi9-ci0").c_str()), 0);
    ASSERT_EQ(::symlink("/etc/passwd", box.lease("gpu1-gi9-ci0").c_str()), 0);
    ASSERT_EQ(::link(box.lease("gpu1-gi10-ci0").c_str(), (box.dir / "elsewhere").c_str()), 0);
    std::ofstream(box.lease("gpu2-gi1-ci0")) << "";  // an instance that no longer exists
    std::ofstream(box.lease("notes.txt")) << "junk"; // not a lease
    Diagnostics diagnostics;
    auto sync = sync_leases(*box.root, box.instances, true, diagnostics);
    ASSERT_TRUE(sync) << sync.error().text();
    EXPECT_EQ(sync->repaired, (std::vector<std::string>{"gpu1-gi9-ci0", "gpu1-gi10-ci0"}));
    EXPECT_EQ(sync->removed, std::vector<std::string>{"gpu2-gi1-ci0"});
    EXPECT_EQ(diagnostics.count(Severity::Warning), 1u); // notes.txt, removed
    EXPECT_TRUE(S_ISREG(stat_of(box.lease("gpu1-gi9-ci0")).st_mode));
    EXPECT_EQ(stat_of(box.lease("gpu1-gi10-ci0")).st_nlink, 1u);
    EXPECT_NE(::access(box.lease("gpu2-gi1-ci0").c_str(), F_OK), 0);
    EXPECT_NE(::access(box.lease("notes.txt").c_str(), F_OK), 0);
}

TEST(MigLeases, ALeaseIsExclusiveUntilItsFdCloses) {
    MigBox box;
    sync_ok(box);
    auto dir = LeaseDir::open(*box.root);
    ASSERT_TRUE(dir) << dir.error().text();
    const MigInstance& instance = box.instances[3];
    auto first = dir->take(instance);
    ASSERT_TRUE(first) << first.error().text();
    auto second = dir->take(instance);
    ASSERT_FALSE(second);
    EXPECT_EQ(reason_of(second.error()), static_cast<int>(LeaseFailure::Held));
    EXPECT_EQ(second.error().code, EWOULDBLOCK);
    EXPECT_TRUE(*dir->held(instance));
    EXPECT_FALSE(*dir->held(box.instances[4]));
    // A dup keeps it; the last close ends it.
    UniqueFd copy(::dup(first->get()));
    first->reset();
    EXPECT_TRUE(*dir->held(instance));
    copy.reset();
    EXPECT_FALSE(*dir->held(instance));
    EXPECT_TRUE(dir->take(instance));
}

TEST(MigLeases, ATakerRefusesWhatSyncDoesNotMake) {
    MigBox box;
    sync_ok(box);
    // A symlink to a file the taker could lock, a writable file, a hard link.
    std::ofstream(box.dir / "mine") << "";
    ASSERT_EQ(::chmod((box.dir / "mine").c_str(), 0444), 0);
    ASSERT_EQ(::unlink(box.lease("gpu1-gi7-ci0").c_str()), 0);
    ASSERT_EQ(::symlink((box.dir / "mine").c_str(), box.lease("gpu1-gi7-ci0").c_str()), 0);
    ASSERT_EQ(::chmod(box.lease("gpu1-gi8-ci0").c_str(), 0666), 0);
    ASSERT_EQ(::link(box.lease("gpu1-gi9-ci0").c_str(), (box.dir / "other").c_str()), 0);
    ASSERT_EQ(::unlink(box.lease("gpu1-gi10-ci0").c_str()), 0);
    auto dir = LeaseDir::open(*box.root);
    ASSERT_TRUE(dir);
    for (size_t i = 0; i < 3; ++i) {
        auto lease = dir->take(box.instances[i]);
        ASSERT_FALSE(lease) << box.instances[i].key();
        EXPECT_EQ(reason_of(lease.error()), static_cast<int>(LeaseFailure::Untrusted))
            << lease.error().text();
        EXPECT_NE(lease.error().message.find("gpu-mig sync"), std::string::npos);
    }
    auto missing = dir->take(box.instances[3]);
    ASSERT_FALSE(missing);
    EXPECT_EQ(reason_of(missing.error()), static_cast<int>(LeaseFailure::Missing));
}

TEST(MigLeases, ADirectoryOthersCanWriteIsRefused) {
    MigBox box;
    auto absent = LeaseDir::open(*box.root);
    ASSERT_FALSE(absent);
    EXPECT_EQ(reason_of(absent.error()), static_cast<int>(LeaseFailure::Missing));
    EXPECT_NE(absent.error().message.find("run 'gpu-mig sync' as root"), std::string::npos);
    sync_ok(box);
    ASSERT_EQ(::chmod((box.dir / "run/gpu-mig").c_str(), 0777), 0);
    auto refused = LeaseDir::open(*box.root);
    ASSERT_FALSE(refused);
    EXPECT_EQ(reason_of(refused.error()), static_cast<int>(LeaseFailure::Untrusted));
    EXPECT_NE(refused.error().message.find("mode 0777"), std::string::npos)
        << refused.error().text();
    // sync puts the mode back.
    sync_ok(box);
    EXPECT_TRUE(LeaseDir::open(*box.root));
    // A symlink in its place is never followed.
    ASSERT_EQ(::rename((box.dir / "run/gpu-mig").c_str(), (box.dir / "run/real").c_str()), 0);
    ASSERT_EQ(::symlink("real", (box.dir / "run/gpu-mig").c_str()), 0);
    EXPECT_FALSE(LeaseDir::open(*box.root));
    Diagnostics diagnostics;
    EXPECT_FALSE(sync_leases(*box.root, box.instances, true, diagnostics));
}

// The fixture's proc has no processes: nothing holds anything.
TEST(MigHolders, AFixtureProcHasNoHolders) {
    MigBox box;
    auto holders = find_cap_holders(*box.root, 235, {box.instances[0].ci_cap_minor});
    ASSERT_TRUE(holders) << holders.error().text();
    EXPECT_TRUE(holders->by_minor.empty());
    EXPECT_EQ(holders->uninspected, 0u);
}

// On the real /proc, by st_rdev: this process holding /dev/null (1:3).
TEST(MigHolders, TheRealProcShowsThisProcessHoldingACharDevice) {
    auto root = Sysroot::open("/");
    ASSERT_TRUE(root);
    UniqueFd held(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(held.valid());
    struct stat st {};
    ASSERT_EQ(::fstat(held.get(), &st), 0);
    auto holders = find_cap_holders(*root, major(st.st_rdev), {minor(st.st_rdev), 250});
    ASSERT_TRUE(holders) << holders.error().text();
    ASSERT_TRUE(holders->busy(minor(st.st_rdev)));
    const std::vector<pid_t>& pids = holders->by_minor.at(minor(st.st_rdev));
    EXPECT_NE(std::find(pids.begin(), pids.end(), ::getpid()), pids.end());
    EXPECT_FALSE(holders->busy(250));
}

} // namespace gpuinit
