// gpu-limit daemon (libgpuinit/limit/src/daemon*.cpp): the registration
// datagram, the trust checks (peer's lock through /proc/<pid>/fdinfo), the
// mapping of processes to groups by registration and by cgroup, dropping the
// dead, external memory, the OOM policy after its grace period, driving the
// compute gate; and the socket under malformed traffic. /proc is a fake tree
// (Sysroot), NVML a fake object, time simulated.
#include "gpuinit/limit/daemon.hpp"
#include "gpuinit/limit/daemon_protocol.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <poll.h>
#include <random>
#include <sched.h>
#include <set>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace gpuinit::limit {

using gpuinit::testing::TempDir;

namespace {

constexpr const char* kUuid = "GPU-aaaaaaaa-1111-2222-3333-444444444444";
constexpr const char* kContainer =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
constexpr uint64_t kOneMiB = 1ull << 20;
constexpr uint64_t kSecond = 1'000'000'000;

void write_file(const std::string& path, const std::string& text) {
    std::string dir = path.substr(0, path.rfind('/'));
    std::string mkdir = "mkdir -p '" + dir + "'";
    ASSERT_EQ(std::system(mkdir.c_str()), 0);
    std::ofstream(path) << text;
}

std::string stat_line(int pid, uint64_t start_time) {
    // Field 22 is the start time; comm with a space and a parenthesis.
    std::string line = std::to_string(pid) + " (my (prog) x) S";
    for (int field = 4; field <= 21; ++field) {
        line += " " + std::to_string(field);
    }
    return line + " " + std::to_string(start_time) + " 0 0\n";
}

class FakeNvml final : public NvmlSource {
  public:
    bool available() const override { return present; }
    std::vector<NvmlDevice> devices() override { return {{0, kUuid}}; }
    ProcessListing processes(unsigned index, std::vector<NvmlProcess>& out,
                             ProcessListDetail& detail) override {
        if (untrusted) {
            detail.problem = "no NVML process list checks out: test";
            return ProcessListing::Untrusted;
        }
        if (index != 0 || !lists) {
            return ProcessListing::Failed;
        }
        out = running;
        return ProcessListing::Listed;
    }
    bool utilization(unsigned /*index*/, uint64_t since_us, std::vector<NvmlSample>& out) override {
        last_since = since_us;
        ++polls;
        // As NVML: only samples newer than the last one seen.
        for (const NvmlSample& sample : samples) {
            if (sample.timestamp_us > since_us) {
                out.push_back(sample);
            }
        }
        return true;
    }
    bool present = true;
    bool lists = true;      // nvmlDeviceGetComputeRunningProcesses exists
    bool untrusted = false; // the lists do not check out
    std::vector<NvmlProcess> running;
    std::vector<NvmlSample> samples;
    uint64_t last_since = 0;
    int polls = 0;
};

class FakeEffects final : public DaemonEffects {
  public:
    uint64_t monotonic_ns() override { return now; }
    uint64_t realtime_us() override { return now / 1000; }
    void log(std::string_view line) override { lines.emplace_back(line); }
    void kill_process(int32_t pid, uint64_t start_time) override {
        killed.emplace_back(pid, start_time);
    }
    void run_oom_script(const std::string& script,
                        const std::vector<std::string>& variables) override {
        scripts.push_back(script);
        script_variables = variables;
    }
    uint64_t now = 1000;
    std::vector<std::string> lines;
    std::vector<std::pair<int32_t, uint64_t>> killed;
    std::vector<std::string> scripts;
    std::vector<std::string> script_variables;
};

// A group with one "application" process (this test process holds its slot
// through `app`), a fake /proc, a fake NVML and the daemon.
class DaemonTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(::mkdir((tmp / "state").c_str(), 0700), 0);
        ASSERT_EQ(::mkdir((tmp / "root").c_str(), 0755), 0);
        ASSERT_EQ(::mkdir((tmp / "root/proc").c_str(), 0755), 0);
        auto opened = Sysroot::open(tmp / "root");
        ASSERT_TRUE(opened);
        root = std::make_unique<Sysroot>(std::move(*opened));
        config.state_dir = tmp / "state";
        config.oom_grace_ns = 5 * kSecond;
        config.oom_script = "/usr/local/bin/notify";
    }

    // Creates the group and claims a slot in it, as the library does.
    void make_group(const std::string& name, uint64_t cap = 1024 * kOneMiB, uint32_t percent = 0) {
        Problem problem;
        ASSERT_TRUE(app.open(config.state_dir.c_str(), name.c_str(), problem)) << problem.text;
        ASSERT_TRUE(app.register_process(problem)) << problem.text;
        ASSERT_EQ(app.attach_device(kUuid, cap, uint64_t{80} * 1024 * kOneMiB, percent, problem), 0)
            << problem.text;
        group = name;
        map_file();
    }

    void map_file() {
        std::string path = config.state_dir + "/" + group + "/state";
        int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        struct stat status {};
        ASSERT_EQ(::fstat(fd, &status), 0);
        state_major = ::major(status.st_dev);
        state_minor = ::minor(status.st_dev);
        state_ino = status.st_ino;
        void* address =
            ::mmap(nullptr, sizeof(StateFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        ASSERT_NE(address, MAP_FAILED);
        file = static_cast<StateFile*>(address);
    }

    void TearDown() override {
        daemon.reset();
        if (file != nullptr) {
            ::munmap(file, sizeof(StateFile));
        }
    }

    // A fake process: stat and cgroup. It has no fdinfo: what proves a
    // slot is the descriptor sent with the request (register_as), never
    // the process's fds.
    void fake_process(int pid, uint64_t start, const std::string& cgroup, int /*holds_slot*/ = -1) {
        std::string base = tmp / ("root/proc/" + std::to_string(pid));
        write_file(base + "/stat", stat_line(pid, start));
        write_file(base + "/cgroup", cgroup);
    }

    void kill_fake(int pid) {
        std::string command = "rm -rf '" + (tmp / ("root/proc/" + std::to_string(pid))) + "'";
        ASSERT_EQ(std::system(command.c_str()), 0);
    }

    DaemonCore& core() {
        if (!daemon) {
            daemon = std::make_unique<DaemonCore>(*root, config, nvml, effects);
        }
        return *daemon;
    }

    std::string request(const std::string& name, int slot) {
        char buffer[kDaemonMaxMessage];
        size_t length = format_register_request(name.c_str(), slot, buffer, sizeof buffer);
        return std::string(buffer, length);
    }

    // A request sent with `fd` beside it (by default the descriptor of
    // `app`, which holds app's slot).
    std::string register_as(int pid, int slot, int fd = -2) {
        std::string text = request(group, slot);
        return core().handle_datagram(text.data(), text.size(), PeerCredentials{pid, 0, 0},
                                      fd == -2 ? app.lock_fd() : fd);
    }

    const PassDevice* device_of(const PassReport& report) {
        for (const PassGroup& entry : report.groups) {
            if (entry.name == group && !entry.devices.empty()) {
                return &entry.devices.front();
            }
        }
        return nullptr;
    }

    TempDir tmp;
    std::unique_ptr<Sysroot> root;
    DaemonConfig config;
    FakeNvml nvml;
    FakeEffects effects;
    std::unique_ptr<DaemonCore> daemon;
    GroupState app;
    std::string group;
    StateFile* file = nullptr;
    unsigned state_major = 0;
    unsigned state_minor = 0;
    uint64_t state_ino = 0;
};

} // namespace

// --- the datagram ----------------------------------------------------------

TEST(DaemonProtocol, ParsesTheRequestExactly) {
    RegisterRequest request;
    const char* reason = nullptr;
    std::string good = "GPULIMIT2 REGISTER job-1.a_b 1023\n";
    ASSERT_TRUE(parse_register_request(good.data(), good.size(), request, reason));
    EXPECT_STREQ(request.group, "job-1.a_b");
    EXPECT_EQ(request.slot, 1023);
    const char* bad[] = {"",
                         "GPULIMIT2 REGISTER job 1",
                         "GPULIMIT2 REGISTER job 1024\n",
                         "GPULIMIT2 REGISTER job 01\n",
                         "GPULIMIT2 REGISTER job -1\n",
                         "GPULIMIT2 REGISTER job  1\n",
                         "GPULIMIT2 REGISTER .. 1\n",
                         "GPULIMIT2 REGISTER a/b 1\n",
                         "GPULIMIT2 REGISTER job\n",
                         "GPULIMIT3 REGISTER job 1\n",
                         "GPULIMIT2 REGISTER job 1\n\n",
                         "GPULIMIT2 REGISTER job 1x\n"};
    for (const char* text : bad) {
        EXPECT_FALSE(parse_register_request(text, std::strlen(text), request, reason)) << text;
        EXPECT_NE(reason, nullptr);
    }
    std::string nul("GPULIMIT2 REGISTER jo\0b 1\n", 26);
    EXPECT_FALSE(parse_register_request(nul.data(), nul.size(), request, reason));
    std::string long_name = "GPULIMIT2 REGISTER " + std::string(65, 'a') + " 1\n";
    EXPECT_FALSE(parse_register_request(long_name.data(), long_name.size(), request, reason));
}

TEST(DaemonProtocol, FormatRoundTrips) {
    char buffer[kDaemonMaxMessage];
    size_t length = format_register_request(kContainer, 7, buffer, sizeof buffer);
    ASSERT_GT(length, 0u);
    RegisterRequest request;
    const char* reason = nullptr;
    ASSERT_TRUE(parse_register_request(buffer, length, request, reason));
    EXPECT_STREQ(request.group, kContainer);
    EXPECT_EQ(request.slot, 7);
    EXPECT_EQ(format_register_request("a/b", 1, buffer, sizeof buffer), 0u);
    EXPECT_EQ(format_register_request("ok", kMaxSlots, buffer, sizeof buffer), 0u);
    EXPECT_EQ(format_register_request("ok", 1, buffer, 10), 0u);
}

// Random bytes, and random mutations of a good request: never a crash, and
// whatever parses formats back to the very same bytes (nothing else is let
// through).
TEST(DaemonProtocol, FuzzNeverAcceptsAnythingButCanonicalRequests) {
    std::mt19937 random(1234);
    std::string good = "GPULIMIT2 REGISTER abc 12\n";
    int accepted = 0;
    for (int round = 0; round < 200000; ++round) {
        std::string text;
        if (round % 2 == 0) {
            text.resize(random() % 140);
            for (char& c : text) {
                c = static_cast<char>(random() % 256);
            }
        } else {
            text = good;
            for (int edits = 1 + static_cast<int>(random() % 3); edits > 0; --edits) {
                size_t at = random() % text.size();
                switch (random() % 3) {
                case 0:
                    text[at] = static_cast<char>(random() % 256);
                    break;
                case 1:
                    text.erase(at, 1);
                    break;
                default:
                    text.insert(at, 1, static_cast<char>(random() % 256));
                }
                if (text.empty()) {
                    break;
                }
            }
        }
        RegisterRequest request;
        const char* reason = nullptr;
        if (parse_register_request(text.data(), text.size(), request, reason)) {
            ++accepted;
            char again[kDaemonMaxMessage];
            size_t length =
                format_register_request(request.group, request.slot, again, sizeof again);
            ASSERT_EQ(std::string(again, length), text);
        }
    }
    EXPECT_GT(accepted, 0); // the mutations do hit other valid requests
}

// --- pure helpers ----------------------------------------------------------

TEST(DaemonHelpers, StartTimeAfterTheLastParenthesis) {
    EXPECT_EQ(parse_start_time(stat_line(42, 987654)), 987654u);
    EXPECT_FALSE(parse_start_time("42 (x) S 1 2 3"));
    EXPECT_FALSE(parse_start_time("garbage"));
}

TEST(DaemonHelpers, FdinfoLockLines) {
    std::string text = "pos:\t0\nflags:\t02100002\nmnt_id:\t27\nino:\t10953017\n"
                       "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:10953017 1099511631877 "
                       "1099511631877\n";
    EXPECT_TRUE(fdinfo_holds_lock(text, 0xfe, 0, 10953017, 1099511631877));
    EXPECT_FALSE(fdinfo_holds_lock(text, 0xfe, 0, 10953017, 1099511631878)); // another slot
    EXPECT_FALSE(fdinfo_holds_lock(text, 0xfe, 1, 10953017, 1099511631877)); // another device
    EXPECT_FALSE(fdinfo_holds_lock(text, 0xfe, 0, 10953018, 1099511631877)); // another file
    std::string read_lock = "lock:\t1: OFDLCK ADVISORY  READ -1 fe:00:5 10 10\n";
    EXPECT_FALSE(fdinfo_holds_lock(read_lock, 0xfe, 0, 5, 10));
    std::string posix = "lock:\t1: POSIX  ADVISORY  WRITE 99 fe:00:5 10 10\n";
    EXPECT_FALSE(fdinfo_holds_lock(posix, 0xfe, 0, 5, 10));
    std::string to_end = "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:5 0 EOF\n";
    EXPECT_TRUE(fdinfo_holds_lock(to_end, 0xfe, 0, 5, 1ull << 41));
    EXPECT_FALSE(fdinfo_holds_lock("lock: OFDLCK WRITE", 0xfe, 0, 5, 10));
    // The kernel prints the inode with %lu: a zero-padded one is not its line.
    std::string padded = "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:0005 0 EOF\n";
    EXPECT_FALSE(fdinfo_holds_lock(padded, 0xfe, 0, 5, 10));
    EXPECT_TRUE(
        fdinfo_holds_lock("lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:0 0 EOF\n", 0xfe, 0, 0, 10));
}

// gpu-limit status checks pids a state file names, which the group writes:
// what it reads over all of them is bounded, not only per pid.
TEST(DaemonHelpers, ProcessHoldsLockWithinABudget) {
    TempDir tmp;
    for (int fd = 0; fd < 3; ++fd) {
        write_file(tmp / ("proc/42/fdinfo/" + std::to_string(fd)), "pos:\t0\nflags:\t02\n");
    }
    write_file(tmp / "proc/42/fdinfo/9",
               "pos:\t0\nlock:\t1: OFDLCK ADVISORY  WRITE -1 fe:01:77 1000 1000\n");
    auto root = Sysroot::open(tmp.path());
    ASSERT_TRUE(root.ok());
    EXPECT_TRUE(process_holds_lock(*root, 42, 0xfe, 1, 77, 1000));
    EXPECT_FALSE(process_holds_lock(*root, 42, 0xfe, 1, 77, 1001));
    EXPECT_FALSE(process_holds_lock(*root, 43, 0xfe, 1, 77, 1000)); // no such process
    FdinfoBudget enough{4, 1u << 20};
    EXPECT_TRUE(process_holds_lock(*root, 42, 0xfe, 1, 77, 1000, &enough));
    FdinfoBudget spent{4, 1u << 20};
    EXPECT_FALSE(process_holds_lock(*root, 42, 0xfe, 1, 77, 1001, &spent));
    EXPECT_EQ(spent.files, 0u); // each of the four files once
    EXPECT_FALSE(process_holds_lock(*root, 42, 0xfe, 1, 77, 1000, &spent));
    FdinfoBudget few_bytes{4, 30}; // the lock line's file is longer
    EXPECT_FALSE(process_holds_lock(*root, 42, 0xfe, 1, 77, 1000, &few_bytes));
}

TEST(DaemonHelpers, CgroupWholeWordMatch) {
    std::string id = kContainer;
    EXPECT_TRUE(cgroup_names_group("0::/system.slice/docker-" + id + ".scope\n", id));
    EXPECT_TRUE(cgroup_names_group("12:memory:/docker/" + id + "\n0::/\n", id));
    EXPECT_TRUE(cgroup_names_group("0::/machine.slice/libpod-" + id + ".scope/container\n", id));
    EXPECT_FALSE(cgroup_names_group("0::/docker/" + id + "ff\n", id));
    EXPECT_FALSE(cgroup_names_group("0::/docker/aa" + id + "\n", id));
    EXPECT_FALSE(cgroup_names_group("0::/user.slice\n", id));
    EXPECT_FALSE(cgroup_names_group(id + "\n", id)); // not in the path field
    EXPECT_TRUE(container_id_like(id));
    EXPECT_TRUE(container_id_like("0123456789ab"));
    EXPECT_FALSE(container_id_like("job1"));
    EXPECT_FALSE(container_id_like("0123456789AB"));
    EXPECT_FALSE(container_id_like(id + "0"));
}

// --- registration ----------------------------------------------------------

TEST_F(DaemonTest, RegistrationNeedsTheSentDescriptorToHoldTheSlotLock) {
    make_group("job1");
    int slot = app.own_slot();
    fake_process(4242, 555, "0::/\n", slot);
    fake_process(4343, 556, "0::/\n");
    // Another open of the same file, holding nothing.
    UniqueFd other(::open((config.state_dir + "/job1/state").c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(other.valid());
    EXPECT_EQ(register_as(4343, slot, other.get()), "ERR refused\n");
    EXPECT_EQ(register_as(4343, slot, -1), "ERR refused\n");               // no descriptor
    EXPECT_EQ(register_as(4242, (slot + 1) % kMaxSlots), "ERR refused\n"); // not live
    // A live slot held by another process of the group: app's descriptor
    // does not hold it.
    GroupState second;
    Problem problem;
    ASSERT_TRUE(second.open(config.state_dir.c_str(), "job1", problem)) << problem.text;
    ASSERT_TRUE(second.register_process(problem)) << problem.text;
    EXPECT_EQ(register_as(4242, second.own_slot()), "ERR refused\n");
    // Something else than the state file.
    UniqueFd elsewhere(::open(config.state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    EXPECT_EQ(register_as(4242, slot, elsewhere.get()), "ERR refused\n");
    EXPECT_EQ(register_as(0, slot), "ERR no-peer-pid\n");
    // The owner, with no /proc/<pid>/fdinfo at all: the descriptor is the
    // proof.
    EXPECT_EQ(register_as(4242, slot), "OK\n");
    EXPECT_EQ(core().registrations("job1"), (std::map<int, int32_t>{{slot, 4242}}));
    EXPECT_EQ(file->slots[slot].host_pid.load(), 4242);
    EXPECT_EQ(register_as(4343, second.own_slot(), second.lock_fd()), "OK\n");
}

// A read lock proves nothing: any open of the file, a read-only one too,
// can take one on a live slot whose owner let go of it (it died, and the
// daemon has not dropped it yet), and several can hold it at once. Only the
// owner's write lock counts.
TEST_F(DaemonTest, AReadLockOnASlotProvesNothing) {
    make_group("job1");
    const int slot = app.own_slot();
    fake_process(4343, 556, "0::/\n");
    const off_t offset = static_cast<off_t>(file->header.lock_base) + slot;
    struct flock lock {};
    lock.l_whence = SEEK_SET;
    lock.l_start = offset;
    lock.l_len = 1;
    lock.l_type = F_UNLCK;
    ASSERT_EQ(::fcntl(app.lock_fd(), F_OFD_SETLK, &lock), 0); // the owner is gone
    UniqueFd reader(::open((config.state_dir + "/job1/state").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(reader.valid());
    lock.l_type = F_RDLCK;
    ASSERT_EQ(::fcntl(reader.get(), F_OFD_SETLK, &lock), 0);
    EXPECT_EQ(register_as(4343, slot, reader.get()), "ERR refused\n");
    EXPECT_TRUE(core().registrations("job1").empty());
}

// A sender that cannot prove a slot learns nothing: not whether the group
// exists, nor which of its slots are live.
TEST_F(DaemonTest, RefusalsSayNothingAboutTheGroup) {
    make_group("job1");
    fake_process(4242, 555, "0::/\n");
    int live = app.own_slot();
    int dead = (live + 1) % kMaxSlots;
    UniqueFd other(::open((config.state_dir + "/job1/state").c_str(), O_RDWR | O_CLOEXEC));
    const std::string answers[] = {
        register_as(4242, live, other.get()), register_as(4242, dead, other.get()),
        register_as(4242, live, -1),
        core().handle_datagram(request("nosuch", live).data(), request("nosuch", live).size(),
                               PeerCredentials{4242, 0, 0}, other.get())};
    for (const std::string& reply : answers) {
        EXPECT_EQ(reply, "ERR refused\n");
    }
}

TEST(DaemonProtocol, VersionOneIsRefusedAsOld) {
    RegisterRequest request;
    const char* reason = nullptr;
    std::string old = "GPULIMIT1 REGISTER job 1\n";
    EXPECT_FALSE(parse_register_request(old.data(), old.size(), request, reason));
    EXPECT_STREQ(reason, "old-protocol");
}

TEST_F(DaemonTest, RegistrationNeverCreatesAGroup) {
    make_group("job1");
    std::string text = request("nosuch", 3);
    EXPECT_EQ(
        core().handle_datagram(text.data(), text.size(), PeerCredentials{1, 0, 0}, app.lock_fd()),
        "ERR refused\n");
    struct stat status {};
    EXPECT_NE(::lstat((config.state_dir + "/nosuch").c_str(), &status), 0);
    std::string garbage = "hello";
    EXPECT_EQ(core().handle_datagram(garbage.data(), garbage.size(), PeerCredentials{1, 0, 0}, -1),
              "ERR unknown-request\n");
}

// A process of group A that holds A's slot cannot register into group B,
// even at the same slot number: its lock is on A's file.
TEST_F(DaemonTest, RegistrationCannotReachAnotherGroup) {
    make_group("groupa");
    fake_process(4242, 555, "0::/\n");
    GroupState other;
    Problem problem;
    ASSERT_TRUE(other.open(config.state_dir.c_str(), "groupb", problem)) << problem.text;
    ASSERT_TRUE(other.register_process(problem));
    std::string text = request("groupb", other.own_slot());
    EXPECT_EQ(core().handle_datagram(text.data(), text.size(), PeerCredentials{4242, 0, 0},
                                     app.lock_fd()),
              "ERR refused\n");
    EXPECT_TRUE(core().registrations("groupb").empty());
}

TEST_F(DaemonTest, DeadProcessIsDropped) {
    make_group("job1");
    int slot = app.own_slot();
    fake_process(4242, 555, "0::/\n", slot);
    ASSERT_EQ(register_as(4242, slot), "OK\n");
    core().sample();
    EXPECT_EQ(core().registrations("job1").size(), 1u);
    // The pid is reused by another process: not the registrant any more.
    fake_process(4242, 999, "0::/\n", slot);
    core().sample();
    EXPECT_TRUE(core().registrations("job1").empty());
    EXPECT_EQ(file->slots[slot].host_pid.load(), 0);
    // Registered again, then gone entirely.
    ASSERT_EQ(register_as(4242, slot), "OK\n");
    kill_fake(4242);
    core().sample();
    EXPECT_TRUE(core().registrations("job1").empty());
}

TEST_F(DaemonTest, ReleasedSlotIsDropped) {
    make_group("job1");
    int slot = app.own_slot();
    fake_process(4242, 555, "0::/\n", slot);
    ASSERT_EQ(register_as(4242, slot), "OK\n");
    app.close(); // the process let go of its slot (exit)
    core().sample();
    EXPECT_TRUE(core().registrations("job1").empty());
}

// --- mapping by cgroup and registration, memory ---------------------------

TEST_F(DaemonTest, ProcessesFoundByCgroupAndByRegistration) {
    make_group(kContainer);
    int slot = app.own_slot();
    fake_process(4242, 555, "0::/\n", slot);
    ASSERT_EQ(register_as(4242, slot), "OK\n");
    fake_process(5000, 600, std::string("0::/system.slice/docker-") + kContainer + ".scope\n");
    fake_process(6000, 601, "0::/system.slice/docker-ffffffffffffffffffff.scope\n");
    nvml.running = {{4242, 10 * kOneMiB}, {5000, 20 * kOneMiB}, {6000, 40 * kOneMiB}, {7000, 1}};
    PassReport report = core().sample();
    const PassDevice* device = device_of(report);
    ASSERT_NE(device, nullptr);
    std::map<int32_t, bool> found;
    for (const PassProcess& process : device->processes) {
        found[process.pid] = process.registered;
    }
    EXPECT_EQ(found, (std::map<int32_t, bool>{{4242, true}, {5000, false}}));
    EXPECT_EQ(device->measured, 30 * kOneMiB);
    // A process that leaves the GPU is not the group's any more.
    nvml.running = {{4242, 10 * kOneMiB}};
    report = core().sample();
    ASSERT_NE(device_of(report), nullptr);
    EXPECT_EQ(device_of(report)->processes.size(), 1u);
}

// F6: a GPU process first seen before its group's state file exists is
// looked up again once groups change, not left out of the accounting for
// as long as it runs.
TEST_F(DaemonTest, ANoGroupAnswerIsLookedUpAgainWhenGroupsChange) {
    fake_process(5000, 600, std::string("0::/system.slice/docker-") + kContainer + ".scope\n");
    nvml.running = {{5000, 20 * kOneMiB}};
    PassReport report = core().sample();
    EXPECT_TRUE(report.groups.empty());
    make_group(kContainer);
    report = core().sample();
    const PassDevice* device = device_of(report);
    ASSERT_NE(device, nullptr);
    ASSERT_EQ(device->processes.size(), 1u);
    EXPECT_EQ(device->processes.front().pid, 5000);
    EXPECT_EQ(device->measured, 20 * kOneMiB);
}

TEST_F(DaemonTest, ShortGroupNamesAreNotMatchedByCgroup) {
    make_group("job1");
    fake_process(5000, 600, "0::/user.slice/job1.scope\n");
    nvml.running = {{5000, 20 * kOneMiB}};
    PassReport report = core().sample();
    ASSERT_NE(device_of(report), nullptr);
    EXPECT_TRUE(device_of(report)->processes.empty());
}

TEST_F(DaemonTest, ExternalMemoryIsChargedAndUncharged) {
    make_group(kContainer, 4096 * kOneMiB);
    ASSERT_EQ(app.charge(0, 100 * kOneMiB), Admission::Admitted);
    fake_process(5000, 600, std::string("0::/docker/") + kContainer + "\n");
    nvml.running = {{5000, 300 * kOneMiB}};
    PassReport report = core().sample();
    ASSERT_NE(device_of(report), nullptr);
    EXPECT_EQ(device_of(report)->counted, 100 * kOneMiB);
    EXPECT_EQ(device_of(report)->external, 200 * kOneMiB);
    EXPECT_EQ(app.group_used(0), 300 * kOneMiB);
    EXPECT_EQ(file->header.compute[0].external_bytes.load(), 200 * kOneMiB);
    // Less outside the interposer: part is given back.
    nvml.running = {{5000, 150 * kOneMiB}};
    core().sample();
    EXPECT_EQ(app.group_used(0), 150 * kOneMiB);
    // The process left the GPU: all of it.
    nvml.running = {};
    core().sample();
    EXPECT_EQ(app.group_used(0), 100 * kOneMiB);
    EXPECT_EQ(file->header.compute[0].external_bytes.load(), 0u);
    // The daemon stopping returns whatever it charged.
    nvml.running = {{5000, 300 * kOneMiB}};
    core().sample();
    EXPECT_EQ(app.group_used(0), 300 * kOneMiB);
    daemon.reset();
    EXPECT_EQ(app.group_used(0), 100 * kOneMiB);
}

// Process lists that do not check out (a layout no NVML has): what was
// charged from them is returned, nothing more is charged, and the daemon
// says so once, and again when they check out again.
TEST_F(DaemonTest, UntrustedProcessListsChargeNothing) {
    make_group(kContainer, 4096 * kOneMiB);
    ASSERT_EQ(app.charge(0, 100 * kOneMiB), Admission::Admitted);
    fake_process(5000, 600, std::string("0::/docker/") + kContainer + "\n");
    nvml.running = {{5000, 300 * kOneMiB}};
    core().sample();
    EXPECT_EQ(app.group_used(0), 300 * kOneMiB);
    nvml.untrusted = true;
    PassReport report = core().sample();
    EXPECT_EQ(report.process_lists_problem, "no NVML process list checks out: test");
    ASSERT_EQ(report.nvml_devices.size(), 1U);
    EXPECT_EQ(report.nvml_devices[0].listing, ProcessListing::Untrusted);
    ASSERT_NE(device_of(report), nullptr);
    EXPECT_EQ(device_of(report)->external, 0U);
    EXPECT_EQ(app.group_used(0), 100 * kOneMiB);
    EXPECT_EQ(file->header.compute[0].external_bytes.load(), 0U);
    core().sample();
    auto said = [&](const std::string& text) {
        return std::count_if(
            effects.lines.begin(), effects.lines.end(),
            [&](const std::string& line) { return line.find(text) != std::string::npos; });
    };
    EXPECT_EQ(said("memory outside the interposer is not charged"), 1);
    nvml.untrusted = false;
    report = core().sample();
    EXPECT_TRUE(report.process_lists_problem.empty());
    EXPECT_EQ(app.group_used(0), 300 * kOneMiB);
    EXPECT_EQ(said("check out again"), 1);
}

TEST_F(DaemonTest, WithoutNvmlOnlyRegistrations) {
    make_group(kContainer);
    nvml.present = false;
    fake_process(5000, 600, std::string("0::/docker/") + kContainer + "\n");
    nvml.running = {{5000, 300 * kOneMiB}};
    PassReport report = core().sample();
    EXPECT_FALSE(report.nvml);
    EXPECT_EQ(app.group_used(0), 0u);
    int slot = app.own_slot();
    fake_process(4242, 555, "0::/\n", slot);
    EXPECT_EQ(register_as(4242, slot), "OK\n");
}

// --- OOM policy ------------------------------------------------------------

TEST_F(DaemonTest, OomPolicyFiresAfterTheGracePeriodAndNotBefore) {
    make_group(kContainer, 1024 * kOneMiB);
    int slot = app.own_slot();
    fake_process(4242, 555, "0::/\n", slot);
    ASSERT_EQ(register_as(4242, slot), "OK\n");
    fake_process(5000, 600, std::string("0::/docker/") + kContainer + "\n");
    nvml.running = {{4242, 100 * kOneMiB}, {5000, 2048 * kOneMiB}};
    effects.now = 10 * kSecond;
    PassReport report = core().sample();
    ASSERT_NE(device_of(report), nullptr);
    EXPECT_TRUE(device_of(report)->over_cap);
    for (uint64_t t = 11; t < 15; ++t) {
        effects.now = t * kSecond;
        EXPECT_TRUE(core().sample().actions.empty()) << t;
    }
    EXPECT_TRUE(effects.killed.empty());
    EXPECT_TRUE(effects.scripts.empty());
    effects.now = 15 * kSecond;
    report = core().sample();
    EXPECT_FALSE(report.actions.empty());
    ASSERT_EQ(effects.scripts, std::vector<std::string>{"/usr/local/bin/notify"});
    std::set<std::string> variables(effects.script_variables.begin(),
                                    effects.script_variables.end());
    EXPECT_EQ(variables.count(std::string("GPU_LIMIT_OOM_DEVICE=") + kUuid), 1u);
    EXPECT_EQ(variables.count("GPU_LIMIT_OOM_CAP=" + std::to_string(1024 * kOneMiB)), 1u);
    EXPECT_EQ(variables.count("GPU_LIMIT_OOM_USAGE=" + std::to_string(2148 * kOneMiB)), 1u);
    EXPECT_EQ(variables.count(std::string("GPU_LIMIT_OOM_GROUP=") + kContainer), 1u);
    std::set<std::pair<int32_t, uint64_t>> killed(effects.killed.begin(), effects.killed.end());
    EXPECT_EQ(killed, (std::set<std::pair<int32_t, uint64_t>>{{4242, 555}, {5000, 600}}));
    // One line per action: the finding, the script, each kill.
    EXPECT_EQ(report.actions.size(), 4u);
}

TEST_F(DaemonTest, OomGraceRestartsWhenUsageDropsBelowTheCap) {
    make_group(kContainer, 1024 * kOneMiB);
    fake_process(5000, 600, std::string("0::/docker/") + kContainer + "\n");
    nvml.running = {{5000, 2048 * kOneMiB}};
    effects.now = 10 * kSecond;
    core().sample();
    effects.now = 14 * kSecond;
    nvml.running = {{5000, 10 * kOneMiB}};
    core().sample();
    nvml.running = {{5000, 2048 * kOneMiB}};
    effects.now = 16 * kSecond;
    core().sample();
    effects.now = 20 * kSecond;
    EXPECT_TRUE(core().sample().actions.empty());
    EXPECT_TRUE(effects.killed.empty());
    effects.now = 21 * kSecond;
    EXPECT_FALSE(core().sample().actions.empty());
    EXPECT_EQ(effects.killed.size(), 1u);
}

// --- compute ---------------------------------------------------------------

TEST_F(DaemonTest, StepsDriveTheGate) {
    make_group(kContainer, 1024 * kOneMiB, 25);
    fake_process(5000, 600, std::string("0::/docker/") + kContainer + "\n");
    nvml.running = {{5000, 1 * kOneMiB}};
    ComputeRecord& record = file->header.compute[0];
    ASSERT_EQ(record.cap_percent.load(), 25u);
    bool closed_once = false;
    for (int step = 0; step < 40; ++step) {
        effects.now = 1 * kSecond + static_cast<uint64_t>(step) * 100'000'000;
        nvml.samples = {{5000, 100, effects.now / 1000}}; // busy the whole window
        PassReport report = core().sample();
        ASSERT_NE(device_of(report), nullptr);
        EXPECT_TRUE(device_of(report)->driven);
        EXPECT_EQ(record.driver.load(), 2u);
        EXPECT_EQ(record.heartbeat_ns.load(), effects.now);
        closed_once = closed_once || record.gate.load() == 1;
    }
    // A group busy all the time at a cap of 25%: the gate must close.
    EXPECT_TRUE(closed_once);
    EXPECT_TRUE(app.daemon_lock_held());
    EXPECT_GT(record.busy_ns.load(), 0u);
    // Idle: it opens again (the controller's own settling is compute's
    // tests'; here only that the daemon passes the decision on).
    nvml.samples = {};
    bool opened = false;
    for (int step = 40; step < 200 && !opened; ++step) {
        effects.now = 1 * kSecond + static_cast<uint64_t>(step) * 100'000'000;
        PassReport report = core().sample();
        opened = record.gate.load() == 0;
        ASSERT_NE(device_of(report), nullptr);
        EXPECT_EQ(device_of(report)->gate_open, opened);
    }
    EXPECT_TRUE(opened);
    // The daemon gone: the gate is open and handed back.
    daemon.reset();
    EXPECT_EQ(record.driver.load(), 0u);
    EXPECT_EQ(record.gate.load(), 0u);
    EXPECT_FALSE(app.daemon_lock_held());
}

// An NVML without the process list: the sampled processes still drive the
// gate; memory is left alone.
TEST_F(DaemonTest, WithoutAProcessListSamplesStillDrive) {
    make_group(kContainer, 1024 * kOneMiB, 10);
    fake_process(5000, 600, std::string("0::/docker/") + kContainer + "\n");
    nvml.lists = false;
    // The daemon starts: samples count from then on.
    effects.now = kSecond;
    core().sample();
    bool closed_once = false;
    for (int step = 1; step <= 40; ++step) {
        effects.now = kSecond + static_cast<uint64_t>(step) * 100'000'000;
        nvml.samples = {{5000, 100, effects.now / 1000}};
        PassReport report = core().sample();
        ASSERT_NE(device_of(report), nullptr);
        ASSERT_EQ(device_of(report)->processes.size(), 1u);
        EXPECT_EQ(device_of(report)->external, 0u);
        closed_once = closed_once || !device_of(report)->gate_open;
    }
    EXPECT_TRUE(closed_once);
    EXPECT_EQ(app.group_used(0), 0u);
}

// Between passes the daemon steps every control period (25 ms), as the
// in-process driver does, and reads NVML's samples at most every other step;
// the busy time of a process mapped at the last pass counts.
TEST_F(DaemonTest, StepsEveryControlPeriodBetweenPasses) {
    make_group(kContainer, 1024 * kOneMiB, 25);
    fake_process(5000, 600, std::string("0::/docker/") + kContainer + "\n");
    nvml.running = {{5000, 1 * kOneMiB}};
    ComputeRecord& record = file->header.compute[0];
    effects.now = kSecond;
    nvml.samples = {{5000, 100, effects.now / 1000}};
    core().sample();
    ASSERT_EQ(record.driver.load(), 2u);
    int polls = nvml.polls;
    uint64_t busy = record.busy_ns.load();
    bool closed_once = false;
    for (int step = 1; step <= 40; ++step) {
        effects.now = kSecond + static_cast<uint64_t>(step) * kControlPeriodNs;
        nvml.samples = {{5000, 100, effects.now / 1000}};
        core().step_compute();
        EXPECT_EQ(record.heartbeat_ns.load(), effects.now);
        EXPECT_EQ(record.driver.load(), 2u);
        closed_once = closed_once || record.gate.load() == 1;
    }
    EXPECT_EQ(nvml.polls - polls, 20); // every other step
    EXPECT_GT(record.busy_ns.load(), busy);
    EXPECT_TRUE(closed_once);
}

// The daemon taking a gate over from a live in-process driver (fresh
// heartbeat) carries its balance on: the group's debt is not forgiven. From
// a driver long gone (stale heartbeat) it starts afresh.
TEST_F(DaemonTest, TakeoverFromALiveDriverResumesItsBalance) {
    make_group(kContainer, 1024 * kOneMiB, 25);
    ComputeRecord& record = file->header.compute[0];
    constexpr int64_t kDebt = -500'000'000;
    effects.now = 10 * kSecond;
    record.driver.store(1);
    record.tokens_ns.store(kDebt);
    record.heartbeat_ns.store(effects.now - kControlPeriodNs);
    PassReport report = core().sample();
    ASSERT_NE(device_of(report), nullptr);
    ASSERT_TRUE(device_of(report)->driven);
    EXPECT_EQ(record.driver.load(), 2u);
    EXPECT_LE(record.tokens_ns.load(), kDebt + static_cast<int64_t>(kControlPeriodNs));
    EXPECT_FALSE(device_of(report)->gate_open);
    EXPECT_EQ(record.gate.load(), 1u);
    // Idle, the debt is paid back at the cap's rate: still closed a control
    // period later.
    effects.now += kControlPeriodNs;
    core().step_compute();
    EXPECT_EQ(record.gate.load(), 1u);
    EXPECT_LT(record.tokens_ns.load(), 0);

    // A driver gone long ago: its debt does not carry over.
    daemon.reset();
    record.driver.store(1);
    record.tokens_ns.store(kDebt);
    effects.now += 10 * kSecond;
    record.heartbeat_ns.store(effects.now - 10 * kStaleHeartbeatNs);
    report = core().sample();
    ASSERT_NE(device_of(report), nullptr);
    ASSERT_TRUE(device_of(report)->driven);
    EXPECT_GE(record.tokens_ns.load(), 0);
}

// NVML keeps seconds of samples: those from before the daemon started (an
// in-process driver charged them) are not the daemon's to charge; only
// samples from its start on count.
TEST_F(DaemonTest, SamplesFromBeforeTheDaemonStartedAreNotCharged) {
    make_group(kContainer, 1024 * kOneMiB, 25);
    // Registered before the first pass: its samples count from the first
    // poll on.
    fake_process(5000, 600, "0::/\n", app.own_slot());
    ASSERT_EQ(register_as(5000, app.own_slot()), "OK\n");
    nvml.running = {{5000, 1 * kOneMiB}};
    ComputeRecord& record = file->header.compute[0];
    effects.now = 10 * kSecond;
    const uint64_t start_us = effects.now / 1000;
    // Two seconds of history, all busy, before the daemon.
    for (uint64_t at = start_us - 2'000'000; at < start_us; at += 100'000) {
        nvml.samples.push_back({5000, 100, at});
    }
    core().sample(); // its first poll sees no new samples
    EXPECT_EQ(nvml.last_since, start_us);
    for (int step = 1; step <= 4; ++step) {
        effects.now += kControlPeriodNs;
        core().step_compute();
    }
    EXPECT_EQ(record.busy_ns.load(), 0u);
    EXPECT_EQ(record.gate.load(), 0u);
    // A sample after the start counts.
    nvml.samples.push_back({5000, 100, effects.now / 1000});
    effects.now += kControlPeriodNs;
    core().step_compute();
    effects.now += kControlPeriodNs;
    core().step_compute();
    EXPECT_GT(record.busy_ns.load(), 0u);
}

// A sample stamped about 2^64 us (a real driver returned one): ignored, so
// the next query still asks for samples after the last real one and the
// samples after it count.
TEST_F(DaemonTest, ASampleFromTheFarFutureIsIgnored) {
    make_group(kContainer, 1024 * kOneMiB, 25);
    fake_process(5000, 600, "0::/\n", app.own_slot());
    ASSERT_EQ(register_as(5000, app.own_slot()), "OK\n");
    nvml.running = {{5000, 1 * kOneMiB}};
    ComputeRecord& record = file->header.compute[0];
    effects.now = 10 * kSecond;
    core().sample();
    nvml.samples.push_back({5000, 0, UINT64_MAX - 5});
    effects.now += 2 * kControlPeriodNs;
    core().step_compute();
    const uint64_t before = nvml.last_since;
    EXPECT_LT(before, effects.now / 1000 + 1'000'000);
    nvml.samples.push_back({5000, 100, effects.now / 1000});
    effects.now += 2 * kControlPeriodNs;
    core().step_compute();
    effects.now += 2 * kControlPeriodNs;
    core().step_compute();
    EXPECT_LT(nvml.last_since, effects.now / 1000 + 1'000'000);
    EXPECT_GT(record.busy_ns.load(), 0u);
}

TEST_F(DaemonTest, NoComputeCapNoDriving) {
    make_group(kContainer, 1024 * kOneMiB, 0);
    nvml.samples = {{5000, 100, 1}};
    PassReport report = core().sample();
    ASSERT_NE(device_of(report), nullptr);
    EXPECT_FALSE(device_of(report)->driven);
    EXPECT_EQ(file->header.compute[0].driver.load(), 0u);
}

// ---------------------------------------------------------------------------
// The trust rule for groups (daemon.hpp): a container's group, whose
// directory oci_host hands to the container's uid, is watched; what that uid
// could make of its directory instead is refused. Needs root (chown).

class DaemonTrustTest : public DaemonTest {
  protected:
    static constexpr uid_t kContainerUid = 12345;
    void SetUp() override {
        if (::geteuid() != 0) {
            GTEST_SKIP() << "needs root: the groups belong to a container uid";
        }
        DaemonTest::SetUp();
    }
    std::string dir(const std::string& name) const { return config.state_dir + "/" + name; }
    void chown_path(const std::string& path, uid_t uid) {
        ASSERT_EQ(::lchown(path.c_str(), uid, uid), 0) << path;
    }
    // A container's own directory, empty (as oci_host leaves it).
    void container_dir(const std::string& name) {
        ASSERT_EQ(::mkdir(dir(name).c_str(), 0700), 0);
        chown_path(dir(name), kContainerUid);
    }
    // Whether the daemon takes the group: "" or why not (what its log
    // says; a registration for it is only ever "refused").
    std::string answer(const std::string& name) { return core().try_open(name); }
};

TEST_F(DaemonTrustTest, AContainersOwnGroupIsWatched) {
    make_group(kContainer);
    chown_path(dir(kContainer), kContainerUid);
    chown_path(dir(kContainer) + "/state", kContainerUid);
    core().sample();
    EXPECT_EQ(core().group_count(), 1u);
    fake_process(4242, 555, "0::/\n", app.own_slot());
    EXPECT_EQ(register_as(4242, app.own_slot()), "OK\n");
}

TEST_F(DaemonTrustTest, ASymlinkIsRefusedForTheStateAndTheDirectory) {
    make_group("real");
    container_dir("evil");
    ASSERT_EQ(::symlink((dir("real") + "/state").c_str(), (dir("evil") + "/state").c_str()), 0);
    chown_path(dir("evil") + "/state", kContainerUid);
    EXPECT_EQ(answer("evil"), "untrusted-state");
    ASSERT_EQ(::symlink(dir("real").c_str(), dir("alias").c_str()), 0);
    EXPECT_EQ(answer("alias"), "untrusted-state");
    core().sample();
    EXPECT_EQ(core().group_count(), 1u); // "real" only
    EXPECT_EQ(answer("real"), "");
}

TEST_F(DaemonTrustTest, AHardlinkIsRefusedEvenWithTheRightOwner) {
    make_group("real");
    chown_path(dir("real"), kContainerUid);
    chown_path(dir("real") + "/state", kContainerUid);
    container_dir("evil");
    ASSERT_EQ(::link((dir("real") + "/state").c_str(), (dir("evil") + "/state").c_str()), 0);
    EXPECT_EQ(answer("evil"), "untrusted-state");
    EXPECT_EQ(answer("real"), "untrusted-state"); // two names: neither is trusted
    ASSERT_EQ(::unlink((dir("evil") + "/state").c_str()), 0);
    EXPECT_EQ(answer("real"), "");
}

TEST_F(DaemonTrustTest, OwnersMustAgreeAndNobodyElseMayWrite) {
    make_group("real");
    // A root-owned file in a container's directory: not the container's.
    chown_path(dir("real"), kContainerUid);
    EXPECT_EQ(answer("real"), "untrusted-state");
    chown_path(dir("real") + "/state", kContainerUid);
    ASSERT_EQ(::chmod(dir("real").c_str(), 0770), 0);
    EXPECT_EQ(answer("real"), "untrusted-state");
    ASSERT_EQ(::chmod(dir("real").c_str(), 0700), 0);
    ASSERT_EQ(::chmod((dir("real") + "/state").c_str(), 0620), 0);
    EXPECT_EQ(answer("real"), "untrusted-state");
    ASSERT_EQ(::chmod((dir("real") + "/state").c_str(), 0600), 0);
    EXPECT_EQ(answer("real"), "");
}

TEST_F(DaemonTrustTest, AFifoOrADirectoryIsNeverOpened) {
    container_dir("fifo");
    ASSERT_EQ(::mkfifo((dir("fifo") + "/state").c_str(), 0600), 0);
    chown_path(dir("fifo") + "/state", kContainerUid);
    EXPECT_EQ(answer("fifo"), "untrusted-state"); // and returns: no open blocked
    container_dir("nested");
    ASSERT_EQ(::mkdir((dir("nested") + "/state").c_str(), 0700), 0);
    EXPECT_EQ(answer("nested"), "untrusted-state");
    EXPECT_EQ(answer("absent"), "no-such-group");
}

// The state directory itself must be the daemon's: writable by others, no
// group in it is trusted.
TEST_F(DaemonTest, AStateDirectoryWritableByOthersIsRefused) {
    make_group("job1");
    ASSERT_EQ(::chmod(config.state_dir.c_str(), 0777), 0);
    EXPECT_EQ(core().try_open("job1"), "untrusted-state-dir");
    ASSERT_EQ(::chmod(config.state_dir.c_str(), 0700), 0);
}

TEST_F(DaemonTest, GroupsComeAndGo) {
    make_group("job1");
    core().sample();
    EXPECT_EQ(core().group_count(), 1u);
    app.close();
    std::string command = "rm -rf '" + config.state_dir + "/job1'";
    ASSERT_EQ(std::system(command.c_str()), 0);
    core().sample();
    EXPECT_EQ(core().group_count(), 0u);
}

// A group's processes own its state file (a container's uid): one of them
// truncating it under the daemon's mappings must not kill the daemon (SIGBUS)
// but drop the group, said once, and the group is not opened again while its
// directory stays.
TEST_F(DaemonTest, AGroupThatTruncatesItsStateIsDroppedAndTheDaemonLives) {
    make_group(kContainer, 1024 * kOneMiB, 25);
    fake_process(5000, 600, std::string("0::/docker/") + kContainer + "\n");
    nvml.running = {{5000, 1 * kOneMiB}};
    effects.now = kSecond;
    nvml.samples = {{5000, 100, effects.now / 1000}};
    PassReport report = core().sample();
    ASSERT_NE(device_of(report), nullptr);
    ASSERT_TRUE(device_of(report)->driven);
    ASSERT_TRUE(app.daemon_lock_held());
    ASSERT_EQ(core().group_count(), 1u);

    std::string path = config.state_dir + "/" + group + "/state";
    ASSERT_EQ(::truncate(path.c_str(), 0), 0);
    effects.now += kControlPeriodNs;
    core().step_compute(); // reads the compute record: SIGBUS, guarded
    EXPECT_EQ(core().group_count(), 0u);
    auto said = [&] {
        return std::count_if(
            effects.lines.begin(), effects.lines.end(), [&](const std::string& line) {
                return line.find("group " + group) != std::string::npos &&
                       line.find("truncated by one of its processes") != std::string::npos;
            });
    };
    EXPECT_EQ(said(), 1);
    // The daemon let go of the group's daemon byte: its processes drive the
    // gate in-process.
    EXPECT_FALSE(app.daemon_lock_held());

    // Put back (zeros, so the test's own mappings read again): still not
    // watched, not said again, and registration is refused.
    ASSERT_EQ(::truncate(path.c_str(), sizeof(StateFile)), 0);
    for (int pass = 0; pass < 3; ++pass) {
        effects.now += kSecond;
        core().sample();
        core().step_compute();
    }
    EXPECT_EQ(core().group_count(), 0u);
    EXPECT_EQ(said(), 1);
    EXPECT_EQ(register_as(5000, app.own_slot()), "ERR refused\n");
    EXPECT_EQ(core().try_open(group), "state-truncated");

    // Gone and back: a new group of that name is watched again.
    app.close();
    std::string command = "rm -rf '" + config.state_dir + "/" + group + "'";
    ASSERT_EQ(std::system(command.c_str()), 0);
    core().sample();
    ::munmap(file, sizeof(StateFile));
    file = nullptr;
    make_group(kContainer, 1024 * kOneMiB, 25);
    core().sample();
    EXPECT_EQ(core().group_count(), 1u);
}

// --- the socket ------------------------------------------------------------

namespace {

class SocketTest : public DaemonTest {
  protected:
    void SetUp() override {
        DaemonTest::SetUp();
        path = tmp / "daemon.sock";
        auto listening = RegistrationServer::listen(path);
        ASSERT_TRUE(listening) << listening.error().message;
        server = std::make_unique<RegistrationServer>(std::move(*listening));
    }

    static std::string handler(void* context, const char* data, size_t size,
                               const PeerCredentials& peer, int passed_fd) {
        auto* self = static_cast<SocketTest*>(context);
        ++self->handled;
        return self->core().handle_datagram(data, size, peer, passed_fd);
    }

    void service(uint64_t now) { server->service(now, handler, this); }
    void service() { service(clock); }

    int connect_client() {
        int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
        if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
            ::close(fd);
            return -1;
        }
        return fd;
    }

    // Sends `data` (with `passed` beside it when >= 0), lets the server
    // work, returns the reply ("" for none). Each exchange is a second
    // later than the last: a peer's request rate is not what these test.
    std::string exchange(const std::string& data, int passed = -1) {
        clock += kSecond;
        int fd = connect_client();
        EXPECT_GE(fd, 0);
        send_with(fd, data, passed);
        std::string reply = await_reply(fd);
        ::close(fd);
        return reply;
    }

    static void send_with(int fd, const std::string& data, int passed) {
        iovec vector{const_cast<char*>(data.data()), data.size()};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
        msghdr message{};
        message.msg_iov = &vector;
        message.msg_iovlen = 1;
        if (passed >= 0) {
            message.msg_control = control;
            message.msg_controllen = sizeof control;
            cmsghdr* header = CMSG_FIRSTHDR(&message);
            header->cmsg_level = SOL_SOCKET;
            header->cmsg_type = SCM_RIGHTS;
            header->cmsg_len = CMSG_LEN(sizeof(int));
            std::memcpy(CMSG_DATA(header), &passed, sizeof passed);
        }
        ::sendmsg(fd, &message, MSG_NOSIGNAL);
    }

    std::string await_reply(int fd) {
        for (int round = 0; round < 200; ++round) {
            service();
            pollfd entry{fd, POLLIN, 0};
            if (::poll(&entry, 1, 5) > 0) {
                char buffer[256];
                ssize_t got = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
                return got > 0 ? std::string(buffer, static_cast<size_t>(got)) : "";
            }
        }
        return "(timeout)";
    }

    static size_t open_fds() {
        size_t count = 0;
        for (int fd = 0; fd < 4096; ++fd) {
            count += ::fcntl(fd, F_GETFD) >= 0 ? 1 : 0;
        }
        return count;
    }

    std::string path;
    std::unique_ptr<RegistrationServer> server;
    int handled = 0;
    uint64_t clock = 1;
};

// A peer in a pid namespace of its own, as uid 0: a rootful container
// without a user namespace. It connects `count` times to the socket and
// holds the connections (sending nothing) until the test ends.
class NamespacePeer {
  public:
    NamespacePeer(const std::string& path, int count) {
        int ready[2];
        if (::pipe2(ready, O_CLOEXEC) != 0) {
            return;
        }
        pid_ = ::fork();
        if (pid_ == 0) {
            ::close(ready[0]);
            if (::unshare(CLONE_NEWPID) != 0) {
                ::_exit(2);
            }
            pid_t inner = ::fork();
            if (inner == 0) {
                ::prctl(PR_SET_PDEATHSIG, SIGKILL);
                for (int i = 0; i < count; ++i) {
                    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
                    sockaddr_un address{};
                    address.sun_family = AF_UNIX;
                    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
                    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
                        break;
                    }
                }
                char byte = 'r';
                (void)!::write(ready[1], &byte, 1);
                ::pause();
                ::_exit(0);
            }
            ::waitpid(inner, nullptr, 0);
            ::_exit(0);
        }
        ::close(ready[1]);
        char byte = 0;
        ok_ = pid_ > 0 && ::read(ready[0], &byte, 1) == 1;
        ::close(ready[0]);
    }
    ~NamespacePeer() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
    }
    NamespacePeer(const NamespacePeer&) = delete;
    NamespacePeer& operator=(const NamespacePeer&) = delete;
    bool ok() const { return ok_; }

  private:
    pid_t pid_ = -1;
    bool ok_ = false;
};

} // namespace

TEST_F(SocketTest, SocketIsWorldConnectable) {
    struct stat status {};
    ASSERT_EQ(::lstat(path.c_str(), &status), 0);
    EXPECT_TRUE(S_ISSOCK(status.st_mode));
    EXPECT_EQ(status.st_mode & 0777, 0666u);
    server->unlink_socket();
    EXPECT_NE(::lstat(path.c_str(), &status), 0);
}

// The path appears only once the socket listens (it is bound under
// <path>.new and renamed): a client that finds it is never refused. A
// leftover <path>.new socket is replaced; anything else there is refused.
TEST_F(SocketTest, ThePathAppearsListening) {
    struct stat status {};
    EXPECT_NE(::lstat((path + ".new").c_str(), &status), 0);
    int client = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ASSERT_GE(client, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    EXPECT_EQ(::connect(client, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0)
        << std::strerror(errno);
    ::close(client);
    server.reset();

    const std::string second = tmp / "second.sock";
    {
        int stale = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
        sockaddr_un stale_address{};
        stale_address.sun_family = AF_UNIX;
        std::memcpy(stale_address.sun_path, (second + ".new").c_str(), second.size() + 5);
        ASSERT_EQ(
            ::bind(stale, reinterpret_cast<const sockaddr*>(&stale_address), sizeof stale_address),
            0);
        ::close(stale);
    }
    auto replaced = RegistrationServer::listen(second);
    EXPECT_TRUE(replaced) << replaced.error().message;

    const std::string third = tmp / "third.sock";
    std::ofstream(third + ".new") << "not a socket";
    auto refused = RegistrationServer::listen(third);
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find("third.sock.new exists and is not a socket"),
              std::string::npos)
        << refused.error().message;
}

// --socket may name a directory others can write: one of them may swap the
// freshly bound <path>.new for a link (here, in the very moment after
// bind(), with ptrace) before it is made 0666. The 0666 goes to the socket
// bound, or nowhere: never through the link.
TEST(RegistrationSocket, ANameSwappedAfterBindIsNotFollowed) {
    TempDir dir;
    const std::string path = dir / "daemon.sock";
    const std::string secret = dir / "secret";
    int fd = ::open(secret.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ::close(fd);
    pid_t child = ::fork();
    if (child == 0) {
        if (::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) {
            ::_exit(77);
        }
        ::raise(SIGSTOP);
        auto server = RegistrationServer::listen(path);
        ::_exit(server ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
        GTEST_SKIP() << "ptrace is not allowed here";
    }
    ASSERT_TRUE(WIFSTOPPED(status));
    // ptrace() takes its options, signal and size as the data pointer.
    // NOLINTBEGIN(performance-no-int-to-ptr)
    ASSERT_EQ(::ptrace(PTRACE_SETOPTIONS, child, nullptr,
                       reinterpret_cast<void*>(PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL)),
              0);
    bool swapped = false;
    uint64_t entered = 0;
    int signal = 0;
    while (::ptrace(PTRACE_SYSCALL, child, nullptr, reinterpret_cast<void*>(intptr_t{signal})) ==
               0 &&
           ::waitpid(child, &status, 0) == child && WIFSTOPPED(status)) {
        signal = 0;
        if (WSTOPSIG(status) != (SIGTRAP | 0x80)) {
            signal = WSTOPSIG(status);
            continue;
        }
        __ptrace_syscall_info info{};
        if (::ptrace(PTRACE_GET_SYSCALL_INFO, child, reinterpret_cast<void*>(sizeof info), &info) <=
            0) {
            continue;
        }
        // NOLINTEND(performance-no-int-to-ptr)
        if (info.op == PTRACE_SYSCALL_INFO_ENTRY) {
            entered = info.entry.nr;
        } else if (info.op == PTRACE_SYSCALL_INFO_EXIT && entered == SYS_bind && !swapped &&
                   info.exit.rval == 0) {
            ASSERT_EQ(::rename((path + ".new").c_str(), (dir / "moved").c_str()), 0);
            ASSERT_EQ(::symlink(secret.c_str(), (path + ".new").c_str()), 0);
            swapped = true;
        }
    }
    ASSERT_TRUE(WIFEXITED(status)) << status;
    ASSERT_TRUE(swapped) << "bind() was never seen";
    struct stat st {};
    ASSERT_EQ(::stat(secret.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << "chmod followed the link";
    EXPECT_NE(WEXITSTATUS(status), 0) << "the server listens on a name it does not hold";
}

// The real thing: this process holds its slot's lock, /proc is the real one,
// the pid comes from SO_PEERCRED.
TEST_F(SocketTest, RegistersThroughTheSocketWithPeerCredentials) {
    auto real_root = Sysroot::open("/");
    ASSERT_TRUE(real_root);
    root = std::make_unique<Sysroot>(std::move(*real_root));
    make_group("job1");
    EXPECT_EQ(exchange(request("job1", app.own_slot())), "ERR refused\n"); // no descriptor
    EXPECT_EQ(exchange(request("job1", app.own_slot()), app.lock_fd()), "OK\n");
    EXPECT_EQ(core().registrations("job1"),
              (std::map<int, int32_t>{{app.own_slot(), static_cast<int32_t>(::getpid())}}));
    // Another slot of the same group, which this process does not hold.
    GroupState other;
    Problem problem;
    ASSERT_TRUE(other.open(config.state_dir.c_str(), "job1", problem));
    ASSERT_TRUE(other.register_process(problem));
    other.close();
    EXPECT_EQ(exchange(request("job1", (app.own_slot() + 1) % kMaxSlots), app.lock_fd()),
              "ERR refused\n");
}

TEST_F(SocketTest, MalformedTrafficIsAnsweredAndNeverCrashes) {
    make_group("job1");
    EXPECT_EQ(exchange("garbage\n"), "ERR unknown-request\n");
    EXPECT_EQ(exchange(std::string(4000, 'x')), "ERR request-too-long\n");
    EXPECT_EQ(exchange("GPULIMIT2 REGISTER job1 1"), "ERR no-final-newline\n");
    EXPECT_EQ(exchange("GPULIMIT1 REGISTER job1 1\n"), "ERR old-protocol\n");
    std::string binary(100, '\0');
    EXPECT_EQ(exchange(binary), "ERR unknown-request\n");
    std::mt19937 random(99);
    for (int round = 0; round < 300; ++round) {
        std::string data(1 + random() % 200, '\0');
        for (char& c : data) {
            c = static_cast<char>(random() % 256);
        }
        std::string reply = exchange(data);
        EXPECT_EQ(reply.substr(0, 4), "ERR ") << round;
    }
    EXPECT_EQ(server->connections(), 0u);
}

TEST_F(SocketTest, SilentAndHalfOpenConnectionsTimeOut) {
    std::vector<int> clients;
    clients.reserve(10);
    for (int i = 0; i < 10; ++i) {
        clients.push_back(connect_client());
    }
    service(1);
    EXPECT_EQ(server->connections(), 10u);
    service(1 + RegistrationServer::kConnectionTimeoutNs + 1);
    EXPECT_EQ(server->connections(), 0u);
    for (int fd : clients) {
        char byte = 0;
        EXPECT_EQ(::recv(fd, &byte, 1, 0), 0); // closed by the daemon
        ::close(fd);
    }
}

TEST_F(SocketTest, FloodOfConnectionsStaysBounded) {
    std::vector<int> clients;
    for (size_t i = 0; i < RegistrationServer::kMaxConnections + 40; ++i) {
        int fd = connect_client();
        if (fd < 0) {
            break; // the backlog is full: the kernel bounds it too
        }
        clients.push_back(fd);
        if (i % 16 == 0) {
            service();
        }
    }
    for (int round = 0; round < 10; ++round) {
        service();
    }
    EXPECT_LE(server->connections(), RegistrationServer::kMaxConnections);
    size_t busy = 0;
    for (int fd : clients) {
        char buffer[64];
        ssize_t got = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
        busy += got > 0 && std::string(buffer, static_cast<size_t>(got)) == "ERR busy\n" ? 1 : 0;
        ::close(fd);
    }
    EXPECT_GT(busy, 0u);
    service(RegistrationServer::kConnectionTimeoutNs * 3);
    EXPECT_EQ(server->connections(), 0u);
    // Still serving.
    EXPECT_EQ(exchange("x\n"), "ERR unknown-request\n");
}

TEST_F(SocketTest, PassedFileDescriptorsAreNotKept) {
    size_t before = open_fds();
    for (int round = 0; round < 20; ++round) {
        int fd = connect_client();
        ASSERT_GE(fd, 0);
        int passed[2] = {::open("/dev/null", O_RDONLY | O_CLOEXEC), ::dup(fd)};
        char control[CMSG_SPACE(sizeof passed)] = {};
        char data[] = "GPULIMIT2 REGISTER job1 1\n";
        iovec vector{data, sizeof data - 1};
        msghdr message{};
        message.msg_iov = &vector;
        message.msg_iovlen = 1;
        message.msg_control = control;
        message.msg_controllen = sizeof control;
        cmsghdr* header = CMSG_FIRSTHDR(&message);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN(sizeof passed);
        std::memcpy(CMSG_DATA(header), passed, sizeof passed);
        ASSERT_GT(::sendmsg(fd, &message, MSG_NOSIGNAL), 0);
        ::close(passed[0]);
        ::close(passed[1]);
        EXPECT_EQ(await_reply(fd).substr(0, 4), "ERR ");
        ::close(fd);
    }
    // What a peer hands over is closed on the closing thread, which may
    // still hold the last round's copies just after the reply.
    for (int wait = 0; wait < 200 && open_fds() != before; ++wait) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(open_fds(), before);
}

// Bounds per peer, not per uid: two uid-0 peers in different pid namespaces
// (two rootful containers) each have their own share, so one that opens
// connections without end does not lock the other out.
TEST_F(SocketTest, OneUidZeroContainerCannotUseUpAnothersShare) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root (pid namespaces)";
    }
    make_group("job1");
    NamespacePeer greedy(path, static_cast<int>(RegistrationServer::kMaxConnections));
    if (!greedy.ok()) {
        GTEST_SKIP() << "cannot make a pid namespace here";
    }
    for (int round = 0; round < 4; ++round) {
        service();
    }
    EXPECT_EQ(server->connections(), RegistrationServer::kPerPeer);
    // The other container: served (its request is read and answered).
    int handled_before = handled;
    pid_t other = ::fork();
    if (other == 0) {
        if (::unshare(CLONE_NEWPID) != 0) {
            ::_exit(2);
        }
        pid_t inner = ::fork();
        if (inner == 0) {
            int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
            sockaddr_un address{};
            address.sun_family = AF_UNIX;
            std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
            if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
                ::_exit(3);
            }
            (void)!::send(fd, "hello\n", 6, MSG_NOSIGNAL);
            char reply[64] = {};
            ssize_t got = ::recv(fd, reply, sizeof reply - 1, 0);
            ::_exit(got > 0 && std::string(reply) == "ERR unknown-request\n" ? 0 : 4);
        }
        int status = 0;
        ::waitpid(inner, &status, 0);
        ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 5);
    }
    int status = -1;
    for (int round = 0; round < 400; ++round) {
        service();
        if (::waitpid(other, &status, WNOHANG) == other) {
            break;
        }
        ::usleep(5000);
    }
    ASSERT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the second container was not served";
    EXPECT_GT(handled, handled_before);
}

// The last places of the table are root's of the host: containers that
// fill the rest (each within its own share) do not lock root out.
TEST_F(SocketTest, RootOfTheHostAlwaysHasRoom) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root (pid namespaces)";
    }
    make_group("job1");
    const size_t general = RegistrationServer::kMaxConnections - RegistrationServer::kRootReserve;
    std::vector<std::unique_ptr<NamespacePeer>> peers;
    for (size_t i = 0; i * RegistrationServer::kPerPeer < general + RegistrationServer::kPerPeer;
         ++i) {
        peers.push_back(
            std::make_unique<NamespacePeer>(path, static_cast<int>(RegistrationServer::kPerPeer)));
        if (!peers.back()->ok()) {
            GTEST_SKIP() << "cannot make a pid namespace here";
        }
        service();
    }
    for (int round = 0; round < 4; ++round) {
        service();
    }
    EXPECT_EQ(server->connections(), general);
    // Root of the host (this process): served.
    EXPECT_EQ(exchange("hello\n"), "ERR unknown-request\n");
}

} // namespace gpuinit::limit
