// Real mknod/chown into temporary roots: type, rdev, owner, group and mode,
// idempotence, repair, and the hostile-/dev cases.
#include "gpuinit/devnodes/mknod.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/host/privileges.hpp"
#include "json_check.hpp"
#include "machine_fixture.hpp"
#include "outcome_text.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <iterator>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace gpuinit {

using testing::FakeMachine;
using testing::lstat_or_die;
using testing::outcome_json;
using testing::outcome_text;
using testing::run_process;
using testing::TempDir;
using testing::workstation;
using testing::write_fixture;

namespace {

MknodOutcome apply(const std::string& root, PlanRequest request = PlanRequest(),
                   bool remove = false) {
    MknodOptions options;
    options.request = std::move(request);
    options.remove = remove;
    auto sysroot = Sysroot::open(root);
    if (!sysroot) {
        ADD_FAILURE() << sysroot.error().text();
        return {};
    }
    return run_mknod(*sysroot, options);
}

PlanRequest device(const std::string& text) {
    return {PlanRequest::Scope::Device, *GpuSelector::parse(text)};
}

// Changes of `kind` to nodes and links (not directories or leftovers).
size_t count_entries(const MknodOutcome& outcome, Change::Kind kind) {
    size_t n = 0;
    for (const Change& change : outcome.result.changes) {
        n += change.kind == kind &&
             (change.target == Change::Target::Node || change.target == Change::Target::Link);
    }
    return n;
}

void expect_node(const std::string& path, unsigned major_number, unsigned minor_number, gid_t gid,
                 unsigned mode) {
    struct stat st = lstat_or_die(path);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << path;
    EXPECT_EQ(st.st_rdev, makedev(major_number, minor_number)) << path;
    EXPECT_EQ(st.st_uid, 0u) << path;
    EXPECT_EQ(st.st_gid, gid) << path;
    EXPECT_EQ(st.st_mode & 07777, mode) << path;
}

std::string link_target(const std::string& path) {
    char buffer[256] = {};
    ssize_t n = ::readlink(path.c_str(), buffer, sizeof buffer - 1);
    return n < 0 ? std::string() : std::string(buffer, static_cast<size_t>(n));
}

void expect_machine_state(const TempDir& dir, const FakeMachine& machine, unsigned gpus) {
    for (unsigned i = 0; i < gpus; ++i) {
        std::string name = "nvidia" + std::to_string(i);
        expect_node(dir / ("dev/" + name), 195, i, machine.gid_of(name), 0660);
        EXPECT_EQ(link_target(dir / ("dev/char/195:" + std::to_string(i))), "../" + name);
    }
    expect_node(dir / "dev/nvidiactl", 195, 255, 0, 0666);
    expect_node(dir / "dev/nvidia-uvm", 510, 0, 0, 0666);
    expect_node(dir / "dev/nvidia-uvm-tools", 510, 1, 0, 0666);
    EXPECT_EQ(link_target(dir / "dev/char/510:1"), "../nvidia-uvm-tools");
}

} // namespace

TEST(RootReconcile, CreatesEveryNodeAndASecondRunChangesNothing) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    FakeMachine machine = workstation(4);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    MknodOutcome first = apply(dir.path());
    ASSERT_EQ(first.status, MknodStatus::Done) << outcome_text(first, 1);
    EXPECT_EQ(count_entries(first, Change::Kind::Create), 14u);
    expect_machine_state(dir, machine, 4);

    MknodOutcome second = apply(dir.path());
    EXPECT_EQ(second.status, MknodStatus::Done);
    EXPECT_EQ(second.result.count(Change::Kind::Unchanged), second.result.changes.size());
    EXPECT_NE(outcome_text(second, 0).find("nothing to do"), std::string::npos)
        << outcome_text(second, 0);
}

TEST(RootReconcile, RepairsModeAndGroupInPlace) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    FakeMachine machine = workstation(3);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    ASSERT_EQ(apply(dir.path()).status, MknodStatus::Done);
    std::string node = dir / "dev/nvidia1";
    ASSERT_EQ(::chmod(node.c_str(), 0666), 0);
    ASSERT_EQ(::chown(node.c_str(), 0, machine.gid_of("nvidia2")), 0);
    ino_t inode = lstat_or_die(node).st_ino;

    MknodOutcome repair = apply(dir.path());
    EXPECT_EQ(repair.status, MknodStatus::Done);
    EXPECT_EQ(repair.result.count(Change::Kind::Repair), 1u);
    expect_node(node, 195, 1, machine.gid_of("nvidia1"), 0660);
    // In place: a container that bind-mounted the node sees the fix.
    EXPECT_EQ(lstat_or_die(node).st_ino, inode);
}

// --check is what `service gpu-restriction status` asks: 0 when /dev is as
// the policy says, 4 when a run would change something, and it changes
// nothing itself.
TEST(RootReconcile, CheckExitsFourOnADifferenceAndChangesNothing) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    FakeMachine machine = workstation(2);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    std::string output;
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--check"}, &output), 4) << output;
    EXPECT_NE(output.find("would create"), std::string::npos) << output;
    EXPECT_FALSE(std::filesystem::exists(dir / "dev/nvidia0"));

    ASSERT_EQ(apply(dir.path()).status, MknodStatus::Done);
    output.clear();
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--check", "-q"}, &output), 0)
        << output;

    std::string node = dir / "dev/nvidia1";
    ASSERT_EQ(::chmod(node.c_str(), 0666), 0);
    output.clear();
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--check"}, &output), 4) << output;
    EXPECT_NE(output.find("would repair"), std::string::npos) << output;
    EXPECT_EQ(lstat_or_die(node).st_mode & 07777, 0666u);

    // A broken policy is exit 3 as ever, not a mere difference.
    std::ofstream(dir / "etc/gpu-restriction.conf") << "gpu=0 bogus\n";
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--check", "-q"}), 3);
}

// --check exits 4 for any difference, a missing group included: its node
// would be root-only, not what the policy says (it was 2, "partial").
TEST(RootReconcile, CheckExitsFourWhenAGroupDoesNotExist) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    FakeMachine machine = workstation(2);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    ASSERT_EQ(apply(dir.path()).status, MknodStatus::Done);
    std::ofstream(dir / "etc/gpu-restriction.conf") << "gpu=1 group=nosuchgroup\n";
    ASSERT_EQ(apply(dir.path()).status, MknodStatus::Partial); // nvidia1 now root-only
    std::string output;
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--check"}, &output), 4) << output;
    EXPECT_NE(output.find("group nosuchgroup does not exist"), std::string::npos) << output;
    EXPECT_EQ(output.find("would repair"), std::string::npos) << output;
    // Without --check, the run that leaves a node root-only is partial.
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "-q"}), 2);
}

// Another run holding the lock past the wait: the outcome says busy, which
// gpu-mknod exits 6 for.
TEST(RootReconcile, ALockHeldPastTheWaitIsBusy) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
    auto sysroot = Sysroot::open(dir.path());
    ASSERT_TRUE(sysroot);
    auto run = RunDir::open(*sysroot, true);
    ASSERT_TRUE(run) << run.error().text();
    auto held = run->lock(kMknodLock, std::chrono::milliseconds(0));
    ASSERT_TRUE(held) << held.error().text();
    MknodOptions options;
    options.lock_wait = std::chrono::milliseconds(50);
    MknodOutcome outcome = run_mknod(*sysroot, options);
    EXPECT_EQ(outcome.status, MknodStatus::NothingDone) << outcome_text(outcome, 0);
    EXPECT_EQ(outcome.cause, MknodCause::Busy) << outcome_text(outcome, 0);
    EXPECT_FALSE(std::filesystem::exists(dir / "dev/nvidia0"));
}

TEST(RootReconcile, ReplacesWrongRdevAndWrongType) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    FakeMachine machine = workstation(3);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    ASSERT_EQ(::mknod((dir / "dev/nvidia2").c_str(), S_IFCHR | 0666, makedev(195, 7)), 0);
    int fd = ::open((dir / "dev/nvidia1").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ::close(fd);
    MknodOutcome outcome = apply(dir.path());
    EXPECT_EQ(outcome.status, MknodStatus::Done) << outcome_text(outcome, 1);
    EXPECT_EQ(outcome.result.count(Change::Kind::Replace), 2u);
    expect_machine_state(dir, machine, 3);
}

TEST(RootReconcile, SymlinkPlantedAtANodeIsNotFollowed) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    TempDir outside;
    FakeMachine machine = workstation(2);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    std::string victim = outside / "shadow";
    int fd = ::open(victim.c_str(), O_CREAT | O_WRONLY, 0640);
    ASSERT_GE(fd, 0);
    ::close(fd);
    ASSERT_EQ(::chown(victim.c_str(), 0, 42), 0);
    ASSERT_EQ(::chmod(victim.c_str(), 0640), 0);
    ASSERT_EQ(::symlink(victim.c_str(), (dir / "dev/nvidia0").c_str()), 0);
    ASSERT_EQ(::mkdir((dir / "dev/char").c_str(), 0755), 0);
    ASSERT_EQ(::symlink(victim.c_str(), (dir / "dev/char/195:1").c_str()), 0);

    MknodOutcome outcome = apply(dir.path());
    EXPECT_EQ(outcome.status, MknodStatus::Done) << outcome_text(outcome, 1);
    struct stat st = lstat_or_die(victim);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_gid, 42u);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    expect_machine_state(dir, machine, 2);
}

TEST(RootReconcile, SymlinkedDevDirectoryIsRefused) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    TempDir elsewhere;
    ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
    ASSERT_EQ(::rmdir((dir / "dev").c_str()), 0);
    ASSERT_EQ(::symlink(elsewhere.path().c_str(), (dir / "dev").c_str()), 0);
    MknodOutcome outcome = apply(dir.path());
    EXPECT_EQ(outcome.status, MknodStatus::NothingDone) << outcome_text(outcome, 1);
    EXPECT_NE(outcome_text(outcome, 0).find("refusing to follow"), std::string::npos)
        << outcome_text(outcome, 0);
    EXPECT_NE(::access((elsewhere / "nvidia0").c_str(), F_OK), 0);
}

size_t count_of(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
        ++n;
    }
    return n;
}

// One refused directory is one full error, not one per entry in it.
TEST(RootReconcile, SymlinkedDevCharIsReportedOnce) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    TempDir elsewhere;
    FakeMachine machine = workstation(3);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    ASSERT_EQ(::symlink(elsewhere.path().c_str(), (dir / "dev/char").c_str()), 0);
    MknodOutcome outcome = apply(dir.path());
    std::string text = outcome_text(outcome, 0);
    EXPECT_EQ(outcome.status, MknodStatus::Partial) << text;
    // The directory itself, then its 6 links (3 GPUs + 3 control).
    EXPECT_EQ(outcome.result.count(Change::Kind::Failed), 7u) << text;
    EXPECT_EQ(count_of(text, "refusing to follow"), 1u) << text;
    EXPECT_EQ(count_of(text, " skipped: " + dir / "dev/char" + " could not be opened"), 6u) << text;
    std::string json = outcome_json(outcome);
    EXPECT_TRUE(testing::valid_json(json)) << json;
    EXPECT_EQ(count_of(json, "refusing to follow"), 2u) << json; // the change and the problem
    EXPECT_EQ(count_of(json, "\"action\":\"failed\""), 7u) << json;
    expect_node(dir / "dev/nvidia1", 195, 1, machine.gid_of("nvidia1"), 0660); // nodes proceed
    EXPECT_NE(::access((elsewhere / "195:0").c_str(), F_OK), 0);
}

// Runs `body` in a child where fchmodat2 and the *xattrat calls fail with
// ENOSYS (as before Linux 6.6 and 6.13) and /proc is an empty tmpfs (a
// rescue shell), so safe-fs takes its last fallbacks. `body` returns the
// child's exit code and may fill the text. Returns that code, or -1.
int run_on_old_kernel_without_proc(const std::function<int(std::string*)>& body,
                                   std::string* text) {
    return testing::run_in_child(
        [&] {
            if (::unshare(CLONE_NEWNS) != 0 ||
                ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
                ::mount("tmpfs", "/proc", "tmpfs", 0, nullptr) != 0) {
                return 120;
            }
            struct sock_filter filter[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 452 /* fchmodat2 */, 3, 0),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 464 /* getxattrat */, 2, 0),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 466 /* removexattrat */, 1, 0),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
            };
            struct sock_fprog program = {static_cast<unsigned short>(std::size(filter)), filter};
            if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
                ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
                return 121;
            }
            std::string report;
            int code = body(&report);
            std::fputs(report.c_str(), stdout);
            return code;
        },
        text);
}

int mknod_in_child(const std::string& root, std::string* report) {
    MknodOutcome outcome = apply(root);
    *report = outcome_text(outcome, 0);
    return static_cast<int>(outcome.status);
}

// The last chmod fallback follows links; it must only run where nobody but
// root can plant one. A run repairs /dev first (fchmod on its fd needs no
// fallback), so the fallback then works; SafeDir refuses it elsewhere.
TEST(RootReconcile, FollowingChmodFallbackOnlyInARootOwnedUnwritableDir) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    FakeMachine machine = workstation(1);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    ASSERT_EQ(::chmod((dir / "dev").c_str(), 0777), 0);
    std::string text;
    int code = run_on_old_kernel_without_proc(
        [&](std::string* report) { return mknod_in_child(dir.path(), report); }, &text);
    ASSERT_LT(code, 120) << "could not set up the old-kernel child: " << code << "\n" << text;
    EXPECT_EQ(code, static_cast<int>(MknodStatus::Done)) << text;
    EXPECT_EQ(lstat_or_die(dir / "dev").st_mode & 07777, 0755u);
    expect_node(dir / "dev/nvidia0", 195, 0, machine.gid_of("nvidia0"), 0660);

    TempDir open_dir;
    ASSERT_EQ(::mkdir((open_dir / "d").c_str(), 0777), 0);
    ASSERT_EQ(::chmod((open_dir / "d").c_str(), 0777), 0);
    ASSERT_EQ(::mknod((open_dir / "d/node").c_str(), S_IFCHR | 0600, makedev(195, 0)), 0);
    text.clear();
    code = run_on_old_kernel_without_proc(
        [&](std::string* report) {
            auto root = Sysroot::open(open_dir.path());
            auto d = SafeDir::open(*root, "d");
            if (!d) {
                *report = d.error().text();
                return 3;
            }
            auto chmodded = d->chmod("node", 0660);
            auto acl = d->acl("node");
            *report =
                (chmodded ? std::string("chmod went through\n") : chmodded.error().text() + "\n") +
                (acl ? std::string("acl read\n") : acl.error().text() + "\n");
            return chmodded || acl ? 1 : 0;
        },
        &text);
    ASSERT_LT(code, 120) << text;
    EXPECT_EQ(code, 0) << text;
    EXPECT_NE(text.find("refusing to chmod " + open_dir / "d/node"), std::string::npos) << text;
    EXPECT_NE(text.find("chmod go-w " + open_dir / "d"), std::string::npos) << text;
    EXPECT_NE(text.find("refusing to check the ACL of " + open_dir / "d/node"), std::string::npos)
        << text;
    EXPECT_EQ(lstat_or_die(open_dir / "d/node").st_mode & 07777, 0600u);
}

TEST(RootReconcile, MissingGroupGivesARootOnlyNodeAndTightensAnOpenOne) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    FakeMachine machine = workstation(2);
    machine.groups.pop_back();
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    ASSERT_EQ(::mknod((dir / "dev/nvidia1").c_str(), S_IFCHR | 0666, makedev(195, 1)), 0);
    ASSERT_EQ(::chmod((dir / "dev/nvidia1").c_str(), 0666), 0);
    MknodOutcome outcome = apply(dir.path());
    EXPECT_EQ(outcome.status, MknodStatus::Partial);
    expect_node(dir / "dev/nvidia1", 195, 1, 0, 0600);
    expect_node(dir / "dev/nvidia0", 195, 0, machine.gid_of("nvidia0"), 0660);
}

TEST(RootReconcile, EightConcurrentRunsEndInTheSameCorrectState) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    FakeMachine machine = workstation(16);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    std::vector<std::thread> runs;
    runs.reserve(8);
    std::vector<int> codes(8, -1);
    for (int i = 0; i < 8; ++i) {
        runs.emplace_back([&, i] {
            // Half of them as udev would run them, one GPU each.
            std::vector<std::string> argv = {GPU_MKNOD_BIN, "--root", dir.path(), "-q"};
            if (i % 2 == 1) {
                argv.push_back("--device");
                argv.push_back(std::to_string(i));
            }
            codes[i] = run_process(argv);
        });
    }
    for (std::thread& run : runs) {
        run.join();
    }
    for (int code : codes) {
        EXPECT_EQ(code, 0);
    }
    expect_machine_state(dir, machine, 16);
    std::string listing;
    EXPECT_EQ(run_process({"/bin/ls", "-a", dir / "dev", dir / "dev/char"}, &listing), 0);
    EXPECT_EQ(listing.find(".gpuinit."), std::string::npos) << listing; // no temporaries left
}

TEST(RootReconcile, RemoveDeletesTheNodesOfAGpuThatWentAway) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    FakeMachine machine = workstation(3);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    ASSERT_EQ(apply(dir.path()).status, MknodStatus::Done);

    // Still bound: refused.
    EXPECT_EQ(apply(dir.path(), device("0000:37:00.0"), true).status, MknodStatus::Partial);
    EXPECT_EQ(::access((dir / "dev/nvidia2").c_str(), F_OK), 0);

    // The GPU is unbound: its driver entry is gone; the record maps bdf -> minor.
    ASSERT_EQ(run_process({"/bin/rm", "-rf", dir / "proc/driver/nvidia/gpus/0000:37:00.0"}), 0);
    MknodOutcome removed = apply(dir.path(), device("0000:37:00.0"), true);
    EXPECT_EQ(removed.status, MknodStatus::Done) << outcome_text(removed, 1);
    EXPECT_EQ(count_entries(removed, Change::Kind::Remove), 2u);
    EXPECT_NE(::access((dir / "dev/nvidia2").c_str(), F_OK), 0);
    EXPECT_NE(::access((dir / "dev/char/195:2").c_str(), F_OK), 0);
    expect_node(dir / "dev/nvidia1", 195, 1, machine.gid_of("nvidia1"), 0660);
}

std::string read_records(const TempDir& dir) {
    std::string text;
    run_process({"/bin/cat", dir / "run/gpuinit/gpus"}, &text);
    return text;
}

// The udev remove event can come after other runs (another GPU's add, a
// boot-time run): the record of a GPU that went away must survive them, and
// go only when --remove has removed its nodes.
TEST(RootReconcile, RecordOfAGpuThatWentAwaySurvivesOtherRunsUntilRemoved) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    FakeMachine machine = workstation(3);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    ASSERT_EQ(apply(dir.path()).status, MknodStatus::Done);
    ASSERT_NE(read_records(dir).find("2 0000:37:00.0 "), std::string::npos) << read_records(dir);

    ASSERT_EQ(run_process({"/bin/rm", "-rf", dir / "proc/driver/nvidia/gpus/0000:37:00.0"}), 0);
    MknodOutcome between = apply(dir.path(), device("0"));
    EXPECT_EQ(between.status, MknodStatus::Done) << outcome_text(between, 1);
    EXPECT_EQ(apply(dir.path()).status, MknodStatus::Done);
    std::string records = read_records(dir);
    EXPECT_NE(records.find("0 0000:17:00.0 "), std::string::npos) << records;
    EXPECT_NE(records.find("2 0000:37:00.0 "), std::string::npos) << records;

    MknodOutcome removed = apply(dir.path(), device("0000:37:00.0"), true);
    EXPECT_EQ(removed.status, MknodStatus::Done) << outcome_text(removed, 1);
    EXPECT_EQ(count_entries(removed, Change::Kind::Remove), 2u);
    EXPECT_NE(::access((dir / "dev/nvidia2").c_str(), F_OK), 0);
    records = read_records(dir);
    EXPECT_EQ(records.find("0000:37:00.0"), std::string::npos) << records;
    EXPECT_NE(records.find("1 0000:27:00.0 "), std::string::npos) << records;
}

// A record is stale once a present GPU holds its minor or its address.
TEST(RootReconcile, RecordIsReplacedWhenAnotherGpuTakesItsMinor) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    FakeMachine machine = workstation(2);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    ASSERT_EQ(apply(dir.path()).status, MknodStatus::Done);
    // The GPU at 27:00.0 went away and one at 47:00.0 now has minor 1.
    ASSERT_EQ(run_process({"/bin/rm", "-rf", dir / "proc/driver/nvidia/gpus/0000:27:00.0",
                           dir / "sys/bus/pci/devices/0000:27:00.0"}),
              0);
    machine.pci.erase(machine.pci.begin() + 3);
    testing::FakePciFunction moved;
    moved.bdf = "0000:47:00.0";
    moved.minor = 1;
    machine.pci.push_back(moved);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    EXPECT_EQ(apply(dir.path()).status, MknodStatus::Done);
    std::string records = read_records(dir);
    EXPECT_NE(records.find("1 0000:47:00.0 "), std::string::npos) << records;
    EXPECT_EQ(records.find("0000:27:00.0"), std::string::npos) << records;
}

TEST(RootReconcile, WithoutPrivilegesNothingIsDoneAndNoLinkDangles) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(2), dir.path()));
    ASSERT_EQ(run_process({"/bin/chmod", "-R", "a+rwX", dir.path()}), 0);
    int code = testing::run_in_child([&] {
        if (!drop_privileges(65534, 65534, {})) {
            return 100;
        }
        MknodOutcome outcome = apply(dir.path());
        bool says_root = outcome_text(outcome, 0).find("(run as root)") != std::string::npos;
        if (outcome.cause != MknodCause::NotPermitted) {
            return 102;
        }
        return says_root ? static_cast<int>(outcome.status) : 101;
    });
    EXPECT_EQ(code, static_cast<int>(MknodStatus::NothingDone));
    // gpu-mknod itself: exit 5, not permitted.
    code = testing::run_in_child([&] {
        if (!drop_privileges(65534, 65534, {})) {
            return 100;
        }
        return run_process({GPU_MKNOD_BIN, "--root", dir.path(), "-q"});
    });
    EXPECT_EQ(code, 5);
    EXPECT_NE(::access((dir / "dev/nvidia0").c_str(), F_OK), 0);
    struct stat st {};
    EXPECT_NE(::lstat((dir / "dev/char/195:0").c_str(), &st), 0); // no dangling link
}

// A user's dry run reads root's records (it once refused root's run
// directory because the user did not own it).
TEST(RootReconcile, AUsersDryRunReadsRootsRecords) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
    FakeMachine machine = workstation(2);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    ASSERT_EQ(apply(dir.path()).status, MknodStatus::Done);
    ASSERT_EQ(run_process({"/bin/rm", "-rf", dir / "proc/driver/nvidia/gpus/0000:27:00.0"}), 0);
    int code = testing::run_in_child([&] {
        if (!drop_privileges(65534, 65534, {})) {
            return 100;
        }
        MknodOptions options;
        options.dry_run = true;
        options.remove = true;
        options.request = device("0000:27:00.0");
        MknodOutcome outcome = run_mknod(*Sysroot::open(dir.path()), options);
        bool planned = outcome.result.count(Change::Kind::Remove) == 2;
        return planned ? static_cast<int>(outcome.status) : 101;
    });
    EXPECT_EQ(code, static_cast<int>(MknodStatus::Done));
    EXPECT_EQ(::access((dir / "dev/nvidia1").c_str(), F_OK), 0); // a dry run
}

TEST(RootReconcile, ToolExitCodesAndDryRunChangeNothing) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(2), dir.path()));
    std::string output;
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--dry-run"}, &output), 0);
    EXPECT_NE(output.find("would create"), std::string::npos) << output;
    EXPECT_NE(::access((dir / "dev/nvidia0").c_str(), F_OK), 0);
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--bogus"}), 1);
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--remove"}), 1);
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--device", "nvidia0"}), 1);
    ASSERT_EQ(::unlink((dir / "proc/devices").c_str()), 0);
    output.clear();
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path()}, &output), 3);
    EXPECT_NE(output.find("driver is not loaded"), std::string::npos) << output;
}

} // namespace gpuinit

namespace gpuinit {

namespace {

std::string whole_file(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

} // namespace

// Real cap nodes: made with their modes, DeviceFileModify left alone in
// access files that are not the driver's, a second run has nothing to do,
// and a destroyed instance's node and link are removed while a foreign file
// of that name pattern is left alone.
TEST(RootReconcile, MigCapNodesAreMadeAndPrunedAfterAnInstanceGoes) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    FakeMachine machine = testing::a100_mig_box();
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    std::string access = dir / "proc/driver/nvidia/capabilities/gpu1/mig/gi7/ci0/access";
    std::string before = whole_file(access);
    MknodOutcome first = apply(dir.path());
    ASSERT_EQ(first.status, MknodStatus::Done) << outcome_text(first, 1);
    unsigned ci = testing::oracle_ci_minor(1, 7, 0);
    expect_node(dir / ("dev/" + cap_node_name(ci)), 235, ci, 0, 0444);
    expect_node(dir / "dev/nvidia-caps/nvidia-cap1", 235, 1, 0, 0400);
    EXPECT_EQ(link_target(dir / ("dev/char/235:" + std::to_string(ci))),
              "../nvidia-caps/nvidia-cap" + std::to_string(ci));
    EXPECT_EQ(lstat_or_die(dir / "dev/nvidia-caps").st_mode & 07777, 0755u);
    // The fixture's access files are plain files, not procfs: the line
    // the driver would take is reported, and the file is as it was.
    EXPECT_EQ(whole_file(access), before);
    auto reported = std::find_if(
        first.result.changes.begin(), first.result.changes.end(), [&](const Change& change) {
            return change.target == Change::Target::AccessFile && access.ends_with(change.name);
        });
    ASSERT_NE(reported, first.result.changes.end()) << outcome_text(first, 1);
    EXPECT_EQ(reported->kind, Change::Kind::Unchanged);
    EXPECT_NE(reported->detail.find("would write DeviceFileModify: 0"), std::string::npos);
    EXPECT_NE(outcome_text(first, 0).find("is not on procfs"), std::string::npos)
        << outcome_text(first, 0);

    // The driver now says 0 everywhere: nothing left to do.
    machine.cap_modify = false;
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    MknodOutcome second = apply(dir.path());
    EXPECT_EQ(second.result.count(Change::Kind::Unchanged), second.result.changes.size())
        << outcome_text(second, 1);

    // GPU 1's GI 7 destroyed: its two nodes and links go; a regular file
    // named like a cap node is not ours.
    std::filesystem::remove_all(dir / "proc/driver/nvidia/capabilities/gpu1/mig/gi7");
    std::ofstream(dir / "dev/nvidia-caps/nvidia-cap9999") << "not a node\n";
    MknodOutcome third = apply(dir.path());
    EXPECT_EQ(third.status, MknodStatus::Done) << outcome_text(third, 1);
    EXPECT_EQ(count_entries(third, Change::Kind::Remove), 4u) << outcome_text(third, 1);
    EXPECT_FALSE(std::filesystem::exists(dir / ("dev/" + cap_node_name(ci))));
    EXPECT_FALSE(std::filesystem::is_symlink(dir / ("dev/char/235:" + std::to_string(ci))));
    EXPECT_TRUE(std::filesystem::exists(dir / "dev/nvidia-caps/nvidia-cap9999"));
    EXPECT_TRUE(
        std::filesystem::exists(dir / ("dev/" + cap_node_name(testing::oracle_ci_minor(1, 8, 0)))));
}

} // namespace gpuinit
