// gpu-persist's persistence RPC against an rpcgen client on libtirpc, and
// its RPC layer against libtirpc's own server: what needs no root.
#include "rpcgen_support.hpp"

#include <gtest/gtest.h>

namespace gpuinit::testing {
namespace {

class XdrBytes {
  public:
    XdrBytes& u32(uint32_t value) {
        for (int shift = 24; shift >= 0; shift -= 8) {
            bytes_ += static_cast<char>(value >> shift);
        }
        return *this;
    }
    XdrBytes& opaque(const std::string& body) {
        u32(static_cast<uint32_t>(body.size()));
        bytes_ += body;
        bytes_.append((4 - body.size() % 4) % 4, '\0');
        return *this;
    }
    XdrBytes& raw(const std::string& bytes) {
        bytes_ += bytes;
        return *this;
    }
    const std::string& bytes() const { return bytes_; }

  private:
    std::string bytes_;
};

std::string frame(const std::string& record, bool last = true) {
    return XdrBytes()
        .u32((last ? 0x80000000u : 0u) | static_cast<uint32_t>(record.size()))
        .raw(record)
        .bytes();
}

struct Auth {
    uint32_t flavor = 0;
    std::string body;
};

std::string call(uint32_t version, uint32_t procedure, const Auth& cred = {}, const Auth& verf = {},
                 uint32_t program = NVPD_PERSISTENCE_PROGRAM, uint32_t rpc_version = 2) {
    XdrBytes xdr;
    xdr.u32(0x1234).u32(0).u32(rpc_version).u32(program).u32(version).u32(procedure);
    xdr.u32(cred.flavor).opaque(cred.body).u32(verf.flavor).opaque(verf.body);
    return xdr.bytes();
}

std::string auth_sys(const std::string& name = "node7", uint32_t uid = 0, uint32_t groups = 1) {
    XdrBytes xdr;
    xdr.u32(0x5eed).opaque(name).u32(uid).u32(uid).u32(groups);
    for (uint32_t i = 0; i < groups; ++i) {
        xdr.u32(i);
    }
    return xdr.bytes();
}

std::string gss(uint32_t version, uint32_t procedure, uint32_t service) {
    return XdrBytes().u32(version).u32(procedure).u32(1).u32(service).opaque("ctx").bytes();
}

// A device neither server knows, so that both answer as command_server.c
// does for it, whoever calls.
const std::string kDevice = XdrBytes().u32(0).u32(kUnknownBus).u32(0).u32(0).bytes();

class NvpdRpcgen : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string started = daemon_.start();
        ASSERT_EQ(started, "");
    }
    void TearDown() override {
        if (HasFailure()) {
            std::printf("gpu-persist's log:\n%s\n", daemon_.log().c_str());
        }
    }
    PersistDaemon daemon_;
};

// Every record below goes to libtirpc's server (reference_server.c, set up
// as nvidia-persistenced sets up its own) and to gpu-persist; the bytes
// each answers, and whether it closes the connection, must be the same.
TEST_F(NvpdRpcgen, RpcLayerIsLibtirpcs) {
    ReferenceServer reference;
    ASSERT_EQ(reference.start(), "");
    const Auth none;
    const Auth verf{5, "abcdefg"};
    const std::pair<const char*, std::string> probes[] = {
        {"NULL v1", frame(call(1, 0))},
        {"NULL v2 with arguments", frame(call(2, 0) + kDevice)},
        {"get", frame(call(1, 2) + kDevice)},
        {"get, trailing bytes", frame(call(1, 2) + kDevice + XdrBytes().u32(7).u32(7).bytes())},
        {"get, arguments cut", frame(call(1, 2) + kDevice.substr(0, 8))},
        {"set v1", frame(call(1, 1) + kDevice + XdrBytes().u32(1).bytes())},
        {"set v1, mode 2", frame(call(1, 1) + kDevice + XdrBytes().u32(2).bytes())},
        {"set v1, no mode", frame(call(1, 1) + kDevice)},
        {"set v2", frame(call(2, 1) + kDevice + XdrBytes().u32(0).bytes())},
        {"numa v2, status 7", frame(call(2, 2) + kDevice + XdrBytes().u32(7).bytes())},
        {"other program", frame(call(1, 2, none, none, 100003) + kDevice)},
        {"version 3", frame(call(3, 2) + kDevice)},
        {"version 0", frame(call(0, 2) + kDevice)},
        {"procedure 9 v1", frame(call(1, 9) + kDevice)},
        {"procedure 3 v2", frame(call(2, 3) + kDevice)},
        {"RPC version 3", frame(call(1, 2, none, none, NVPD_PERSISTENCE_PROGRAM, 3) + kDevice)},
        {"a reply", frame(XdrBytes().u32(1).u32(1).u32(0).u32(0).u32(0).u32(0).bytes())},
        {"header cut", frame(XdrBytes().u32(1).u32(0).u32(2).bytes())},
        {"empty record", frame("")},
        {"credential over 400",
         frame(XdrBytes().u32(1).u32(0).u32(2).u32(35006).u32(1).u32(2).u32(0).u32(401).bytes() +
               std::string(404, '\0') + XdrBytes().u32(0).u32(0).bytes() + kDevice)},
        {"credential past the end",
         frame(XdrBytes().u32(1).u32(0).u32(2).u32(35006).u32(1).u32(2).u32(0).u32(100).bytes())},
        {"AUTH_SYS", frame(call(1, 2, {1, auth_sys()}) + kDevice)},
        {"AUTH_SYS, set v1",
         frame(call(1, 1, {1, auth_sys()}) + kDevice + XdrBytes().u32(1).bytes())},
        {"AUTH_SYS with a verifier", frame(call(1, 2, {1, auth_sys()}, verf) + kDevice)},
        {"AUTH_SYS with a verifier, version 3", frame(call(3, 2, {1, auth_sys()}, verf))},
        {"AUTH_NONE with a verifier", frame(call(1, 2, none, verf) + kDevice)},
        {"AUTH_NONE with a body", frame(call(1, 2, {0, "xyz"}) + kDevice)},
        {"AUTH_SYS cut", frame(call(1, 2, {1, auth_sys().substr(0, 12)}) + kDevice)},
        {"AUTH_SYS empty", frame(call(1, 2, {1, ""}) + kDevice)},
        {"AUTH_SYS name of 256", frame(call(1, 2, {1, auth_sys(std::string(256, 'n'))}) + kDevice)},
        {"AUTH_SYS name of 255", frame(call(1, 2, {1, auth_sys(std::string(255, 'n'))}) + kDevice)},
        {"AUTH_SYS 17 groups", frame(call(1, 2, {1, auth_sys("n", 0, 17)}) + kDevice)},
        {"AUTH_SYS 16 groups", frame(call(1, 2, {1, auth_sys("n", 0, 16)}) + kDevice)},
        {"AUTH_SYS, more than it says", frame(call(1, 2, {1, auth_sys() + "more"}) + kDevice)},
        {"AUTH_SYS bad, other program", frame(call(1, 2, {1, ""}, none, 5) + kDevice)},
        {"AUTH_SHORT", frame(call(1, 2, {2, "abcd"}) + kDevice)},
        {"AUTH_DES", frame(call(1, 2, {3, "abcd"}) + kDevice)},
        {"flavor 7", frame(call(1, 2, {7, ""}) + kDevice)},
        {"RPCSEC_GSS empty", frame(call(1, 2, {6, ""}) + kDevice)},
        {"RPCSEC_GSS short", frame(call(1, 2, {6, "abcd"}) + kDevice)},
        {"RPCSEC_GSS data", frame(call(1, 2, {6, gss(1, 0, 1)}) + kDevice)},
        {"RPCSEC_GSS init", frame(call(1, 2, {6, gss(1, 1, 1)}) + kDevice)},
        {"RPCSEC_GSS init, NULL", frame(call(1, 0, {6, gss(1, 1, 1)}) + "token")},
        {"RPCSEC_GSS destroy", frame(call(1, 2, {6, gss(1, 3, 1)}) + kDevice)},
        {"RPCSEC_GSS destroy, NULL", frame(call(1, 0, {6, gss(1, 3, 1)}))},
        {"RPCSEC_GSS version 2", frame(call(1, 2, {6, gss(2, 0, 1)}) + kDevice)},
        {"RPCSEC_GSS procedure 9", frame(call(1, 2, {6, gss(1, 9, 1)}) + kDevice)},
        {"RPCSEC_GSS service 9", frame(call(1, 2, {6, gss(1, 0, 9)}) + kDevice)},
        {"two calls", frame(call(1, 2) + kDevice) + frame(call(2, 0))},
        {"a call in two fragments",
         frame(call(1, 2).substr(0, 8), false) + frame(call(1, 2).substr(8) + kDevice)},
        {"an empty fragment that is not the last", frame("", false) + frame(call(1, 2) + kDevice)},
        {"a call, then a reply",
         frame(call(1, 2) + kDevice) + frame(XdrBytes().u32(1).u32(1).u32(0).bytes())},
    };
    size_t closed = 0;
    size_t answered = 0;
    for (const auto& [name, data] : probes) {
        Exchange theirs = exchange_with_marker(reference.socket(), data);
        Exchange ours = exchange_with_marker(daemon_.socket(), data);
        EXPECT_EQ(ours.closed, theirs.closed) << name;
        EXPECT_EQ(ours.bytes, theirs.bytes) << name;
        closed += theirs.closed ? 1 : 0;
        answered += theirs.bytes.empty() ? 0 : 1;
    }
    // Both outcomes were seen: the comparison compared something.
    EXPECT_GE(closed, 8u);
    EXPECT_GE(answered, std::size(probes) - closed);
}

// GetPersistenceMode asks nobody (command_server.c); get_device() matches
// domain, bus and slot; the mode is whether the GPU is held, and a GPU
// still initializing is answered once its init is done, as
// nvidia-persistenced, which opens before it answers, would answer.
TEST_F(NvpdRpcgen, GetAnswers) {
    for (bool auth_sys : {false, true}) {
        RpcgenClient client(daemon_.socket(), NVPD_PERSISTENCE_V1, auth_sys);
        ASSERT_NE(client.get(), nullptr) << client.error();
        auto expect = [&](int bus, int function, int status, int mode) {
            RpcgenClient::Mode got = client.get(bus, function);
            EXPECT_EQ(got.status, status)
                << std::hex << bus << "." << function << " " << client.error();
            EXPECT_EQ(got.mode, mode) << std::hex << bus << "." << function;
        };
        expect(kHeld.bus, 0, NVPD_STATUS_SUCCESS, 1);
        expect(kHeld.bus, 1, NVPD_STATUS_SUCCESS, 1);
        expect(kHeld.bus, 7, NVPD_STATUS_SUCCESS, 1);
        expect(kNoNode.bus, 0, NVPD_STATUS_SUCCESS, 0);
        expect(kInitFails.bus, 0, NVPD_STATUS_SUCCESS, 0);
        expect(kSlowFail.bus, 0, NVPD_STATUS_SUCCESS, 0);
        expect(kSlow.bus, 0, NVPD_STATUS_SUCCESS, 1);
        expect(kUnknownBus, 0, NVPD_STATUS_DEVICE_NOT_FOUND, -1);
    }
}

// xdr_void, typed as clnt_call() takes it (tirpc declares xdr_void without
// parameters).
bool_t no_data(XDR* /*xdr*/, ...) {
    return TRUE;
}

// What clnt_call() reports for what the server does not serve.
TEST_F(NvpdRpcgen, ClientSideRpcErrors) {
    RpcgenClient v1(daemon_.socket(), NVPD_PERSISTENCE_V1);
    ASSERT_NE(v1.get(), nullptr) << v1.error();
    timeval timeout{5, 0};
    EXPECT_EQ(clnt_call(v1.get(), 0, no_data, nullptr, no_data, nullptr, timeout), RPC_SUCCESS);
    EXPECT_EQ(clnt_call(v1.get(), 9, no_data, nullptr, no_data, nullptr, timeout), RPC_PROCUNAVAIL);
    RpcgenClient v3(daemon_.socket(), 3);
    ASSERT_NE(v3.get(), nullptr) << v3.error();
    EXPECT_EQ(clnt_call(v3.get(), 0, no_data, nullptr, no_data, nullptr, timeout),
              RPC_PROGVERSMISMATCH);
    rpc_err error{};
    clnt_geterr(v3.get(), &error);
    EXPECT_EQ(error.re_vers.low, 1u);
    EXPECT_EQ(error.re_vers.high, 2u);
}

} // namespace
} // namespace gpuinit::testing
