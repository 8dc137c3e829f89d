// gpu-mig pick as root and as a job user: real processes holding a real
// CI cap node (in a private mount namespace, the machine's /proc/PID
// directories are bind-mounted into the fixture's proc), read-only leases
// flocked by an unprivileged uid, and lease files a user planted.
#include "gpuinit/base/text.hpp"
#include "gpuinit/mig/leases.hpp"
#include "machine_fixture.hpp"
#include "nvidia_smi_text.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <iterator>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuinit {

using testing::a100_mig_box;
using testing::oracle_ci_minor;
using testing::run_in_child;
using testing::run_process;
using testing::TempDir;
using testing::write_fixture;

namespace {

constexpr unsigned kCapsMajor = 235; // the fixture's nvidia-caps
constexpr uid_t kJobUser = 65534;

struct RootBox {
    TempDir dir;
    RootBox() {
        ::chmod(dir.path().c_str(), 0755); // job users must reach the fixture
        // The driver already says DeviceFileModify: 0, so sync's cap nodes
        // step has nothing to report about the access files.
        testing::FakeMachine machine = a100_mig_box();
        machine.cap_modify = false;
        EXPECT_TRUE(write_fixture(machine, dir.path()));
        std::string log;
        EXPECT_EQ(run_process({GPUINIT_BIN, "mig", "sync", "--root", dir.path()}, &log), 0) << log;
    }
    std::vector<std::string> as_job_user(std::vector<std::string> argv) const {
        std::vector<std::string> full = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                         "--clear-groups",   GPUINIT_BIN,     "mig"};
        full.insert(full.end(), argv.begin(), argv.end());
        return full;
    }
};

// A process holding an O_PATH fd on a char node (kCapsMajor, minor): what
// the driver gives a process that uses the instance. Killed by the caller.
pid_t hold_cap_node(const std::string& node) {
    pid_t pid = ::fork();
    if (pid == 0) {
        int fd = ::open(node.c_str(), O_PATH | O_CLOEXEC);
        if (fd < 0) {
            _exit(1);
        }
        for (;;) {
            ::pause();
        }
    }
    return pid;
}

// In the calling (forked) process: a private mount namespace where every
// /proc/PID of the machine shows in <fixture>/proc, beside the fixture's
// driver files.
bool mount_machine_pids(const std::string& fixture) {
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        return false;
    }
    auto proc = Sysroot::open("/");
    auto names = proc->list_dir("proc");
    if (!names) {
        return false;
    }
    for (const std::string& name : *names) {
        if (name.find_first_not_of("0123456789") != std::string::npos) {
            continue;
        }
        std::string target = fixture + "/proc/" + name;
        ::mkdir(target.c_str(), 0555);
        // A process may exit meanwhile: only the holder must be there.
        ::mount(("/proc/" + name).c_str(), target.c_str(), nullptr, MS_BIND, nullptr);
    }
    return true;
}

void stop(pid_t pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
}

} // namespace

#define GPUINIT_REQUIRE_SETPRIV()                                                                  \
    do {                                                                                           \
        if (::access("/usr/bin/setpriv", X_OK) != 0) {                                             \
            GTEST_SKIP() << "SKIPPED LOUDLY: /usr/bin/setpriv (util-linux) is missing";            \
        }                                                                                          \
    } while (0)

// A process holding an fd on gpu1/gi7/ci0's CI cap node makes that instance
// busy: pick takes the next one, list names the holder.
TEST(MigPickRoot, AProcessHoldingACiCapNodeMakesThatInstanceBusy) {
    GPUINIT_REQUIRE_ROOT();
    RootBox box;
    TempDir nodes;
    std::string node = nodes / "nvidia-cap";
    ASSERT_EQ(::mknod(node.c_str(), S_IFCHR | 0600, makedev(kCapsMajor, oracle_ci_minor(1, 7, 0))),
              0);
    pid_t holder = hold_cap_node(node);
    ASSERT_GT(holder, 0);
    ::usleep(100'000); // let it open the node
    std::string output;
    int rc = run_in_child(
        [&] {
            if (!mount_machine_pids(box.dir.path())) {
                return 90;
            }
            std::string picked;
            int pick_rc =
                run_process({GPUINIT_BIN, "mig", "pick", "--root", box.dir.path(), "--format",
                             "key", "--hold", "--", "/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES"},
                            &picked);
            std::string listed;
            int list_rc =
                run_process({GPUINIT_BIN, "mig", "list", "--root", box.dir.path()}, &listed);
            std::printf("pick %d: %slist %d:\n%s", pick_rc, picked.c_str(), list_rc,
                        listed.c_str());
            return pick_rc == 0 && picked == "gpu1/gi8/ci0\n" && list_rc == 0 ? 0 : 1;
        },
        &output);
    stop(holder);
    EXPECT_EQ(rc, 0) << output;
    EXPECT_NE(output.find("busy PID " + std::to_string(holder)), std::string::npos) << output;
}

// A job user locks root's lease FIFOs (the driver's 0444 cap nodes let
// everyone use every instance, so everyone may open them): it picks, a
// second pick gets another instance, and the user cannot change the leases.
TEST(MigPickRoot, AJobUserTakesLeasesThroughItsOwnFds) {
    GPUINIT_REQUIRE_ROOT();
    GPUINIT_REQUIRE_SETPRIV();
    RootBox box;
    std::ofstream(box.dir / "etc/gpu-restriction.conf") << "mig-leases-per-user=2\n";
    struct stat st = testing::lstat_or_die(box.dir / "run/gpu-mig/gpu1-gi7-ci0");
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0666u);
    std::string first;
    std::string script = "echo $CUDA_VISIBLE_DEVICES; id -u; exec sleep 30";
    // The first holds gi7 while the second picks.
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t holder = ::fork();
    if (holder == 0) {
        ::dup2(fds[1], 1);
        ::close(fds[0]);
        std::vector<std::string> argv =
            box.as_job_user({"pick", "--root", box.dir.path(), "--format", "key", "--hold", "--",
                             "/bin/sh", "-c", script});
        std::vector<char*> args;
        args.reserve(argv.size() + 1);
        for (std::string& arg : argv) {
            args.push_back(arg.data());
        }
        args.push_back(nullptr);
        ::execv(args[0], args.data());
        _exit(127);
    }
    ::close(fds[1]);
    char buffer[256];
    ssize_t n = 0;
    while (first.find('\n', first.find('\n') + 1) == std::string::npos &&
           (n = ::read(fds[0], buffer, sizeof buffer)) > 0) {
        first.append(buffer, static_cast<size_t>(n));
    }
    ::close(fds[0]);
    EXPECT_EQ(first, "gpu1/gi7/ci0\n65534\n");
    std::string second;
    EXPECT_EQ(
        run_process(box.as_job_user({"pick", "--root", box.dir.path(), "--format", "key", "--hold",
                                     "--", "/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES"}),
                    &second),
        0)
        << second;
    EXPECT_EQ(second, "gpu1/gi8/ci0\n");
    // Root sees the user's lease too.
    std::string listed;
    EXPECT_EQ(run_process({GPUINIT_BIN, "mig", "list", "--root", box.dir.path()}, &listed), 0);
    EXPECT_NE(listed.find("leased"), std::string::npos) << listed;
    stop(holder);
    // The user cannot plant, replace or remove a lease.
    std::string denied;
    EXPECT_NE(run_process({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "/bin/sh", "-c",
                           "cd '" + box.dir / "run/gpu-mig" +
                               "' && { : > planted || rm -f gpu1-gi7-ci0 || exit 1; }"},
                          &denied),
              0)
        << denied;
}

// Lease files a user planted (owned by the user) and symlinks are refused:
// pick skips them with a warning that says to sync; sync replaces them.
TEST(MigPickRoot, PlantedLeaseFilesAndSymlinksAreRefused) {
    GPUINIT_REQUIRE_ROOT();
    RootBox box;
    std::string planted = box.dir / "run/gpu-mig/gpu1-gi7-ci0";
    ASSERT_EQ(::chown(planted.c_str(), kJobUser, kJobUser), 0);
    std::string link = box.dir / "run/gpu-mig/gpu1-gi8-ci0";
    ASSERT_EQ(::unlink(link.c_str()), 0);
    ASSERT_EQ(::symlink(planted.c_str(), link.c_str()), 0);
    std::string output;
    EXPECT_EQ(run_process({GPUINIT_BIN, "mig", "pick", "--root", box.dir.path(), "--format", "key",
                           "--hold", "--", "/bin/sh", "-c", "echo picked $CUDA_VISIBLE_DEVICES"},
                          &output),
              0);
    EXPECT_NE(output.find("picked gpu1/gi9/ci0"), std::string::npos) << output;
    EXPECT_NE(output.find("gpu1-gi7-ci0 is not a lease file as gpu-mig sync makes it"),
              std::string::npos)
        << output;
    EXPECT_NE(output.find("gpu1-gi8-ci0 is a symlink"), std::string::npos) << output;
    // A lease directory a user owns is refused as a whole.
    std::string dir = box.dir / "run/gpu-mig";
    ASSERT_EQ(::chown(dir.c_str(), kJobUser, kJobUser), 0);
    output.clear();
    EXPECT_EQ(run_process({GPUINIT_BIN, "mig", "pick", "--root", box.dir.path(), "--format", "key",
                           "--hold", "--", "/bin/true"},
                          &output),
              3);
    EXPECT_NE(output.find("is owned by uid 65534"), std::string::npos) << output;
    // sync refuses it too (the admin removes it); then it starts afresh.
    EXPECT_EQ(run_process({GPUINIT_BIN, "mig", "sync", "--root", box.dir.path()}, &output), 3);
    ASSERT_EQ(::chown(dir.c_str(), 0, 0), 0);
    output.clear();
    EXPECT_EQ(run_process({GPUINIT_BIN, "mig", "sync", "--root", box.dir.path()}, &output), 0)
        << output;
    EXPECT_NE(output.find("0 created, 2 repaired, 0 removed, 19 kept"), std::string::npos)
        << output;
}

} // namespace gpuinit

namespace gpuinit {

// sync as root: the cap nodes (as gpu-mknod --mig), the leases and the names
// file from nvidia-smi's saved output; a second sync changes nothing; a job
// user, with no nvidia-smi and no NVML, gets MIG UUIDs from the names file
// in pick and in env.
TEST(MigSyncRoot, NodesLeasesAndNamesThatJobUsersRead) {
    GPUINIT_REQUIRE_ROOT();
    GPUINIT_REQUIRE_SETPRIV();
    TempDir dir;
    ::chmod(dir.path().c_str(), 0755);
    testing::FakeMachine machine = a100_mig_box();
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    std::string smi = dir / "smi";
    ::mkdir(smi.c_str(), 0755);
    auto gpus = testing::smi_a100_box([](unsigned minor) { return testing::fake_uuid(minor); });
    std::ofstream(smi + "/L.txt") << testing::smi_list(gpus);
    std::ofstream(smi + "/q.xml") << testing::smi_query_xml(gpus);
    std::ofstream(smi + "/mig-lci.txt") << testing::smi_lci(gpus);
    std::string log;
    ASSERT_EQ(run_process({"/usr/bin/env", "-i", "PATH=/nonexistent", GPUINIT_BIN, "mig", "sync",
                           "--root", dir.path(), "--nvidia-smi-output", smi},
                          &log),
              0)
        << log;
    EXPECT_NE(log.find("21 MIG instances, 21 named"), std::string::npos) << log;
    unsigned ci = oracle_ci_minor(1, 7, 0);
    struct stat st = testing::lstat_or_die(dir / format("dev/nvidia-caps/nvidia-cap%u", ci));
    EXPECT_TRUE(S_ISCHR(st.st_mode));
    EXPECT_EQ(st.st_rdev, makedev(kCapsMajor, ci));
    // The fixture's access files are plain files, not the driver's procfs
    // entries: sync says what it would write and leaves them as they were.
    std::ifstream access(dir / "proc/driver/nvidia/capabilities/gpu1/mig/gi7/ci0/access");
    std::string text((std::istreambuf_iterator<char>(access)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, format("DeviceFileMinor: %u\nDeviceFileMode: 292\nDeviceFileModify: 1\n", ci));
    EXPECT_NE(log.find("44 files like "), std::string::npos) << log; // one warning for all
    EXPECT_NE(log.find(" are not on procfs"), std::string::npos) << log;
    EXPECT_NE(log.find("would write 'DeviceFileModify: 0'"), std::string::npos) << log;
    st = testing::lstat_or_die(dir / "run/gpu-mig/names");
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_mode & 07777, 0444u);

    // The driver now says 0: a second sync has nothing to do.
    machine.cap_modify = false;
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    log.clear();
    ASSERT_EQ(run_process({"/usr/bin/env", "-i", "PATH=/nonexistent", GPUINIT_BIN, "mig", "sync",
                           "--root", dir.path(), "--nvidia-smi-output", smi, "--verbose"},
                          &log),
              0)
        << log;
    EXPECT_NE(log.find("0 created, 0 repaired, 0 removed, 21 kept"), std::string::npos) << log;
    EXPECT_EQ(log.find("created "), std::string::npos) << log;

    // A job user: no nvidia-smi, no NVML, no access to smi/; the names file.
    ::chmod(smi.c_str(), 0700);
    std::vector<std::string> job = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                    "--clear-groups",   "/usr/bin/env",  "-i",
                                    "PATH=/nonexistent"};
    auto as_job = [&](std::vector<std::string> tail) {
        std::vector<std::string> argv = job;
        argv.insert(argv.end(), tail.begin(), tail.end());
        return argv;
    };
    std::string picked;
    ASSERT_EQ(run_process(as_job({GPUINIT_BIN, "mig", "pick", "--root", dir.path(), "--hold", "--",
                                  "/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES"}),
                          &picked),
              0)
        << picked;
    EXPECT_EQ(picked, testing::fake_mig_uuid(1, 7, 0) + "\n");

    std::string conf;
    ASSERT_EQ(run_process({GPUINIT_BIN, "mig", "gres", "--root", dir.path()}, &conf), 0) << conf;
    ::mkdir((dir / "etc/slurm").c_str(), 0755);
    std::ofstream(dir / "etc/slurm/gres.conf") << conf;
    std::string exported;
    ASSERT_EQ(
        run_process(as_job({"SLURM_STEP_GPUS=2", GPUINIT_BIN, "mig", "env", "--root", dir.path()}),
                    &exported),
        0)
        << exported;
    EXPECT_EQ(exported, "export CUDA_VISIBLE_DEVICES=" + testing::fake_mig_uuid(1, 8, 0) + "\n");
}

} // namespace gpuinit

namespace gpuinit {

namespace {

// Starts `argv` as a holder that prints its first line (the picked key)
// and then sleeps; returns its PID and that line.
pid_t start_holder(const std::vector<std::string>& argv, std::string& line,
                   const std::vector<std::string>& env = {}) {
    int fds[2];
    if (::pipe(fds) != 0) {
        return -1;
    }
    pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(fds[1], 1);
        ::close(fds[0]);
        for (const std::string& entry : env) {
            ::putenv(const_cast<char*>(entry.c_str()));
        }
        std::vector<std::string> copy = argv;
        std::vector<char*> args;
        args.reserve(copy.size() + 1);
        for (std::string& arg : copy) {
            args.push_back(arg.data());
        }
        args.push_back(nullptr);
        ::execv(args[0], args.data());
        _exit(127);
    }
    ::close(fds[1]);
    char c = 0;
    while (::read(fds[0], &c, 1) == 1 && c != '\n') {
        line += c;
    }
    ::close(fds[0]);
    return pid;
}

std::vector<std::string> as_user(uid_t uid, gid_t gid, std::vector<std::string> argv) {
    std::vector<std::string> full = {"/usr/bin/setpriv",
                                     "--reuid=" + std::to_string(uid),
                                     "--regid=" + std::to_string(gid),
                                     "--clear-groups",
                                     GPUINIT_BIN,
                                     "mig"};
    full.insert(full.end(), argv.begin(), argv.end());
    return full;
}

} // namespace

// Without a policy the driver's cap nodes are 0444: every user may use
// every instance, and the default mig-leases-per-user (1) is what stops
// one user from holding them all (pick -n 21, or pick after pick); another
// user still finds one.
TEST(MigLeasesRoot, TheDefaultPolicyLetsEachUserHoldOneInstance) {
    GPUINIT_REQUIRE_ROOT();
    GPUINIT_REQUIRE_SETPRIV();
    RootBox box;
    std::string output;
    EXPECT_EQ(run_process(as_user(kJobUser, kJobUser,
                                  {"pick", "--root", box.dir.path(), "-n", "21", "--format", "key",
                                   "--hold", "--", "/bin/true"}),
                          &output),
              6)
        << output;
    EXPECT_NE(output.find("mig-leases-per-user"), std::string::npos) << output;
    std::string first;
    pid_t holder =
        start_holder(as_user(kJobUser, kJobUser,
                             {"pick", "--root", box.dir.path(), "--format", "key", "--hold", "--",
                              "/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES; exec sleep 30"}),
                     first);
    ASSERT_GT(holder, 0);
    EXPECT_EQ(first, "gpu1/gi7/ci0");
    int rc = run_in_child(
        [&] {
            if (!mount_machine_pids(box.dir.path())) {
                return 90;
            }
            std::string again;
            int again_rc = run_process(as_user(kJobUser, kJobUser,
                                               {"pick", "--root", box.dir.path(), "--format", "key",
                                                "--hold", "--", "/bin/true"}),
                                       &again);
            std::string other;
            int other_rc =
                run_process(as_user(kJobUser - 1, kJobUser - 1,
                                    {"pick", "--root", box.dir.path(), "--format", "key", "--hold",
                                     "--", "/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES"}),
                            &other);
            std::printf("again %d: %s\nother %d: %s\n", again_rc, again.c_str(), other_rc,
                        other.c_str());
            return again_rc == 6 &&
                           again.find("you hold 1 MIG lease already") != std::string::npos &&
                           other_rc == 0 && other == "gpu1/gi8/ci0\n"
                       ? 0
                       : 1;
        },
        &output);
    stop(holder);
    EXPECT_EQ(rc, 0) << output;
}

// A MIG rule gives GPU 1's instance 7 to group vision: its cap nodes and
// its lease are root:vision, so a user outside the group picks past it and
// cannot even open its lease to lock it by hand; a member picks it.
TEST(MigLeasesRoot, TheMigRulesGroupDecidesWhoMayLease) {
    GPUINIT_REQUIRE_ROOT();
    GPUINIT_REQUIRE_SETPRIV();
    TempDir dir;
    ::chmod(dir.path().c_str(), 0755);
    testing::FakeMachine machine = a100_mig_box();
    machine.cap_modify = false;
    machine.groups.push_back("vision");
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    std::ofstream(dir / "etc/gpu-restriction.conf") << "gpu=1 gi=7 group=vision\n";
    std::string output;
    ASSERT_EQ(run_process({GPUINIT_BIN, "mig", "sync", "--root", dir.path()}, &output), 0)
        << output;
    gid_t vision = 1000 + static_cast<gid_t>(machine.groups.size()) - 1;
    struct stat st = testing::lstat_or_die(dir / "run/gpu-mig/gpu1-gi7-ci0");
    EXPECT_EQ(st.st_gid, vision);
    EXPECT_EQ(st.st_mode & 07777, 0660u);
    std::string picked;
    EXPECT_EQ(run_process(as_user(kJobUser, kJobUser,
                                  {"pick", "--root", dir.path(), "--format", "key", "--hold", "--",
                                   "/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES"}),
                          &picked),
              0)
        << picked;
    EXPECT_EQ(picked, "gpu1/gi8/ci0\n");
    std::string by_hand;
    EXPECT_NE(run_process({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "/bin/sh", "-c", "exec 3<>'" + dir / "run/gpu-mig/gpu1-gi7-ci0" + "'"},
                          &by_hand),
              0)
        << by_hand;
    picked.clear();
    EXPECT_EQ(run_process(as_user(kJobUser, vision,
                                  {"pick", "--root", dir.path(), "--format", "key", "--hold", "--",
                                   "/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES"}),
                          &picked),
              0)
        << picked;
    EXPECT_EQ(picked, "gpu1/gi7/ci0\n");
}

// Root sees who holds a lease (PID, uid, the Slurm job from its
// environment) and takes it back: the lease is replaced, another job picks
// the instance while the old holder still runs, and release says who held
// it.
TEST(MigLeasesRoot, RootSeesTheHolderAndTakesTheLeaseBack) {
    GPUINIT_REQUIRE_ROOT();
    GPUINIT_REQUIRE_SETPRIV();
    RootBox box;
    std::string first;
    pid_t holder =
        start_holder(as_user(kJobUser, kJobUser,
                             {"pick", "--root", box.dir.path(), "--format", "key", "--hold", "--",
                              "/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES; exec sleep 30"}),
                     first, {"SLURM_JOB_ID=4242"});
    ASSERT_GT(holder, 0);
    ASSERT_EQ(first, "gpu1/gi7/ci0");
    std::string output;
    int rc = run_in_child(
        [&] {
            if (!mount_machine_pids(box.dir.path())) {
                return 90;
            }
            std::string listed;
            int list_rc = run_process(
                {GPUINIT_BIN, "mig", "list", "--root", box.dir.path(), "--json"}, &listed);
            std::string released;
            int release_rc = run_process(
                {GPUINIT_BIN, "mig", "release", "--root", box.dir.path(), "gpu1/gi7/ci0"},
                &released);
            std::string again;
            int again_rc =
                run_process(as_user(kJobUser - 1, kJobUser - 1,
                                    {"pick", "--root", box.dir.path(), "--format", "key", "--hold",
                                     "--", "/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES"}),
                            &again);
            std::printf("list %d: %s\nrelease %d: %s\nagain %d: %s\n", list_rc, listed.c_str(),
                        release_rc, released.c_str(), again_rc, again.c_str());
            std::string pid = std::to_string(holder);
            bool listed_ok = list_rc == 0 &&
                             listed.find("\"holders\":[{\"pid\":" + pid) != std::string::npos &&
                             listed.find("\"uid\":65534") != std::string::npos &&
                             listed.find("\"job\":\"4242\"") != std::string::npos;
            bool released_ok = release_rc == 0 &&
                               released.find("gpu1/gi7/ci0: lease taken back from PID " + pid) !=
                                   std::string::npos &&
                               released.find("job 4242") != std::string::npos;
            return listed_ok && released_ok && again_rc == 0 && again == "gpu1/gi7/ci0\n" ? 0 : 1;
        },
        &output);
    stop(holder);
    EXPECT_EQ(rc, 0) << output;
}

// Taking a lease back replaces its file in root's directory: a user is
// told it needs root, with gpuinit(8)'s "not permitted" (5).
TEST(MigLeasesRoot, ReleaseIsForRootAlone) {
    GPUINIT_REQUIRE_ROOT();
    GPUINIT_REQUIRE_SETPRIV();
    RootBox box;
    std::string output;
    EXPECT_EQ(run_process(as_user(kJobUser, kJobUser,
                                  {"release", "--root", box.dir.path(), "gpu1/gi7/ci0"}),
                          &output),
              5)
        << output;
    EXPECT_NE(output.find("(releasing a lease needs root)"), std::string::npos) << output;
}

} // namespace gpuinit
