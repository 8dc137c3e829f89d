// MIG leases on fixture roots: what sync makes, keeps, repairs and removes,
// and what a taker refuses. Holder scans on the real /proc.
#include "gpuinit/mig/holders.hpp"
#include "gpuinit/mig/leases.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <sys/file.h>
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
    auto sync = sync_leases(*box.root, box.instances, {}, true, diagnostics);
    EXPECT_TRUE(sync) << sync.error().text();
    EXPECT_TRUE(diagnostics.empty()) << diagnostics.items().front().text();
    return sync ? *sync : LeaseSync{};
}

int reason_of(const Diagnostic& diagnostic) {
    return diagnostic.reason;
}

} // namespace

// A lease is a FIFO whose group and mode follow its CI cap node's: the
// group may open it for writing (and so lock it) only when it may read the
// node; without a planned node, only the owner.
TEST(MigLeases, SyncMakesOneFifoPerInstanceWithItsCapNodesAccess) {
    MigBox box;
    ASSERT_EQ(box.instances.size(), 21u);
    std::map<unsigned, LeaseAccess> access;
    access[box.instances[0].ci_cap_minor] = LeaseAccess{::getegid(), 0440, "mine"};
    access[box.instances[1].ci_cap_minor] = LeaseAccess{::getegid(), 0444, "mine"};
    Diagnostics diagnostics;
    auto sync = sync_leases(*box.root, box.instances, access, true, diagnostics);
    ASSERT_TRUE(sync) << sync.error().text();
    EXPECT_TRUE(diagnostics.empty());
    EXPECT_EQ(sync->created.size(), 21u);
    EXPECT_EQ(sync->created.front(), "gpu1-gi7-ci0");
    struct stat dir = stat_of(box.dir / "run/gpu-mig");
    EXPECT_TRUE(S_ISDIR(dir.st_mode));
    EXPECT_EQ(dir.st_mode & 07777, 0755u);
    struct stat lease = stat_of(box.lease("gpu3-gi14-ci0"));
    EXPECT_TRUE(S_ISFIFO(lease.st_mode));
    EXPECT_EQ(lease.st_mode & 07777, 0600u);
    EXPECT_EQ(lease.st_uid, ::geteuid());
    EXPECT_EQ(stat_of(box.lease(lease_name(box.instances[0]))).st_mode & 07777, 0660u);
    EXPECT_EQ(stat_of(box.lease(lease_name(box.instances[1]))).st_mode & 07777, 0666u);

    Diagnostics again_diagnostics;
    auto again = sync_leases(*box.root, box.instances, access, true, again_diagnostics);
    ASSERT_TRUE(again);
    EXPECT_TRUE(again->created.empty());
    EXPECT_EQ(again->kept, 21u);
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
    EXPECT_EQ(stat_of(box.lease("gpu1-gi8-ci0")).st_mode & 07777, 0600u);
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
    auto sync = sync_leases(*box.root, box.instances, {}, true, diagnostics);
    ASSERT_TRUE(sync) << sync.error().text();
    EXPECT_EQ(sync->repaired, (std::vector<std::string>{"gpu1-gi9-ci0", "gpu1-gi10-ci0"}));
    EXPECT_EQ(sync->removed, std::vector<std::string>{"gpu2-gi1-ci0"});
    EXPECT_EQ(diagnostics.count(Severity::Warning), 1u); // notes.txt, removed
    EXPECT_TRUE(S_ISFIFO(stat_of(box.lease("gpu1-gi9-ci0")).st_mode));
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

// Whoever can merely open a lease for reading cannot hold it: flock(2)
// (what flock(1) takes) is not the lease's lock, and the lease's lock, a
// write lock, is refused on a read-only fd.
TEST(MigLeases, AFlockOrAReadOnlyFdHoldsNoLease) {
    MigBox box;
    sync_ok(box);
    auto dir = LeaseDir::open(*box.root);
    ASSERT_TRUE(dir) << dir.error().text();
    const MigInstance& instance = box.instances[2];
    UniqueFd reader(
        ::open(box.lease(lease_name(instance)).c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    ASSERT_TRUE(reader.valid());
    ASSERT_EQ(::flock(reader.get(), LOCK_EX | LOCK_NB), 0);
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    EXPECT_NE(::fcntl(reader.get(), F_OFD_SETLK, &lock), 0);
    EXPECT_EQ(errno, EBADF);
    EXPECT_FALSE(*dir->held(instance));
    auto lease = dir->take(instance);
    ASSERT_TRUE(lease) << lease.error().text();
    EXPECT_TRUE(*dir->held(instance));
}

TEST(MigLeases, ATakerRefusesWhatSyncDoesNotMake) {
    MigBox box;
    sync_ok(box);
    // A symlink to a file the taker could lock, an executable one, a hard link.
    std::ofstream(box.dir / "mine") << "";
    ASSERT_EQ(::chmod((box.dir / "mine").c_str(), 0444), 0);
    ASSERT_EQ(::unlink(box.lease("gpu1-gi7-ci0").c_str()), 0);
    ASSERT_EQ(::symlink((box.dir / "mine").c_str(), box.lease("gpu1-gi7-ci0").c_str()), 0);
    ASSERT_EQ(::chmod(box.lease("gpu1-gi8-ci0").c_str(), 0700), 0);
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
    EXPECT_FALSE(sync_leases(*box.root, box.instances, {}, true, diagnostics));
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

namespace gpuinit {

// A holder's job: Slurm's job_<id> cgroup directory (v1 and v2 layouts),
// else SLURM_JOB_ID, else LSB_JOBID; nothing that is not a number.
TEST(MigHolders, JobsFromCgroupsAndEnvironments) {
    EXPECT_EQ(job_from_cgroup("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n"),
              "4242");
    EXPECT_EQ(job_from_cgroup("7:devices:/slurm/uid_1000/job_77/step_batch\n"), "77");
    EXPECT_EQ(job_from_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n"), "");
    EXPECT_EQ(job_from_cgroup("0::/job_x/job_12\n"), "12");
    using namespace std::literals;
    EXPECT_EQ(job_from_environ("HOME=/root\0LSB_JOBID=9\0SLURM_JOB_ID=31\0"sv), "31");
    EXPECT_EQ(job_from_environ("LSB_JOBID=9\0"sv), "9");
    EXPECT_EQ(job_from_environ("SLURM_JOB_ID=1;rm\0PATH=/bin"sv), "");
}

} // namespace gpuinit
