// gpu-persist's persistence RPC against an rpcgen client on libtirpc: the
// sets, which only root may make, and what other users get. Each answer is
// the one NVIDIA/nvidia-persistenced 595.71.05 gives (command_server.c,
// nvidia-persistenced.c set_device_mode and set_device_numa_status).
#include "gpuinit/persist/client.hpp"
#include "gpuinit/persist/rpc.hpp"
#include "rpcgen_support.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace gpuinit::testing {
namespace {

class NvpdRpcgenRoot : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) {
            GTEST_SKIP() << "needs root: only uid 0 may set, and the other users' calls are "
                            "made by dropping to uid 65534";
        }
        ASSERT_EQ(daemon_.start(), "");
    }
    void TearDown() override {
        if (HasFailure()) {
            std::printf("gpu-persist's log:\n%s\n", daemon_.log().c_str());
        }
    }
    int mode_of(int bus) {
        RpcgenClient client(daemon_.socket(), NVPD_PERSISTENCE_V1);
        RpcgenClient::Mode got = client.get(bus);
        EXPECT_EQ(got.status, NVPD_STATUS_SUCCESS) << client.error();
        return got.mode;
    }
    PersistDaemon daemon_;
};

// set_device_mode(): off closes, on opens, the mode it is in already is a
// success; v1 (which also onlines NUMA memory, none here) and v2 alike; the
// function does not matter.
TEST_F(NvpdRpcgenRoot, SetsOnAHeldGpu) {
    RpcgenClient v1(daemon_.socket(), NVPD_PERSISTENCE_V1);
    RpcgenClient v2(daemon_.socket(), NVPD_PERSISTENCE_V2, true);
    ASSERT_NE(v1.get(), nullptr) << v1.error();
    ASSERT_NE(v2.get(), nullptr) << v2.error();
    EXPECT_EQ(v1.set(kHeld.bus, 1), NVPD_STATUS_SUCCESS) << v1.error();
    EXPECT_EQ(mode_of(kHeld.bus), 1);
    EXPECT_EQ(v1.set(kHeld.bus, 0), NVPD_STATUS_SUCCESS) << v1.error();
    EXPECT_EQ(mode_of(kHeld.bus), 0);
    EXPECT_EQ(v1.set(kHeld.bus, 0), NVPD_STATUS_SUCCESS) << v1.error();
    EXPECT_EQ(v2.set_only(kHeld.bus, 1, 1), NVPD_STATUS_SUCCESS) << v2.error();
    EXPECT_EQ(mode_of(kHeld.bus), 1);
    EXPECT_EQ(v2.set_only(kHeld.bus, 0), NVPD_STATUS_SUCCESS) << v2.error();
    EXPECT_EQ(mode_of(kHeld.bus), 0);
    EXPECT_EQ(v1.set(kHeld.bus, 1, 7), NVPD_STATUS_SUCCESS) << v1.error();
    EXPECT_EQ(mode_of(kHeld.bus), 1);
}

// An open that fails is NVPD_ERR_DRIVER and the mode stays off: no node,
// an init that fails at once or after a while.
TEST_F(NvpdRpcgenRoot, SetOnWhatCannotBeHeldIsADriverError) {
    RpcgenClient v1(daemon_.socket(), NVPD_PERSISTENCE_V1);
    RpcgenClient v2(daemon_.socket(), NVPD_PERSISTENCE_V2);
    for (const FixtureGpu& gpu : {kNoNode, kInitFails, kSlowFail}) {
        EXPECT_EQ(v1.set(gpu.bus, 1), NVPD_STATUS_DRIVER) << gpu.minor << " " << v1.error();
        EXPECT_EQ(mode_of(gpu.bus), 0) << gpu.minor;
        EXPECT_EQ(v2.set_only(gpu.bus, 1), NVPD_STATUS_DRIVER) << gpu.minor << " " << v2.error();
        EXPECT_EQ(mode_of(gpu.bus), 0) << gpu.minor;
        // Off is the mode it is in.
        EXPECT_EQ(v1.set(gpu.bus, 0), NVPD_STATUS_SUCCESS) << gpu.minor;
    }
}

// A set waits for the GPU's init, as nvidia-persistenced's synchronous
// open does, and answers what it gave.
TEST_F(NvpdRpcgenRoot, SetOnWaitsForTheInit) {
    RpcgenClient v1(daemon_.socket(), NVPD_PERSISTENCE_V1);
    EXPECT_EQ(v1.set(kSlow.bus, 0), NVPD_STATUS_SUCCESS) << v1.error();
    EXPECT_EQ(mode_of(kSlow.bus), 0);
    EXPECT_EQ(v1.set(kSlow.bus, 1), NVPD_STATUS_SUCCESS) << v1.error();
    EXPECT_EQ(mode_of(kSlow.bus), 1);
}

// get_device() comes before the value: a device nobody has is not found,
// whatever the mode or status.
TEST_F(NvpdRpcgenRoot, UnknownDevice) {
    RpcgenClient v1(daemon_.socket(), NVPD_PERSISTENCE_V1);
    RpcgenClient v2(daemon_.socket(), NVPD_PERSISTENCE_V2);
    for (int value : {0, 1, 2, -1}) {
        EXPECT_EQ(v1.set(kUnknownBus, value), NVPD_STATUS_DEVICE_NOT_FOUND) << value;
        EXPECT_EQ(v2.set_only(kUnknownBus, value), NVPD_STATUS_DEVICE_NOT_FOUND) << value;
        EXPECT_EQ(v2.set_numa(kUnknownBus, value), NVPD_STATUS_DEVICE_NOT_FOUND) << value;
    }
}

// The mode and status are XDR enums, decoded as any int: values outside
// them are NVPD_ERR_INVALID_ARGUMENT, not an RPC error.
TEST_F(NvpdRpcgenRoot, ValuesOutsideTheEnumsAreInvalidArguments) {
    RpcgenClient v1(daemon_.socket(), NVPD_PERSISTENCE_V1);
    RpcgenClient v2(daemon_.socket(), NVPD_PERSISTENCE_V2);
    for (const FixtureGpu& gpu : {kHeld, kNoNode}) {
        for (int value : {2, -1, 0x7fffffff}) {
            EXPECT_EQ(v1.set(gpu.bus, value), NVPD_STATUS_INVALID_ARGUMENT) << v1.error();
            EXPECT_EQ(v2.set_only(gpu.bus, value), NVPD_STATUS_INVALID_ARGUMENT) << v2.error();
            EXPECT_EQ(v2.set_numa(gpu.bus, value), NVPD_STATUS_INVALID_ARGUMENT) << v2.error();
        }
    }
    EXPECT_EQ(mode_of(kHeld.bus), 1);
}

// set_device_numa_status() for GPUs without NUMA memory (nvidia-numa.c):
// offlining has nothing to do; onlining opens the GPU's node.
TEST_F(NvpdRpcgenRoot, NumaStatus) {
    RpcgenClient v2(daemon_.socket(), NVPD_PERSISTENCE_V2);
    EXPECT_EQ(v2.set_numa(kHeld.bus, 0), NVPD_STATUS_SUCCESS) << v2.error();
    EXPECT_EQ(v2.set_numa(kHeld.bus, 1), NVPD_STATUS_SUCCESS) << v2.error();
    EXPECT_EQ(v2.set_numa(kNoNode.bus, 0), NVPD_STATUS_SUCCESS) << v2.error();
    EXPECT_EQ(v2.set_numa(kNoNode.bus, 1), NVPD_STATUS_NUMA_FAILURE) << v2.error();
    EXPECT_EQ(mode_of(kHeld.bus), 1);
}

// _nvpdIsClientRoot(): every set from another user is NVPD_ERR_PERMISSIONS,
// before the device and the value are looked at; the get is anyone's.
TEST_F(NvpdRpcgenRoot, OtherUsers) {
    std::string socket = daemon_.socket();
    std::vector<int> answers = as_nobody([&socket] {
        RpcgenClient v1(socket, NVPD_PERSISTENCE_V1, true);
        RpcgenClient v2(socket, NVPD_PERSISTENCE_V2);
        RpcgenClient::Mode got = v1.get(kHeld.bus);
        return std::vector<int>{v1.set(kHeld.bus, 0),
                                v1.set(kNoNode.bus, 1),
                                v1.set(kUnknownBus, 1),
                                v1.set(kHeld.bus, 2),
                                v2.set_only(kHeld.bus, 0),
                                v2.set_numa(kHeld.bus, 0),
                                v2.set_numa(kUnknownBus, 1),
                                v2.set_numa(kHeld.bus, 5),
                                got.status,
                                got.mode};
    });
    ASSERT_EQ(answers.size(), 10u) << "the child could not drop to uid 65534";
    for (size_t i = 0; i < 8; ++i) {
        EXPECT_EQ(answers[i], NVPD_STATUS_PERMISSIONS) << i;
    }
    EXPECT_EQ(answers[8], NVPD_STATUS_SUCCESS);
    EXPECT_EQ(answers[9], 1);
    EXPECT_EQ(mode_of(kHeld.bus), 1);
}

// The daemon's CPU time so far (user and system), in clock ticks.
long cpu_ticks(const TempDir& dir) {
    char text[64] = {};
    int fd = ::open((dir / "run/gpu-persist/gpu-persist.pid").c_str(), O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? ::read(fd, text, sizeof(text) - 1) : -1;
    if (fd >= 0) {
        ::close(fd);
    }
    if (got <= 0) {
        return -1;
    }
    std::string stat_path = "/proc/" + std::to_string(std::atoi(text)) + "/stat";
    char stat[1024] = {};
    fd = ::open(stat_path.c_str(), O_RDONLY | O_CLOEXEC);
    got = fd >= 0 ? ::read(fd, stat, sizeof(stat) - 1) : -1;
    if (fd >= 0) {
        ::close(fd);
    }
    // After "pid (comm) ": state is field 3, utime 14, stime 15.
    const char* at = got > 0 ? std::strrchr(stat, ')') : nullptr;
    long utime = 0;
    long stime = 0;
    if (at == nullptr || std::sscanf(at + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld",
                                     &utime, &stime) != 2) {
        return -1;
    }
    return utime + stime;
}

// A client that goes away while its call waits for a GPU's init: the
// daemon neither spins on the hung-up socket nor forgets the calls it has.
TEST_F(NvpdRpcgenRoot, AClientGoneWhileItsCallWaitsCostsNothing) {
    RpcgenClient v1(daemon_.socket(), NVPD_PERSISTENCE_V1);
    ASSERT_EQ(v1.set(kSlow.bus, 0), NVPD_STATUS_SUCCESS) << v1.error();
    // The next open of kSlow's node initializes for 2 s.
    std::string node = daemon_.dir() / ("dev/nvidia" + std::to_string(kSlow.minor));
    int fd = ::open(node.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "slow 2000", 9), 9);
    ::close(fd);
    int enabled = -1;
    std::thread enable([&] { enabled = v1.set(kSlow.bus, 1); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    long before = cpu_ticks(daemon_.dir());
    // Get calls about the GPU being initialized wait; their clients hang up.
    for (int i = 0; i < 4; ++i) {
        int client = connect_unix(daemon_.socket());
        ASSERT_GE(client, 0);
        std::string call = frame_rpc_record(
            encode_get_mode_call(0x900 + i, {0, static_cast<uint32_t>(kSlow.bus), 0, 0}));
        call += call; // and one more behind it
        ASSERT_EQ(::send(client, call.data(), call.size(), MSG_NOSIGNAL),
                  static_cast<ssize_t>(call.size()));
        ::close(client);
    }
    enable.join();
    long after = cpu_ticks(daemon_.dir());
    EXPECT_EQ(enabled, NVPD_STATUS_SUCCESS) << v1.error();
    ASSERT_GE(before, 0);
    ASSERT_GE(after, 0);
    long hz = ::sysconf(_SC_CLK_TCK);
    // The init took about 1.8 s from `before`: spinning, the daemon uses
    // most of that.
    EXPECT_LT(after - before, hz / 4) << "the daemon used " << (after - before) * 1000 / hz
                                      << " ms of CPU while the calls waited";
    EXPECT_EQ(mode_of(kSlow.bus), 1);
}

// Any user may connect to the socket (0666), but no user can take every
// connection the daemon keeps: root's control requests and other users'
// calls still get through.
TEST_F(NvpdRpcgenRoot, OneUserCannotTakeEveryConnection) {
    int ready[2];
    int done[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(done), 0);
    std::string socket = daemon_.socket();
    pid_t hog = ::fork();
    if (hog == 0) {
        ::close(ready[0]);
        ::close(done[1]);
        if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
            ::setresuid(65534, 65534, 65534) != 0) {
            ::_exit(1);
        }
        std::vector<int> held;
        held.reserve(100);
        for (int i = 0; i < 100; ++i) {
            held.push_back(connect_unix(socket));
        }
        char byte = 1;
        (void)!::write(ready[1], &byte, 1);
        pollfd parent{done[0], POLLIN, 0};
        ::poll(&parent, 1, 10'000);
        ::_exit(0);
    }
    ::close(ready[1]);
    ::close(done[0]);
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the child could not drop to uid 65534";
    auto root = Sysroot::open(daemon_.dir().path());
    ASSERT_TRUE(root);
    auto status = persist_request(*root, ControlRequest{}, 2000);
    EXPECT_TRUE(status) << status.error().message;
    auto get = persistence_rpc_get(*root, {0, static_cast<uint32_t>(kHeld.bus), 0, 0});
    ASSERT_TRUE(get) << get.error().message;
    EXPECT_EQ(get->status, NvPdStatus::Success);
    // Another user's nvidia-smi.
    pid_t other = ::fork();
    if (other == 0) {
        if (::setgroups(0, nullptr) != 0 || ::setresgid(65533, 65533, 65533) != 0 ||
            ::setresuid(65533, 65533, 65533) != 0) {
            ::_exit(2);
        }
        RpcgenClient v1(socket, NVPD_PERSISTENCE_V1);
        ::_exit(v1.get(kHeld.bus).status == NVPD_STATUS_SUCCESS ? 0 : 1);
    }
    int other_status = -1;
    ::waitpid(other, &other_status, 0);
    EXPECT_TRUE(WIFEXITED(other_status) && WEXITSTATUS(other_status) == 0)
        << "another user's call was not answered (" << other_status << ")";
    ::close(done[1]);
    ::close(ready[0]);
    ::waitpid(hog, nullptr, 0);
}

} // namespace
} // namespace gpuinit::testing
