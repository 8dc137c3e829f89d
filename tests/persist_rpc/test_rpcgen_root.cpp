// gpu-persist's persistence RPC against an rpcgen client on libtirpc: the
// sets, which only root may make, and what other users get. Each answer is
// the one NVIDIA/nvidia-persistenced 595.71.05 gives (command_server.c,
// nvidia-persistenced.c set_device_mode and set_device_numa_status).
#include "rpcgen_support.hpp"

#include <gtest/gtest.h>
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

} // namespace
} // namespace gpuinit::testing
