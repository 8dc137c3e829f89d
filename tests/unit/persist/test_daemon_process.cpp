// The daemon as a process, on a fixture tree (--root): its control and RPC
// sockets survive hostile clients, and it stops cleanly. No GPU can be
// opened here (no driver), so its GPUs wait for their nodes; the VM tests
// (tests/vm/scenarios/persist.sh) hold real fds on the stand-in driver.
#include "gpuinit/persist/client.hpp"
#include "gpuinit/persist/control.hpp"
#include "gpuinit/persist/rpc.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <random>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace gpuinit {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kSetXid = 0x5e7;

class DaemonProcess {
  public:
    explicit DaemonProcess(const std::string& root) : root_(root) {
        pid_ = ::fork();
        if (pid_ == 0) {
            int null = ::open("/dev/null", O_WRONLY);
            ::dup2(null, 1);
            ::execl(GPU_PERSIST_BIN, "gpu-persist", "--root", root.c_str(), "--no-hotplug",
                    static_cast<char*>(nullptr));
            ::_exit(127);
        }
    }
    ~DaemonProcess() {
        if (pid_ > 0 && alive()) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
    }
    bool alive() const { return ::waitpid(pid_, nullptr, WNOHANG) == 0; }
    // The status file appears once every GPU is held or reported.
    bool wait_ready() const {
        for (int i = 0; i < 500; ++i) {
            if (::access((root_ + "/run/gpu-persist/status").c_str(), F_OK) == 0) {
                return true;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return false;
    }
    // SIGTERM; the exit status, or -1 when it is not gone within 5 s.
    int stop() {
        ::kill(pid_, SIGTERM);
        for (int i = 0; i < 500; ++i) {
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return -1;
    }

  private:
    std::string root_;
    pid_t pid_ = -1;
};

int connect_unix(const std::string& path) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// Sends `data` (optionally half-closing), then reads until EOF or 2 s pass.
std::string exchange(const std::string& path, std::string_view data, bool half_close) {
    int fd = connect_unix(path);
    if (fd < 0) {
        ADD_FAILURE() << "connect " << path << ": " << std::strerror(errno);
        return {};
    }
    (void)::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (half_close) {
        ::shutdown(fd, SHUT_WR);
    }
    std::string reply;
    auto deadline = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < deadline) {
        pollfd waiting{fd, POLLIN, 0};
        if (::poll(&waiting, 1, 100) <= 0) {
            continue;
        }
        char buffer[4096];
        ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
        if (got <= 0) {
            break;
        }
        reply.append(buffer, static_cast<size_t>(got));
    }
    ::close(fd);
    return reply;
}

// A set with any 32-bit value (v1 SetPersistenceMode, v2
// SetPersistenceModeOnly or, procedure 2, SetNumaStatus): the client's
// encoder writes only modes 0 and 1, and no NUMA call.
std::string set_call(uint32_t version, uint32_t procedure, const NvPciDevice& device,
                     uint32_t value) {
    std::string call = encode_set_mode_call(kSetXid, version, device, false);
    auto put = [&call](size_t offset, uint32_t word) {
        for (size_t i = 0; i < 4; ++i) {
            call[offset + i] = static_cast<char>(word >> (24 - 8 * i));
        }
    };
    put(20, procedure);
    put(call.size() - 4, value);
    return call;
}

// The reply to one such call, sent and half-closed.
RpcReply set_reply(const std::string& socket, const std::string& call) {
    std::string framed = exchange(socket, frame_rpc_record(call), true);
    RpcRecordReader reader;
    reader.feed(framed);
    if (reader.state() != RpcRecordReader::State::Record) {
        return RpcReply{"no reply", NvPdStatus::Unknown, std::nullopt};
    }
    return decode_set_mode_reply(reader.take_record(), kSetXid);
}

class PersistDaemonTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_TRUE(testing::write_fixture(testing::workstation(2), dir_.path()));
        // The fixture's GPUs have no nodes: the daemon waits for them.
        daemon_ = std::make_unique<DaemonProcess>(dir_.path());
        ASSERT_TRUE(daemon_->wait_ready()) << "gpu-persist did not publish its status";
    }
    std::string control() const { return dir_ / "run/gpu-persist/socket"; }
    std::string compat() const { return dir_ / "run/nvidia-persistenced/socket"; }

    testing::TempDir dir_;
    std::unique_ptr<DaemonProcess> daemon_;
};

} // namespace

namespace {

// The seed machine: an A100 at 0001:00:00.0, with the files the driver
// makes for a PCIe GPU (information, registry, power; a real H100's
// 0000:00:06.0 has just these), plus `extra` beside them.
std::string seed_machine(const testing::TempDir& dir, const char* extra) {
    testing::FakeMachine machine;
    testing::FakePciFunction gpu;
    gpu.bdf = "0001:00:00.0";
    gpu.minor = 0;
    gpu.uuid = testing::fake_uuid(0);
    machine.pci.push_back(gpu);
    machine.groups.push_back("nvidia0");
    EXPECT_TRUE(testing::write_fixture(machine, dir.path()));
    std::string gpu_dir = dir / "proc/driver/nvidia/gpus/0001:00:00.0";
    for (const char* name : {"registry", "power", extra}) {
        if (name != nullptr) {
            int fd = ::open((gpu_dir + "/" + name).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0444);
            EXPECT_GE(fd, 0) << name;
            ::close(fd);
        }
    }
    return dir.path();
}

// Runs gpu-persist on `root` until it publishes its status (then stops it)
// or exits; its exit status, and its stderr in `log`.
int start_and_stop(const std::string& root, std::string& log) {
    std::string log_path = root + "/stderr.log";
    pid_t pid = ::fork();
    if (pid == 0) {
        int out = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(out, 2);
        int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 1);
        ::execl(GPU_PERSIST_BIN, "gpu-persist", "--root", root.c_str(), "--no-hotplug",
                static_cast<char*>(nullptr));
        ::_exit(127);
    }
    int status = 0;
    for (int i = 0; i < 500; ++i) {
        if (::waitpid(pid, &status, WNOHANG) == pid) {
            break;
        }
        if (::access((root + "/run/gpu-persist/status").c_str(), F_OK) == 0) {
            ::kill(pid, SIGTERM);
            ::waitpid(pid, &status, 0);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    char buffer[4096] = {};
    int fd = ::open(log_path.c_str(), O_RDONLY);
    ssize_t got = fd >= 0 ? ::read(fd, buffer, sizeof(buffer) - 1) : -1;
    if (fd >= 0) {
        ::close(fd);
    }
    log.assign(buffer, got > 0 ? static_cast<size_t>(got) : 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace

// The driver makes numa_status only for a GPU whose memory the platform
// onlines as NUMA memory (open-gpu-kernel-modules 580.142 nv-procfs.c
// nv_procfs_add_gpu, nv-pci.c nv_init_coherent_link_info: self-hosted,
// coherent GPUs on aarch64), never for a PCIe one; nvidia-persistenced
// logs "NUMA memory onlined" for every GPU, NUMA or not (nvidia-numa.c).
TEST(PersistDaemonStart, HoldsThePlainPcieSeedMachine) {
    testing::TempDir dir;
    std::string log;
    EXPECT_EQ(start_and_stop(seed_machine(dir, nullptr), log), 0) << log;
    EXPECT_EQ(log.find("numa_status"), std::string::npos) << log;
}

// A process is named nvidia-persistenced ("nvidia-persiste" in comm) by
// whoever starts it (prctl PR_SET_NAME): it turned nvidia-smi's
// compatibility off for good. It counts only while something listens on
// the socket, which a user cannot bind in that directory.
TEST(PersistDaemonStart, ANameAloneDoesNotTakeNvidiaSmisSocket) {
    testing::TempDir dir;
    std::string root = seed_machine(dir, nullptr);
    ASSERT_EQ(::mkdir((dir / "proc/4242").c_str(), 0755), 0);
    { std::ofstream(dir / "proc/4242/comm") << "nvidia-persiste\n"; }
    DaemonProcess daemon(root);
    ASSERT_TRUE(daemon.wait_ready());
    auto sysroot = Sysroot::open(root);
    ASSERT_TRUE(sysroot);
    auto reply = persist_request(*sysroot, ControlRequest{}, 5000);
    ASSERT_TRUE(reply) << reply.error().message;
    EXPECT_EQ(reply->reply.daemon.compat, "on");
    EXPECT_EQ(daemon.stop(), 0);

    // Root's process, running a root-owned program, and something really
    // listens there: left alone.
    { std::ofstream(dir / "proc/4242/status") << "Name:\tnvidia-persiste\nUid:\t0\t0\t0\t0\n"; }
    ASSERT_EQ(::symlink("/bin/sh", (dir / "proc/4242/exe").c_str()), 0);
    ASSERT_EQ(::mkdir((dir / "run/nvidia-persistenced").c_str(), 0755) == 0 || errno == EEXIST,
              true);
    int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::string path = dir / "run/nvidia-persistenced/socket";
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    ::unlink(path.c_str());
    ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::listen(listener, 4), 0);
    DaemonProcess second(root);
    ASSERT_TRUE(second.wait_ready());
    reply = persist_request(*sysroot, ControlRequest{}, 5000);
    ASSERT_TRUE(reply) << reply.error().message;
    EXPECT_EQ(reply->reply.daemon.compat, "off (nvidia-persistenced runs as pid 4242)");
    EXPECT_EQ(second.stop(), 0);
    ::close(listener);
}

TEST(PersistDaemonStart, RefusesACoherentMemoryMachine) {
    testing::TempDir dir;
    std::string log;
    EXPECT_EQ(start_and_stop(seed_machine(dir, "numa_status"), log), 3);
    EXPECT_NE(log.find("0001:00:00.0/numa_status exists"), std::string::npos) << log;
    EXPECT_NE(log.find("nvidia-persistenced"), std::string::npos) << log;
    EXPECT_NE(::access((dir / "run/gpu-persist/status").c_str(), F_OK), 0);
}

TEST_F(PersistDaemonTest, AnswersStatusAndStopsCleanly) {
    auto root = Sysroot::open(dir_.path());
    ASSERT_TRUE(root);
    auto reply = persist_request(*root, ControlRequest{}, 5000);
    ASSERT_TRUE(reply) << reply.error().message;
    EXPECT_EQ(reply->reply.code, 0);
    ASSERT_EQ(reply->reply.gpus.size(), 2u);
    EXPECT_EQ(reply->reply.gpus[0].state, HoldState::WaitingForNode);
    EXPECT_EQ(reply->reply.daemon.compat, "on");
    struct stat st {};
    ASSERT_EQ(::lstat(control().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0660u) << "the control socket is not world-writable";
    ASSERT_EQ(::lstat((dir_ / "run/gpu-persist/status").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);

    auto unknown = persist_request(*root, *parse_control_request("disable 7"), 5000);
    ASSERT_TRUE(unknown);
    EXPECT_EQ(unknown->reply.code, ENODEV);

    EXPECT_EQ(daemon_->stop(), 0);
    EXPECT_NE(::access(control().c_str(), F_OK), 0) << "socket removed at stop";
    EXPECT_NE(::access(compat().c_str(), F_OK), 0);
    EXPECT_NE(::access((dir_ / "run/gpu-persist/gpu-persist.pid").c_str(), F_OK), 0);
}

TEST_F(PersistDaemonTest, SurvivesAThousandMalformedControlRequests) {
    std::mt19937 random(20261123);
    // Three clients that send half a request and stall: the others are
    // still served, and the daemon drops them after its deadline.
    std::vector<int> stalled;
    for (int i = 0; i < 3; ++i) {
        stalled.push_back(connect_unix(control()));
        ASSERT_GE(stalled.back(), 0);
        ::send(stalled.back(), "stat", 4, MSG_NOSIGNAL);
    }
    size_t replies = 0;
    for (int i = 0; i < 1000; ++i) {
        std::string request;
        switch (i % 5) {
        case 0: // random bytes, newline-terminated
            request.resize(random() % 300);
            std::generate(request.begin(), request.end(), [&] { return char(random()); });
            request += '\n';
            break;
        case 1: // oversized, no newline
            request.assign(kMaxControlRequest + 1 + random() % 8000, 'x');
            break;
        case 2: // half a request, then half-closed
            request = "disable 0";
            request.resize(random() % request.size());
            break;
        case 3: // a NUL and escapes in an otherwise valid shape
            request = std::string("enable \0\x1b[2J", 12) + "\n";
            break;
        case 4: // many requests in one write: only the first is answered
            request = "status\nstatus\ndisable all\n";
            break;
        }
        std::string reply = exchange(control(), request, i % 5 == 2);
        if (!reply.empty()) {
            auto parsed = parse_control_reply(reply);
            ASSERT_TRUE(parsed) << "request " << i << ": " << parsed.error().message;
            ++replies;
            if (i % 5 != 4) {
                EXPECT_NE(parsed->code, 0) << "request " << i << " was accepted";
            }
        }
    }
    EXPECT_GE(replies, 800u);
    ASSERT_TRUE(daemon_->alive());
    auto root = Sysroot::open(dir_.path());
    auto after = persist_request(*root, ControlRequest{}, 5000);
    ASSERT_TRUE(after) << after.error().message;
    EXPECT_EQ(after->reply.gpus.size(), 2u);
    for (const HeldGpu& gpu : after->reply.gpus) {
        EXPECT_TRUE(gpu.wanted) << "a malformed request disabled " << gpu.id.bdf;
    }
    // The stalled clients are dropped after the daemon's 5 s deadline.
    for (int fd : stalled) {
        pollfd waiting{fd, POLLIN, 0};
        ASSERT_EQ(::poll(&waiting, 1, 8000), 1) << "a stalled client was never dropped";
        char byte = 0;
        EXPECT_EQ(::recv(fd, &byte, 1, 0), 0) << "dropped without a reply";
        ::close(fd);
    }
}

TEST_F(PersistDaemonTest, SurvivesAThousandMalformedRpcCalls) {
    std::mt19937 random(35006);
    for (int i = 0; i < 1000; ++i) {
        std::string data;
        switch (i % 4) {
        case 0: { // a well-framed record of random bytes
            std::string record(random() % 200, '\0');
            std::generate(record.begin(), record.end(), [&] { return char(random()); });
            data = frame_rpc_record(record);
            break;
        }
        case 1: // a header announcing 2 GB
            data = std::string("\xff\xff\xff\xf0", 4) + "abcd";
            break;
        case 2: { // a valid call cut short
            data =
                frame_rpc_record(encode_get_mode_call(static_cast<uint32_t>(i), {0, 0x17, 0, 0}));
            data.resize(random() % data.size());
            break;
        }
        case 3: // random bytes, no framing at all
            data.resize(random() % 64);
            std::generate(data.begin(), data.end(), [&] { return char(random()); });
            break;
        }
        (void)exchange(compat(), data, true);
    }
    ASSERT_TRUE(daemon_->alive());
    auto root = Sysroot::open(dir_.path());
    auto device = parse_nv_pci_device("0000:17:00.0");
    ASSERT_TRUE(device);
    auto reply = persistence_rpc_get(*root, *device);
    ASSERT_TRUE(reply) << reply.error().message;
    EXPECT_TRUE(reply->rpc_error.empty()) << reply->rpc_error;
}

// A record trickled a byte at a time never completes within the deadline:
// the connection is dropped at it, however often bytes come.
TEST_F(PersistDaemonTest, ATrickledRpcRecordIsDroppedAtTheDeadline) {
    int fd = connect_unix(compat());
    ASSERT_GE(fd, 0);
    auto start = Clock::now();
    std::string framed = frame_rpc_record(encode_get_mode_call(0x7121c, {0, 0x17, 0, 0}));
    bool closed = false;
    for (size_t sent = 0; Clock::now() - start < std::chrono::seconds(9);) {
        if (sent < framed.size() &&
            ::send(fd, framed.data() + sent, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) {
            ++sent;
        }
        pollfd waiting{fd, POLLIN, 0};
        if (::poll(&waiting, 1, 250) == 1) {
            char byte = 0;
            closed = ::recv(fd, &byte, 1, MSG_DONTWAIT) <= 0;
            break;
        }
    }
    auto took = Clock::now() - start;
    ::close(fd);
    EXPECT_TRUE(closed) << "a client trickling bytes was never dropped";
    EXPECT_LT(took, std::chrono::seconds(7));
    ASSERT_TRUE(daemon_->alive());
}

// The fixture's GPUs have no node: gpu-persist cannot hold them, and
// nvidia-persistenced answers a set it cannot carry out with
// NVPD_ERR_DRIVER (set_device_mode), the mode staying off.
TEST_F(PersistDaemonTest, RpcSetOnThatCannotHoldIsADriverError) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root: only uid 0 may set the persistence mode";
    }
    auto root = Sysroot::open(dir_.path());
    ASSERT_TRUE(root);
    auto device = parse_nv_pci_device("0000:17:00.0");
    ASSERT_TRUE(device);
    for (uint32_t version : {1u, 2u}) {
        RpcReply set = set_reply(compat(), set_call(version, 1, *device, 1));
        EXPECT_EQ(set.rpc_error, "") << version;
        EXPECT_EQ(set.status, NvPdStatus::Driver) << version;
        auto get = persistence_rpc_get(*root, *device);
        ASSERT_TRUE(get) << get.error().message;
        EXPECT_EQ(get->status, NvPdStatus::Success);
        EXPECT_EQ(get->enabled, false) << version;
    }
    // Off is what it is already: a success.
    RpcReply off = set_reply(compat(), set_call(1, 1, *device, 0));
    EXPECT_EQ(off.status, NvPdStatus::Success);
}

// get_device() matches domain, bus and slot: the function nvidia-smi sends
// (the GPU's, or any other of the slot) does not matter.
TEST_F(PersistDaemonTest, RpcMatchesTheSlotNotTheFunction) {
    auto root = Sysroot::open(dir_.path());
    ASSERT_TRUE(root);
    for (std::string_view bdf : {"0000:17:00.0", "0000:17:00.1", "0000:17:00.7"}) {
        auto device = parse_nv_pci_device(bdf);
        ASSERT_TRUE(device);
        auto get = persistence_rpc_get(*root, *device);
        ASSERT_TRUE(get) << get.error().message;
        EXPECT_EQ(get->rpc_error, "") << bdf;
        EXPECT_EQ(get->status, NvPdStatus::Success) << bdf;
        EXPECT_EQ(get->enabled, false) << bdf;
    }
    auto other_slot = persistence_rpc_get(*root, {0, 0x17, 1, 0});
    ASSERT_TRUE(other_slot);
    EXPECT_EQ(other_slot->status, NvPdStatus::DeviceNotFound);
}

// An XDR enum decodes to any int; set_device_mode() answers a mode other
// than 0 and 1 with NVPD_ERR_INVALID_ARGUMENT, after the uid and device
// checks.
TEST_F(PersistDaemonTest, RpcModeOutsideTheEnumIsAnInvalidArgument) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root: only uid 0 may set the persistence mode";
    }
    for (uint32_t version : {1u, 2u}) {
        for (uint32_t mode : {2u, 0xffffffffu}) {
            RpcReply known = set_reply(compat(), set_call(version, 1, {0, 0x17, 0, 0}, mode));
            EXPECT_EQ(known.rpc_error, "");
            EXPECT_EQ(known.status, NvPdStatus::InvalidArgument) << version << " " << mode;
            RpcReply unknown = set_reply(compat(), set_call(version, 1, {0, 0x99, 0, 0}, mode));
            EXPECT_EQ(unknown.status, NvPdStatus::DeviceNotFound) << version << " " << mode;
        }
    }
}

// command_server.c asks _nvpdIsClientRoot() before every set, SetNumaStatus
// included; for root, a GPU without NUMA memory offlines without effort and
// onlines when it can be opened.
TEST_F(PersistDaemonTest, RpcNumaStatusNeedsRoot) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root to call as another user";
    }
    const NvPciDevice device{0, 0x17, 0, 0};
    // mkdtemp made the fixture 0700; its run/ and the socket's directory are
    // the daemon's, 0755.
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
    int pipe[2];
    ASSERT_EQ(::pipe(pipe), 0);
    pid_t child = ::fork();
    if (child == 0) {
        ::close(pipe[0]);
        uint32_t statuses[4] = {};
        if (::setresgid(65534, 65534, 65534) == 0 && ::setgroups(0, nullptr) == 0 &&
            ::setresuid(65534, 65534, 65534) == 0) {
            size_t i = 0;
            for (const std::string& call :
                 {set_call(2, 2, device, 1), set_call(2, 2, device, 0),
                  set_call(2, 2, {0, 0x99, 0, 0}, 1), set_call(1, 1, device, 1)}) {
                RpcReply reply = set_reply(compat(), call);
                statuses[i++] = reply.rpc_error.empty() ? static_cast<uint32_t>(reply.status) : 99;
            }
        }
        ssize_t written = ::write(pipe[1], statuses, sizeof(statuses));
        ::_exit(written == sizeof(statuses) ? 0 : 1);
    }
    ::close(pipe[1]);
    uint32_t statuses[4] = {};
    ssize_t got = ::read(pipe[0], statuses, sizeof(statuses));
    ::close(pipe[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_EQ(got, static_cast<ssize_t>(sizeof(statuses)));
    for (uint32_t answer : statuses) {
        EXPECT_EQ(answer, static_cast<uint32_t>(NvPdStatus::Permissions));
    }
    EXPECT_EQ(set_reply(compat(), set_call(2, 2, device, 0)).status, NvPdStatus::Success);
    EXPECT_EQ(set_reply(compat(), set_call(2, 2, device, 1)).status, NvPdStatus::NumaFailure);
    EXPECT_EQ(set_reply(compat(), set_call(2, 2, device, 3)).status, NvPdStatus::InvalidArgument);
    EXPECT_EQ(set_reply(compat(), set_call(2, 2, {0, 0x99, 0, 0}, 0)).status,
              NvPdStatus::DeviceNotFound);
}

TEST_F(PersistDaemonTest, ControlRoundTripMedian) {
    auto root = Sysroot::open(dir_.path());
    ASSERT_TRUE(root);
    std::vector<double> micros;
    for (int i = 0; i < 1000; ++i) {
        auto start = Clock::now();
        auto reply = persist_request(*root, ControlRequest{}, 5000);
        ASSERT_TRUE(reply);
        micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
    std::nth_element(micros.begin(), micros.begin() + 500, micros.end());
    std::printf("gpu-persist status round trip: median %.0f us over 1000\n", micros[500]);
    RecordProperty("median_us", static_cast<int>(micros[500]));
    EXPECT_LT(micros[500], 50'000.0);
}

} // namespace gpuinit
