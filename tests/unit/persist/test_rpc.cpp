// The persistence RPC codec, from the client's side and with calls built by
// hand here (not by the production encoder), so that a mistake shared by
// both ends still fails.
#include "gpuinit/persist/rpc.hpp"

#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace gpuinit {
namespace {

constexpr uint32_t kXid = 0x12345678;
const NvPciDevice kDevice{0, 0x17, 0, 0};

// A minimal XDR writer for the tests' own calls and replies.
class Xdr {
  public:
    Xdr& u32(uint32_t value) {
        for (int shift = 24; shift >= 0; shift -= 8) {
            bytes_ += static_cast<char>(value >> shift);
        }
        return *this;
    }
    Xdr& opaque(const std::string& body) {
        u32(static_cast<uint32_t>(body.size()));
        bytes_ += body;
        bytes_.append((4 - body.size() % 4) % 4, '\0');
        return *this;
    }
    Xdr& device(const NvPciDevice& device) {
        return u32(device.domain).u32(device.bus).u32(device.slot).u32(device.function);
    }
    const std::string& bytes() const { return bytes_; }

  private:
    std::string bytes_;
};

// What nvidia-smi sends: an AUTH_SYS credential (stamp, machine name, uid,
// gid, no groups) and an AUTH_NONE verifier.
Xdr call(uint32_t version, uint32_t procedure, uint32_t program = kPersistenceRpcProgram) {
    std::string sys = Xdr().u32(0x5eed).opaque("gpu-node7").u32(1000).u32(1000).u32(0).bytes();
    Xdr xdr;
    xdr.u32(kXid).u32(0).u32(2).u32(program).u32(version).u32(procedure);
    xdr.u32(1).opaque(sys).u32(0).u32(0);
    return xdr;
}

std::vector<uint32_t> words(const std::string& bytes) {
    EXPECT_EQ(bytes.size() % 4, 0u);
    std::vector<uint32_t> result;
    for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
        uint32_t word = 0;
        for (size_t j = 0; j < 4; ++j) {
            word = word << 8 | static_cast<unsigned char>(bytes[i + j]);
        }
        result.push_back(word);
    }
    return result;
}

// xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, accept_stat.
std::vector<uint32_t> accepted(uint32_t accept_stat, std::vector<uint32_t> rest = {}) {
    std::vector<uint32_t> reply = {kXid, 1, 0, 0, 0, accept_stat};
    reply.insert(reply.end(), rest.begin(), rest.end());
    return reply;
}
constexpr uint32_t kSuccess = 0;
constexpr uint32_t kProgUnavail = 1;
constexpr uint32_t kProgMismatch = 2;
constexpr uint32_t kProcUnavail = 3;
constexpr uint32_t kGarbageArgs = 4;

RpcIncoming read(const std::string& record) {
    return read_rpc_record(record);
}

// The reply a record gets without the daemon, as words; none when it is a
// call or closes the connection.
std::vector<uint32_t> reply_words(const std::string& record) {
    RpcIncoming incoming = read_rpc_record(record);
    EXPECT_EQ(incoming.kind, RpcIncoming::Kind::Reply);
    return incoming.kind == RpcIncoming::Kind::Reply ? words(incoming.reply)
                                                     : std::vector<uint32_t>{};
}

// MSG_DENIED, AUTH_ERROR, why.
std::vector<uint32_t> denied(uint32_t why) {
    return {kXid, 1, 1, 1, why};
}
constexpr uint32_t kBadCred = 1;
constexpr uint32_t kRejectedCred = 2;
constexpr uint32_t kAuthFailed = 7;
constexpr uint32_t kGssCredProblem = 13;

RpcCall call_of(const std::string& record) {
    RpcIncoming incoming = read_rpc_record(record);
    EXPECT_EQ(incoming.kind, RpcIncoming::Kind::Call);
    return incoming.call;
}

TEST(RpcCodec, GetCallBytesAreBigEndianXdr) {
    std::string expected("\x12\x34\x56\x78" // xid
                         "\0\0\0\0"         // CALL
                         "\0\0\0\x02"       // RPC version 2
                         "\0\0\x88\xbe"     // program 35006
                         "\0\0\0\x01"       // version 1
                         "\0\0\0\x02"       // procedure 2, GetPersistenceMode
                         "\0\0\0\0\0\0\0\0" // credential AUTH_NONE, empty
                         "\0\0\0\0\0\0\0\0" // verifier AUTH_NONE, empty
                         "\0\0\0\0"         // domain
                         "\0\0\0\x17"       // bus
                         "\0\0\0\0"         // slot
                         "\0\0\0\0",        // function
                         56);
    EXPECT_EQ(encode_get_mode_call(kXid, kDevice), expected);
}

TEST(RpcCodec, SetCallCarriesVersionAndMode) {
    NvPciDevice device{1, 2, 3, 4};
    EXPECT_EQ(words(encode_set_mode_call(7, 2, device, true)),
              (std::vector<uint32_t>{7, 0, 2, 35006, 2, 1, 0, 0, 0, 0, 1, 2, 3, 4, 1}));
    EXPECT_EQ(words(encode_set_mode_call(7, 1, device, false)).back(), 0u);
}

TEST(RpcCodec, FrameMarksOneLastFragment) {
    EXPECT_EQ(frame_rpc_record("abcd"), std::string("\x80\0\0\x04"
                                                    "abcd",
                                                    8));
    EXPECT_EQ(frame_rpc_record(""), std::string("\x80\0\0\0", 4));
}

TEST(RpcServer, ReadsEachProcedure) {
    NvPciDevice device{0, 0xb1, 0x1f, 7};
    RpcCall get = call_of(encode_get_mode_call(kXid, device));
    EXPECT_EQ(get.xid, kXid);
    EXPECT_EQ(get.procedure, RpcProcedure::GetPersistenceMode);
    EXPECT_EQ(get.device, device);

    RpcCall set = call_of(encode_set_mode_call(kXid, 1, device, true));
    EXPECT_EQ(set.procedure, RpcProcedure::SetPersistenceMode);
    EXPECT_EQ(set.device, device);
    EXPECT_EQ(set.value, 1u);
    RpcCall set_only = call_of(encode_set_mode_call(kXid, 2, device, false));
    EXPECT_EQ(set_only.procedure, RpcProcedure::SetPersistenceModeOnly);
    EXPECT_EQ(set_only.value, 0u);

    RpcCall numa = call_of(call(2, 2).device(kDevice).u32(1).bytes());
    EXPECT_EQ(numa.procedure, RpcProcedure::SetNumaStatus);
    EXPECT_EQ(numa.device, kDevice);
    EXPECT_EQ(numa.value, 1u);
}

// What nvidia-smi 580.159.04 sent for `nvidia-smi -q` on an H100 at
// 00000000:00:06.0 (captured on its socket, one connection per call):
// AUTH_NONE, version 1, GetPersistenceMode, the function 0.
TEST(RpcServer, TheCallNvidiaSmiMakes) {
    std::string captured = Xdr()
                               .u32(578242676)
                               .u32(0)
                               .u32(2)
                               .u32(35006)
                               .u32(1)
                               .u32(2)
                               .u32(0)
                               .u32(0)
                               .u32(0)
                               .u32(0)
                               .device({0, 0, 6, 0})
                               .bytes();
    RpcCall get = call_of(captured);
    EXPECT_EQ(get.procedure, RpcProcedure::GetPersistenceMode);
    EXPECT_TRUE(rpc_device_matches(get.device, "0000:00:06.0"));
    EXPECT_EQ(words(encode_rpc_answer(get, NvPdStatus::Success, true)),
              (std::vector<uint32_t>{578242676, 1, 0, 0, 0, 0, 0, 1}));
}

// An XDR enum decodes to any int (xdr_enum in nvpd_rpc_xdr.c): the value is
// the daemon's to judge (NVPD_ERR_INVALID_ARGUMENT), never GARBAGE_ARGS.
TEST(RpcServer, ValuesOutsideTheEnumsReachTheDaemon) {
    for (uint32_t value : {2u, 0x100u, 0x80000000u, 0xffffffffu}) {
        EXPECT_EQ(call_of(call(1, 1).device(kDevice).u32(value).bytes()).value, value);
        EXPECT_EQ(call_of(call(2, 1).device(kDevice).u32(value).bytes()).value, value);
        EXPECT_EQ(call_of(call(2, 2).device(kDevice).u32(value).bytes()).value, value);
    }
}

TEST(RpcServer, AnswersCarryTheStatusAndAGetsMode) {
    RpcCall get = call_of(encode_get_mode_call(kXid, kDevice));
    for (bool mode : {true, false}) {
        std::string reply = encode_rpc_answer(get, NvPdStatus::Success, mode);
        EXPECT_EQ(words(reply), accepted(kSuccess, {0, mode ? 1u : 0u}));
        RpcReply decoded = decode_get_mode_reply(reply, kXid);
        EXPECT_EQ(decoded.rpc_error, "");
        EXPECT_EQ(decoded.enabled, mode);
    }
    // GetPersistenceModeRes is a union: no mode without success.
    EXPECT_EQ(words(encode_rpc_answer(get, NvPdStatus::DeviceNotFound, true)),
              accepted(kSuccess, {2}));
    RpcCall set = call_of(encode_set_mode_call(kXid, 1, kDevice, true));
    EXPECT_EQ(words(encode_rpc_answer(set, NvPdStatus::Driver, true)), accepted(kSuccess, {3}));
    RpcReply decoded = decode_set_mode_reply(encode_rpc_answer(set, NvPdStatus::Driver), kXid);
    EXPECT_EQ(decoded.rpc_error, "");
    EXPECT_EQ(decoded.status, NvPdStatus::Driver);
}

// What nvidia-smi's AUTH_SYS credential gets, and libtirpc's checks of it
// (_svcauth_unix): a machine name over 255 bytes, more than 16 groups, or a
// body shorter than it says is BADCRED, checked before the program.
TEST(RpcServer, AuthSysCredentials) {
    EXPECT_EQ(call_of(call(1, 2).device(kDevice).bytes()).device, kDevice);
    auto with_cred = [](const std::string& body, uint32_t program = kPersistenceRpcProgram) {
        Xdr xdr;
        xdr.u32(kXid).u32(0).u32(2).u32(program).u32(1).u32(2).u32(1).opaque(body).u32(0).u32(0);
        return xdr.device(kDevice).bytes();
    };
    auto sys = [](const std::string& name, uint32_t groups) {
        Xdr xdr;
        xdr.u32(1).opaque(name).u32(0).u32(0).u32(groups);
        for (uint32_t i = 0; i < groups; ++i) {
            xdr.u32(i);
        }
        return xdr.bytes();
    };
    EXPECT_EQ(read(with_cred(sys(std::string(255, 'n'), 16))).kind, RpcIncoming::Kind::Call);
    EXPECT_EQ(read(with_cred(sys("", 0) + "more")).kind, RpcIncoming::Kind::Call);
    EXPECT_EQ(reply_words(with_cred(sys(std::string(256, 'n'), 0))), denied(kBadCred));
    EXPECT_EQ(reply_words(with_cred(sys("host", 17))), denied(kBadCred));
    std::string whole = sys("host", 2);
    for (size_t length = 0; length < whole.size(); ++length) {
        EXPECT_EQ(reply_words(with_cred(whole.substr(0, length))), denied(kBadCred)) << length;
    }
    EXPECT_EQ(reply_words(with_cred("", 100003)), denied(kBadCred));
}

TEST(RpcServer, OtherCredentialFlavors) {
    auto with_cred = [](uint32_t flavor, const std::string& body, uint32_t procedure = 2) {
        Xdr xdr;
        xdr.u32(kXid).u32(0).u32(2).u32(kPersistenceRpcProgram).u32(1).u32(procedure);
        xdr.u32(flavor).opaque(body).u32(0).u32(0);
        return xdr.device(kDevice).bytes();
    };
    EXPECT_EQ(read(with_cred(0, "anything")).kind, RpcIncoming::Kind::Call);
    EXPECT_EQ(reply_words(with_cred(2, "abcd")), denied(kRejectedCred)); // AUTH_SHORT
    EXPECT_EQ(reply_words(with_cred(3, "abcd")), denied(kAuthFailed));   // AUTH_DES
    EXPECT_EQ(reply_words(with_cred(7, "")), denied(kRejectedCred));
    EXPECT_EQ(reply_words(with_cred(390003, "")), denied(kRejectedCred));
    // RPCSEC_GSS (RFC 2203: version, procedure, sequence, service, handle),
    // with no context established.
    auto gss = [](uint32_t version, uint32_t procedure, uint32_t service) {
        return Xdr().u32(version).u32(procedure).u32(0).u32(service).opaque("ctx").bytes();
    };
    EXPECT_EQ(reply_words(with_cred(6, "")), denied(kBadCred));
    EXPECT_EQ(reply_words(with_cred(6, gss(1, 0, 1).substr(0, 19))), denied(kBadCred));
    EXPECT_EQ(reply_words(with_cred(6, gss(2, 0, 1))), denied(kBadCred));
    EXPECT_EQ(reply_words(with_cred(6, gss(1, 0, 4))), denied(kBadCred));
    EXPECT_EQ(reply_words(with_cred(6, gss(1, 0, 1))), denied(kGssCredProblem));
    EXPECT_EQ(reply_words(with_cred(6, gss(1, 1, 1))), denied(kAuthFailed));
    EXPECT_EQ(reply_words(with_cred(6, gss(1, 2, 3), 0)), denied(kAuthFailed));
    EXPECT_EQ(reply_words(with_cred(6, gss(1, 3, 2))), denied(kAuthFailed));
    EXPECT_EQ(reply_words(with_cred(6, gss(1, 3, 2), 0)), denied(kGssCredProblem));
    EXPECT_EQ(reply_words(with_cred(6, gss(1, 4, 2))), denied(kRejectedCred));
}

// _svcauth_unix() hands the call's verifier back when it has a body; every
// other reply carries AUTH_NONE.
TEST(RpcServer, AuthSysVerifierComesBack) {
    std::string sys = Xdr().u32(1).opaque("host").u32(0).u32(0).u32(0).bytes();
    Xdr with_verf;
    with_verf.u32(kXid).u32(0).u32(2).u32(kPersistenceRpcProgram).u32(1).u32(2);
    with_verf.u32(1).opaque(sys).u32(5).opaque("abcdefg").device(kDevice);
    RpcCall get = call_of(with_verf.bytes());
    std::vector<uint32_t> echoed = {kXid, 1, 0, 5, 7, 0x61626364, 0x65666700, 0, 0, 1};
    EXPECT_EQ(words(encode_rpc_answer(get, NvPdStatus::Success, true)), echoed);
    EXPECT_EQ(
        decode_get_mode_reply(encode_rpc_answer(get, NvPdStatus::Success, true), kXid).rpc_error,
        "");
    Xdr none_verf;
    none_verf.u32(kXid).u32(0).u32(2).u32(kPersistenceRpcProgram).u32(1).u32(2);
    none_verf.u32(0).u32(0).u32(5).opaque("abcdefg").device(kDevice);
    EXPECT_EQ(words(encode_rpc_answer(call_of(none_verf.bytes()), NvPdStatus::Success, true)),
              accepted(kSuccess, {0, 1}));
}

TEST(RpcServer, NullProcedureOfBothVersionsIgnoresArguments) {
    EXPECT_EQ(reply_words(call(1, 0).bytes()), accepted(kSuccess));
    EXPECT_EQ(reply_words(call(2, 0).device(kDevice).bytes()), accepted(kSuccess));
}

TEST(RpcServer, OtherProgramIsUnavailable) {
    EXPECT_EQ(reply_words(call(1, 2, 100003).device(kDevice).bytes()), accepted(kProgUnavail));
}

TEST(RpcServer, UnknownVersionIsAMismatchNamingOneToTwo) {
    for (uint32_t version : {0u, 3u, 0xffffffffu}) {
        EXPECT_EQ(reply_words(call(version, 2).device(kDevice).bytes()),
                  accepted(kProgMismatch, {1, 2}));
    }
}

TEST(RpcServer, UnknownProcedureIsUnavailable) {
    EXPECT_EQ(reply_words(call(1, 9).device(kDevice).bytes()), accepted(kProcUnavail));
    EXPECT_EQ(reply_words(call(2, 3).device(kDevice).u32(1).bytes()), accepted(kProcUnavail));
}

// xdr_callmsg() takes only RPC version 2 calls; svc_vc_recv() then marks
// the connection dead, with no reply.
TEST(RpcServer, WhatIsNotAVersionTwoCallClosesTheConnection) {
    std::string reply = Xdr().u32(kXid).u32(1).u32(0).u32(0).u32(0).u32(0).u32(0).bytes();
    std::string rpc_v3 = call(1, 2).device(kDevice).bytes();
    rpc_v3[11] = 3;
    for (const std::string& record :
         {reply, rpc_v3, Xdr().u32(kXid).u32(7).bytes(), std::string(), std::string("abc")}) {
        EXPECT_EQ(read(record).kind, RpcIncoming::Kind::Close);
    }
}

// A cut call header closes the connection; once the header is whole, cut
// arguments are GARBAGE_ARGS.
TEST(RpcServer, EveryPrefixOfACallClosesOrIsGarbage) {
    const size_t auth_sys_header = call(1, 0).bytes().size();
    const std::pair<std::string, size_t> calls[] = {
        {encode_get_mode_call(kXid, kDevice), 40},
        {encode_set_mode_call(kXid, 2, kDevice, true), 40},
        {call(1, 1).device(kDevice).u32(1).bytes(), auth_sys_header},
        {call(2, 2).device(kDevice).u32(0).bytes(), auth_sys_header},
    };
    for (const auto& [record, header] : calls) {
        for (size_t length = 0; length < record.size(); ++length) {
            RpcIncoming incoming = read(record.substr(0, length));
            if (length < header) {
                EXPECT_EQ(incoming.kind, RpcIncoming::Kind::Close) << length;
                continue;
            }
            ASSERT_EQ(incoming.kind, RpcIncoming::Kind::Reply) << length;
            EXPECT_EQ(words(incoming.reply), accepted(kGarbageArgs)) << length;
        }
    }
}

// svc_vc skips the rest of a record before reading the next call.
TEST(RpcServer, TrailingBytesAreIgnored) {
    EXPECT_EQ(call_of(encode_get_mode_call(kXid, kDevice) + std::string(4, '\0')).device, kDevice);
    EXPECT_EQ(call_of(encode_set_mode_call(kXid, 1, kDevice, true) + "x").value, 1u);
    EXPECT_EQ(call_of(call(2, 2).device(kDevice).u32(0).u32(9).bytes()).value, 0u);
}

TEST(RpcServer, HostileAuthLengthsClose) {
    auto with_auth = [](uint32_t cred_length, uint32_t verf_length, size_t body) {
        Xdr xdr;
        xdr.u32(kXid).u32(0).u32(2).u32(kPersistenceRpcProgram).u32(1).u32(2);
        xdr.u32(0).u32(cred_length);
        std::string bytes = xdr.bytes() + std::string(body, '\0');
        return bytes + Xdr().u32(0).u32(verf_length).device(kDevice).bytes();
    };
    for (const std::string& record :
         {with_auth(0xffffffff, 0, 0), with_auth(0xfffffffd, 0, 0), with_auth(401, 0, 404),
          with_auth(0x7fffffff, 0, 16), with_auth(0, 0xffffffff, 0), with_auth(0, 401, 0),
          with_auth(0, 400, 0)}) {
        EXPECT_EQ(read(record).kind, RpcIncoming::Kind::Close);
    }
    // The largest credential is fine, and the padding of an odd one skipped.
    EXPECT_EQ(call_of(with_auth(400, 0, 400)).device, kDevice);
    EXPECT_EQ(call_of(with_auth(5, 0, 8)).device, kDevice);
    // Unpadded, the arguments are read a byte early: short, so garbage.
    EXPECT_EQ(reply_words(with_auth(5, 0, 5)), accepted(kGarbageArgs));
}

TEST(RpcServer, DevicesMatchByDomainBusAndSlot) {
    EXPECT_TRUE(rpc_device_matches({0, 0x17, 0, 0}, "0000:17:00.0"));
    EXPECT_TRUE(rpc_device_matches({0, 0x17, 0, 1}, "0000:17:00.0"));
    EXPECT_TRUE(rpc_device_matches({0, 0x17, 0, 7}, "0000:17:00.3"));
    EXPECT_TRUE(rpc_device_matches({0x10000, 0, 1, 0}, "10000:00:01.0"));
    EXPECT_FALSE(rpc_device_matches({0, 0x17, 1, 0}, "0000:17:00.0"));
    EXPECT_FALSE(rpc_device_matches({0, 0x18, 0, 0}, "0000:17:00.0"));
    EXPECT_FALSE(rpc_device_matches({1, 0x17, 0, 0}, "0000:17:00.0"));
    EXPECT_FALSE(rpc_device_matches({0x10000, 0x17, 0, 0}, "0000:17:00.0"));
    EXPECT_FALSE(rpc_device_matches({0, 0x117, 0, 0}, "0000:17:00.0"));
    EXPECT_FALSE(rpc_device_matches({0xffffffff, 0x17, 0, 0}, "0000:17:00.0"));
    for (std::string_view bad : {"", "17:00.0", "0000:17:00", ":17:00.0", "0000:17:00.0x"}) {
        EXPECT_FALSE(rpc_device_matches({0, 0x17, 0, 0}, bad)) << bad;
    }
}

// command_server.c and nvidia-persistenced.c, branch by branch.
class RpcPlan : public ::testing::Test {
  protected:
    RpcCall get = call_of(encode_get_mode_call(kXid, kDevice));
    RpcCall set_on = call_of(call(1, 1).device(kDevice).u32(1).bytes());
    RpcCall set_off = call_of(call(1, 1).device(kDevice).u32(0).bytes());
    RpcCall only_on = call_of(call(2, 1).device(kDevice).u32(1).bytes());
    RpcCall only_off = call_of(call(2, 1).device(kDevice).u32(0).bytes());
    RpcCall numa_online = call_of(call(2, 2).device(kDevice).u32(1).bytes());
    RpcCall numa_offline = call_of(call(2, 2).device(kDevice).u32(0).bytes());

    static constexpr RpcGpu kHeld{true, false, true};
    static constexpr RpcGpu kOpening{false, true, true};
    static constexpr RpcGpu kDisabled{false, false, false};
    static constexpr RpcGpu kCannotHold{false, false, true}; // failed, waiting for its node, lost

    static RpcStep::Kind kind(const RpcStep& step) { return step.kind; }
    static NvPdStatus status(const RpcStep& step) {
        EXPECT_EQ(step.kind, RpcStep::Kind::Answer);
        return step.status;
    }
    static RpcCall with_value(RpcCall call, uint32_t value) {
        call.value = value;
        return call;
    }
};

TEST_F(RpcPlan, GetAsksNobodyAndSaysWhetherHeld) {
    for (uid_t uid : {uid_t{0}, uid_t{1000}, kUnknownRpcPeer}) {
        RpcStep held = plan_rpc_call(get, uid, kHeld, false);
        EXPECT_EQ(status(held), NvPdStatus::Success);
        EXPECT_TRUE(held.enabled);
        for (RpcGpu gpu : {kDisabled, kCannotHold}) {
            RpcStep off = plan_rpc_call(get, uid, gpu, false);
            EXPECT_EQ(status(off), NvPdStatus::Success);
            EXPECT_FALSE(off.enabled);
        }
        EXPECT_EQ(status(plan_rpc_call(get, uid, std::nullopt, false)), NvPdStatus::DeviceNotFound);
        EXPECT_EQ(kind(plan_rpc_call(get, uid, kOpening, false)), RpcStep::Kind::Wait);
    }
}

// _nvpdIsClientRoot() comes first: before the device and the value.
TEST_F(RpcPlan, SetsNeedRoot) {
    for (const RpcCall& call :
         {set_on, set_off, only_on, only_off, numa_online, numa_offline, with_value(set_on, 2)}) {
        for (std::optional<RpcGpu> gpu :
             {std::optional<RpcGpu>(kHeld), std::optional<RpcGpu>(kOpening),
              std::optional<RpcGpu>()}) {
            EXPECT_EQ(status(plan_rpc_call(call, 1000, gpu, false)), NvPdStatus::Permissions);
            EXPECT_EQ(status(plan_rpc_call(call, kUnknownRpcPeer, gpu, false)),
                      NvPdStatus::Unknown);
        }
    }
}

// get_device() before the value: an unknown device with a bad mode is not found.
TEST_F(RpcPlan, UnknownDeviceBeforeTheValue) {
    for (const RpcCall& call :
         {set_on, only_off, numa_online, with_value(set_on, 2), with_value(numa_online, 9)}) {
        EXPECT_EQ(status(plan_rpc_call(call, 0, std::nullopt, false)), NvPdStatus::DeviceNotFound);
    }
}

TEST_F(RpcPlan, SetOnOpensAndAnswersWhatTheOpenGave) {
    for (const RpcCall& call : {set_on, only_on}) {
        EXPECT_EQ(status(plan_rpc_call(call, 0, kHeld, false)), NvPdStatus::Success);
        EXPECT_EQ(kind(plan_rpc_call(call, 0, kDisabled, false)), RpcStep::Kind::Enable);
        EXPECT_EQ(kind(plan_rpc_call(call, 0, kCannotHold, false)), RpcStep::Kind::Enable);
        EXPECT_EQ(kind(plan_rpc_call(call, 0, kOpening, false)), RpcStep::Kind::Wait);
        // After the enable: the GPU initializing, held, or not (set_device_mode:
        // the open failed).
        EXPECT_EQ(kind(plan_rpc_call(call, 0, kOpening, true)), RpcStep::Kind::Wait);
        EXPECT_EQ(status(plan_rpc_call(call, 0, kHeld, true)), NvPdStatus::Success);
        EXPECT_EQ(status(plan_rpc_call(call, 0, kCannotHold, true)), NvPdStatus::Driver);
        EXPECT_EQ(status(plan_rpc_call(call, 0, kDisabled, true)), NvPdStatus::Driver);
    }
}

TEST_F(RpcPlan, SetOffCloses) {
    for (const RpcCall& call : {set_off, only_off}) {
        EXPECT_EQ(kind(plan_rpc_call(call, 0, kHeld, false)), RpcStep::Kind::Disable);
        // Not held but wanted: disabled so that it is not taken later.
        EXPECT_EQ(kind(plan_rpc_call(call, 0, kCannotHold, false)), RpcStep::Kind::Disable);
        EXPECT_EQ(status(plan_rpc_call(call, 0, kDisabled, false)), NvPdStatus::Success);
        EXPECT_EQ(kind(plan_rpc_call(call, 0, kOpening, false)), RpcStep::Kind::Wait);
        for (RpcGpu gpu : {kHeld, kDisabled, kCannotHold}) {
            EXPECT_EQ(status(plan_rpc_call(call, 0, gpu, true)), NvPdStatus::Success);
        }
    }
}

// set_device_mode(): the mode it is in is a success first; then any value
// but 0 and 1 is NVPD_ERR_INVALID_ARGUMENT.
TEST_F(RpcPlan, OtherModesAreInvalidArguments) {
    for (const RpcCall& call : {set_on, only_on}) {
        for (uint32_t value : {2u, 0x80000000u, 0xffffffffu}) {
            for (RpcGpu gpu : {kHeld, kDisabled, kCannotHold}) {
                EXPECT_EQ(status(plan_rpc_call(with_value(call, value), 0, gpu, false)),
                          NvPdStatus::InvalidArgument);
            }
        }
    }
}

TEST_F(RpcPlan, NumaStatusOfGpusWithoutNumaMemory) {
    for (RpcGpu gpu : {kHeld, kDisabled, kCannotHold}) {
        EXPECT_EQ(status(plan_rpc_call(numa_offline, 0, gpu, false)), NvPdStatus::Success);
        EXPECT_EQ(status(plan_rpc_call(with_value(numa_online, 2), 0, gpu, false)),
                  NvPdStatus::InvalidArgument);
    }
    EXPECT_EQ(status(plan_rpc_call(numa_online, 0, kHeld, false)), NvPdStatus::Success);
    EXPECT_EQ(status(plan_rpc_call(numa_online, 0, kCannotHold, false)), NvPdStatus::NumaFailure);
    EXPECT_EQ(status(plan_rpc_call(numa_online, 0, kDisabled, false)), NvPdStatus::NumaFailure);
    EXPECT_EQ(kind(plan_rpc_call(numa_online, 0, kOpening, false)), RpcStep::Kind::Wait);
}

TEST(RpcRecordReader, ByteByByte) {
    std::string record = encode_get_mode_call(kXid, kDevice);
    std::string framed = frame_rpc_record(record);
    RpcRecordReader reader;
    for (size_t i = 0; i < framed.size(); ++i) {
        EXPECT_EQ(reader.state(), RpcRecordReader::State::NeedMore) << i;
        EXPECT_EQ(reader.feed(framed.substr(i, 1)), 1u) << i;
    }
    ASSERT_EQ(reader.state(), RpcRecordReader::State::Record);
    EXPECT_EQ(reader.feed("more"), 0u); // the record must be taken first
    EXPECT_EQ(reader.take_record(), record);
    EXPECT_EQ(reader.state(), RpcRecordReader::State::NeedMore);
}

TEST(RpcRecordReader, FragmentsJoinIntoOneRecord) {
    std::string stream = Xdr().u32(3).bytes() + "abc" + Xdr().u32(1).bytes() + "d" +
                         Xdr().u32(0x80000002).bytes() + "ef";
    for (size_t split = 0; split <= stream.size(); ++split) {
        RpcRecordReader reader;
        size_t used = reader.feed(stream.substr(0, split));
        EXPECT_EQ(used, split);
        EXPECT_EQ(reader.feed(stream.substr(split)), stream.size() - split);
        ASSERT_EQ(reader.state(), RpcRecordReader::State::Record) << split;
        EXPECT_EQ(reader.take_record(), "abcdef");
    }
}

TEST(RpcRecordReader, TwoRecordsInOneBuffer) {
    std::string first = encode_get_mode_call(1, kDevice);
    std::string second = encode_set_mode_call(2, 1, kDevice, true);
    std::string stream = frame_rpc_record(first) + frame_rpc_record(second) + "\x80";
    RpcRecordReader reader;
    size_t used = reader.feed(stream);
    EXPECT_EQ(used, first.size() + 4);
    ASSERT_EQ(reader.state(), RpcRecordReader::State::Record);
    EXPECT_EQ(reader.take_record(), first);
    std::string_view rest = std::string_view(stream).substr(used);
    used = reader.feed(rest);
    EXPECT_EQ(used, second.size() + 4);
    ASSERT_EQ(reader.state(), RpcRecordReader::State::Record);
    EXPECT_EQ(reader.take_record(), second);
    EXPECT_EQ(reader.feed(rest.substr(used)), 1u);
    EXPECT_EQ(reader.state(), RpcRecordReader::State::NeedMore);
}

TEST(RpcRecordReader, HugeFragmentIsAnErrorAtItsHeader) {
    for (uint32_t header : {0x7fffffffu, 0xffffffffu, 0x80000801u}) {
        RpcRecordReader reader;
        std::string stream = Xdr().u32(header).bytes() + "payload";
        EXPECT_EQ(reader.feed(stream.substr(0, 3)), 3u);
        EXPECT_EQ(reader.state(), RpcRecordReader::State::NeedMore);
        // Error on the header's last byte, before any payload is buffered.
        EXPECT_EQ(reader.feed(stream.substr(3)), 1u);
        EXPECT_EQ(reader.state(), RpcRecordReader::State::Error);
        EXPECT_EQ(reader.feed("more"), 0u);
        EXPECT_EQ(reader.take_record(), "");
        EXPECT_EQ(reader.state(), RpcRecordReader::State::Error);
    }
}

TEST(RpcRecordReader, TheLimitCountsTheWholeRecord) {
    std::string exact =
        Xdr().u32(0x80000000 | kMaxRpcRecord).bytes() + std::string(kMaxRpcRecord, 'x');
    RpcRecordReader reader;
    EXPECT_EQ(reader.feed(exact), exact.size());
    ASSERT_EQ(reader.state(), RpcRecordReader::State::Record);
    EXPECT_EQ(reader.take_record().size(), kMaxRpcRecord);

    // Small fragments that add up past the limit.
    std::string piece = Xdr().u32(16).bytes() + std::string(16, 'y');
    size_t pieces = 0;
    while (reader.state() == RpcRecordReader::State::NeedMore && pieces < 1000) {
        reader.feed(piece);
        ++pieces;
    }
    EXPECT_EQ(reader.state(), RpcRecordReader::State::Error);
    EXPECT_EQ(pieces, kMaxRpcRecord / 16 + 1);
}

TEST(RpcRecordReader, EmptyFragments) {
    RpcRecordReader reader;
    EXPECT_EQ(reader.feed(std::string("\x80\0\0\0", 4)), 4u);
    ASSERT_EQ(reader.state(), RpcRecordReader::State::Record);
    std::string empty = reader.take_record();
    EXPECT_EQ(empty, "");
    EXPECT_EQ(read_rpc_record(empty).kind, RpcIncoming::Kind::Close);

    // An empty last fragment may end a record that has bytes.
    EXPECT_EQ(reader.feed(Xdr().u32(4).bytes() + "abcd" + Xdr().u32(0x80000000).bytes()), 12u);
    ASSERT_EQ(reader.state(), RpcRecordReader::State::Record);
    EXPECT_EQ(reader.take_record(), "abcd");

    // An empty fragment that is not the last could repeat forever.
    EXPECT_EQ(reader.feed(std::string(8, '\0')), 4u);
    EXPECT_EQ(reader.state(), RpcRecordReader::State::Error);
}

TEST(RpcRecordReader, TakeBeforeARecordKeepsWhatCame) {
    std::string framed = frame_rpc_record("abcdefgh");
    RpcRecordReader reader;
    reader.feed(framed.substr(0, 6));
    EXPECT_EQ(reader.take_record(), "");
    reader.feed(framed.substr(6));
    ASSERT_EQ(reader.state(), RpcRecordReader::State::Record);
    EXPECT_EQ(reader.take_record(), "abcdefgh");
}

TEST(RpcClient, ReplyErrors) {
    std::string good = Xdr().u32(kXid).u32(1).u32(0).u32(0).u32(0).u32(0).u32(0).u32(1).bytes();
    ASSERT_EQ(decode_get_mode_reply(good, kXid).rpc_error, "");
    EXPECT_EQ(decode_get_mode_reply(good, kXid + 1).rpc_error, "xid mismatch");
    for (size_t length = 0; length < good.size(); ++length) {
        EXPECT_NE(decode_get_mode_reply(good.substr(0, length), kXid).rpc_error, "") << length;
    }
    EXPECT_EQ(decode_get_mode_reply(good.substr(0, 8), kXid).rpc_error, "short reply");
    EXPECT_EQ(decode_get_mode_reply(good + std::string(4, '\0'), kXid).rpc_error,
              "trailing bytes in reply");
    EXPECT_EQ(decode_set_mode_reply(good, kXid).rpc_error, "trailing bytes in reply");

    auto reply = [](uint32_t reply_stat, const std::vector<uint32_t>& rest) {
        Xdr xdr;
        xdr.u32(kXid).u32(1).u32(reply_stat);
        for (uint32_t word : rest) {
            xdr.u32(word);
        }
        return xdr.bytes();
    };
    EXPECT_EQ(decode_set_mode_reply(reply(1, {0, 2, 2}), kXid).rpc_error,
              "denied: RPC version mismatch");
    EXPECT_EQ(decode_set_mode_reply(reply(1, {1, 1}), kXid).rpc_error,
              "denied: authentication error");
    EXPECT_EQ(decode_set_mode_reply(reply(0, {0, 0, 1}), kXid).rpc_error, "program unavailable");
    EXPECT_EQ(decode_set_mode_reply(reply(0, {0, 0, 2, 1, 2}), kXid).rpc_error,
              "program version mismatch");
    EXPECT_EQ(decode_set_mode_reply(reply(0, {0, 0, 3}), kXid).rpc_error, "procedure unavailable");
    EXPECT_EQ(decode_set_mode_reply(reply(0, {0, 0, 4}), kXid).rpc_error, "garbage arguments");
    EXPECT_EQ(decode_set_mode_reply(reply(0, {0, 0, 9}), kXid).rpc_error, "bad accept status");
    EXPECT_EQ(decode_set_mode_reply(reply(2, {}), kXid).rpc_error, "bad reply status");
    EXPECT_EQ(decode_set_mode_reply(reply(0, {0, 401}), kXid).rpc_error,
              "short reply or bad verifier");
    EXPECT_EQ(decode_get_mode_reply(reply(0, {0, 0, 0, 0, 2}), kXid).rpc_error,
              "short reply or bad mode");
    // A call is not a reply, even with the right xid.
    EXPECT_EQ(decode_set_mode_reply(encode_set_mode_call(kXid, 1, kDevice, true), kXid).rpc_error,
              "not a reply");

    // A verifier the server chose to send is skipped; a status we do not
    // know is passed on.
    RpcReply odd = decode_set_mode_reply(reply(0, {1, 5, 0x41414141, 0x41000000, 0, 42}), kXid);
    EXPECT_EQ(odd.rpc_error, "");
    EXPECT_EQ(static_cast<uint32_t>(odd.status), 42u);
    EXPECT_STREQ(nvpd_status_name(odd.status), "unrecognized status");
    RpcReply failed = decode_set_mode_reply(reply(1, {0, 2, 2}), kXid);
    EXPECT_EQ(failed.status, NvPdStatus::Unknown);
}

TEST(RpcClient, StatusNames) {
    EXPECT_STREQ(nvpd_status_name(NvPdStatus::Success), "success");
    EXPECT_STREQ(nvpd_status_name(NvPdStatus::DeviceNotFound), "device not found");
    EXPECT_STREQ(nvpd_status_name(NvPdStatus::Permissions), "permissions");
    EXPECT_STREQ(nvpd_status_name(NvPdStatus::NumaFailure), "numa failure");
    for (uint32_t status = 0; status <= 11; ++status) {
        std::string name = nvpd_status_name(static_cast<NvPdStatus>(status));
        EXPECT_NE(name, "unrecognized status") << status;
    }
}

} // namespace
} // namespace gpuinit
