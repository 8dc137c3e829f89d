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

class FakeHandler : public PersistenceRpcHandler {
  public:
    NvPdStatus get_mode(const NvPciDevice& device, bool* enabled) override {
        ++gets;
        last_device = device;
        *enabled = mode;
        return status;
    }
    NvPdStatus set_mode(const NvPciDevice& device, bool enable, uid_t peer_uid) override {
        ++sets;
        last_device = device;
        last_enable = enable;
        last_uid = peer_uid;
        return status;
    }
    int calls() const { return gets + sets; }

    NvPdStatus status = NvPdStatus::Success;
    bool mode = true;
    int gets = 0;
    int sets = 0;
    NvPciDevice last_device;
    bool last_enable = false;
    uid_t last_uid = 12345;
};

std::vector<uint32_t> reply_words(const std::string& record, FakeHandler& handler, uid_t uid = 0) {
    auto reply = handle_rpc_record(record, handler, uid);
    EXPECT_TRUE(reply);
    return reply ? words(*reply) : std::vector<uint32_t>{};
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

TEST(RpcServer, GetRoundTrip) {
    FakeHandler handler;
    for (bool mode : {true, false}) {
        handler.mode = mode;
        auto reply = handle_rpc_record(encode_get_mode_call(kXid, kDevice), handler, 1000);
        ASSERT_TRUE(reply);
        EXPECT_EQ(words(*reply), accepted(kSuccess, {0, mode ? 1u : 0u}));
        RpcReply decoded = decode_get_mode_reply(*reply, kXid);
        EXPECT_EQ(decoded.rpc_error, "");
        EXPECT_EQ(decoded.status, NvPdStatus::Success);
        EXPECT_EQ(decoded.enabled, mode);
    }
    EXPECT_EQ(handler.gets, 2);
    EXPECT_EQ(handler.last_device, kDevice);
}

TEST(RpcServer, GetFailureCarriesNoMode) {
    FakeHandler handler;
    handler.status = NvPdStatus::DeviceNotFound;
    auto reply = handle_rpc_record(encode_get_mode_call(kXid, kDevice), handler, 0);
    ASSERT_TRUE(reply);
    EXPECT_EQ(words(*reply), accepted(kSuccess, {2}));
    RpcReply decoded = decode_get_mode_reply(*reply, kXid);
    EXPECT_EQ(decoded.rpc_error, "");
    EXPECT_EQ(decoded.status, NvPdStatus::DeviceNotFound);
    EXPECT_FALSE(decoded.enabled);
}

TEST(RpcServer, SetRoundTripBothVersions) {
    for (uint32_t version : {1u, 2u}) {
        FakeHandler handler;
        NvPciDevice device{0, 0xb1, 0x1f, 7};
        auto reply =
            handle_rpc_record(encode_set_mode_call(kXid, version, device, true), handler, 0);
        ASSERT_TRUE(reply);
        EXPECT_EQ(words(*reply), accepted(kSuccess, {0}));
        EXPECT_EQ(handler.sets, 1);
        EXPECT_EQ(handler.last_device, device);
        EXPECT_TRUE(handler.last_enable);
        EXPECT_EQ(handler.last_uid, 0u);
        RpcReply decoded = decode_set_mode_reply(*reply, kXid);
        EXPECT_EQ(decoded.rpc_error, "");
        EXPECT_EQ(decoded.status, NvPdStatus::Success);
        EXPECT_FALSE(decoded.enabled);
    }
}

TEST(RpcServer, HandBuiltSetWithAuthSysCredential) {
    FakeHandler handler;
    std::string record = call(2, 1).device(kDevice).u32(0).bytes();
    EXPECT_EQ(reply_words(record, handler), accepted(kSuccess, {0}));
    EXPECT_EQ(handler.sets, 1);
    EXPECT_EQ(handler.last_device, kDevice);
    EXPECT_FALSE(handler.last_enable);
}

TEST(RpcServer, NonRootPeerReachesHandlerAsItsUid) {
    FakeHandler handler;
    handler.status = NvPdStatus::Permissions;
    auto reply = handle_rpc_record(encode_set_mode_call(kXid, 1, kDevice, false), handler, 1000);
    ASSERT_TRUE(reply);
    EXPECT_EQ(handler.last_uid, 1000u);
    RpcReply decoded = decode_set_mode_reply(*reply, kXid);
    EXPECT_EQ(decoded.rpc_error, "");
    EXPECT_EQ(decoded.status, NvPdStatus::Permissions);
}

TEST(RpcServer, NumaStatusIsUnsupported) {
    FakeHandler handler;
    EXPECT_EQ(reply_words(call(2, 2).device(kDevice).u32(1).bytes(), handler),
              accepted(kSuccess, {10}));
    EXPECT_EQ(reply_words(call(2, 2).device(kDevice).bytes(), handler), accepted(kGarbageArgs));
    EXPECT_EQ(handler.calls(), 0);
}

TEST(RpcServer, NullProcedureOfBothVersions) {
    FakeHandler handler;
    EXPECT_EQ(reply_words(call(1, 0).bytes(), handler), accepted(kSuccess));
    EXPECT_EQ(reply_words(call(2, 0).bytes(), handler), accepted(kSuccess));
    EXPECT_EQ(handler.calls(), 0);
}

TEST(RpcServer, OtherProgramIsUnavailable) {
    FakeHandler handler;
    EXPECT_EQ(reply_words(call(1, 2, 100003).device(kDevice).bytes(), handler),
              accepted(kProgUnavail));
    EXPECT_EQ(handler.calls(), 0);
}

TEST(RpcServer, UnknownVersionIsAMismatchNamingOneToTwo) {
    FakeHandler handler;
    for (uint32_t version : {0u, 3u, 0xffffffffu}) {
        EXPECT_EQ(reply_words(call(version, 2).device(kDevice).bytes(), handler),
                  accepted(kProgMismatch, {1, 2}));
    }
    EXPECT_EQ(handler.calls(), 0);
}

TEST(RpcServer, UnknownProcedureIsUnavailable) {
    FakeHandler handler;
    EXPECT_EQ(reply_words(call(1, 9).device(kDevice).bytes(), handler), accepted(kProcUnavail));
    EXPECT_EQ(reply_words(call(2, 3).device(kDevice).u32(1).bytes(), handler),
              accepted(kProcUnavail));
    EXPECT_EQ(handler.calls(), 0);
}

TEST(RpcServer, OtherRpcVersionIsDenied) {
    FakeHandler handler;
    // Nothing after the RPC version is read: it may be laid out otherwise.
    std::string record = Xdr().u32(kXid).u32(0).u32(3).bytes();
    EXPECT_EQ(reply_words(record, handler),
              (std::vector<uint32_t>{kXid, 1, 1, 0, 2, 2})); // MSG_DENIED, RPC_MISMATCH 2..2
    EXPECT_EQ(handler.calls(), 0);
}

TEST(RpcServer, WhatIsNotACallGetsNoReply) {
    FakeHandler handler;
    std::string reply = Xdr().u32(kXid).u32(1).u32(0).u32(0).u32(0).u32(0).u32(0).bytes();
    EXPECT_FALSE(handle_rpc_record(reply, handler, 0));
    EXPECT_FALSE(handle_rpc_record(Xdr().u32(kXid).u32(7).bytes(), handler, 0));
    EXPECT_FALSE(handle_rpc_record("", handler, 0));
    EXPECT_FALSE(handle_rpc_record("abc", handler, 0));
    EXPECT_EQ(handler.calls(), 0);
}

// A cut call header is dropped (nothing in it can be trusted); once the
// header is whole, cut arguments are GARBAGE_ARGS. The handler never runs.
TEST(RpcServer, EveryPrefixOfACallIsDroppedOrGarbage) {
    const size_t auth_sys_header = call(1, 0).bytes().size();
    const std::pair<std::string, size_t> calls[] = {
        {encode_get_mode_call(kXid, kDevice), 40},
        {encode_set_mode_call(kXid, 2, kDevice, true), 40},
        {call(1, 1).device(kDevice).u32(1).bytes(), auth_sys_header},
        {call(2, 2).device(kDevice).u32(0).bytes(), auth_sys_header},
    };
    for (const auto& [record, header] : calls) {
        for (size_t length = 0; length < record.size(); ++length) {
            FakeHandler handler;
            auto reply = handle_rpc_record(record.substr(0, length), handler, 0);
            EXPECT_EQ(handler.calls(), 0) << length;
            ASSERT_EQ(reply.has_value(), length >= header) << length;
            if (reply) {
                EXPECT_EQ(words(*reply), accepted(kGarbageArgs)) << length;
            }
        }
    }
}

TEST(RpcServer, TrailingBytesAreGarbage) {
    FakeHandler handler;
    EXPECT_EQ(reply_words(encode_get_mode_call(kXid, kDevice) + std::string(4, '\0'), handler),
              accepted(kGarbageArgs));
    EXPECT_EQ(reply_words(encode_set_mode_call(kXid, 1, kDevice, true) + "x", handler),
              accepted(kGarbageArgs));
    EXPECT_EQ(reply_words(call(1, 0).u32(0).bytes(), handler), accepted(kGarbageArgs));
    EXPECT_EQ(reply_words(call(2, 2).device(kDevice).u32(0).u32(0).bytes(), handler),
              accepted(kGarbageArgs));
    EXPECT_EQ(handler.calls(), 0);
}

TEST(RpcServer, ModeOtherThanZeroOrOneIsGarbage) {
    FakeHandler handler;
    for (uint32_t mode : {2u, 0x100u, 0x80000000u, 0xffffffffu}) {
        EXPECT_EQ(reply_words(call(1, 1).device(kDevice).u32(mode).bytes(), handler),
                  accepted(kGarbageArgs));
    }
    EXPECT_EQ(handler.calls(), 0);
}

TEST(RpcServer, HostileAuthLengthsAreDropped) {
    FakeHandler handler;
    auto with_auth = [](uint32_t cred_length, uint32_t verf_length, size_t body) {
        Xdr xdr;
        xdr.u32(kXid).u32(0).u32(2).u32(kPersistenceRpcProgram).u32(1).u32(2);
        xdr.u32(1).u32(cred_length);
        std::string bytes = xdr.bytes() + std::string(body, '\0');
        return bytes + Xdr().u32(0).u32(verf_length).device(kDevice).bytes();
    };
    for (const std::string& record :
         {with_auth(0xffffffff, 0, 0), with_auth(0xfffffffd, 0, 0), with_auth(401, 0, 404),
          with_auth(0x7fffffff, 0, 16), with_auth(0, 0xffffffff, 0), with_auth(0, 401, 0),
          with_auth(0, 400, 0)}) {
        EXPECT_FALSE(handle_rpc_record(record, handler, 0));
    }
    EXPECT_EQ(handler.calls(), 0);
    // The largest credential is fine, and the padding of an odd one skipped.
    EXPECT_EQ(reply_words(with_auth(400, 0, 400), handler), accepted(kSuccess, {0, 1}));
    EXPECT_EQ(reply_words(with_auth(5, 0, 8), handler), accepted(kSuccess, {0, 1}));
    // Unpadded, the arguments are read a byte early: short, so garbage.
    EXPECT_EQ(reply_words(with_auth(5, 0, 5), handler), accepted(kGarbageArgs));
    EXPECT_EQ(handler.gets, 2);
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
    FakeHandler handler;
    EXPECT_FALSE(handle_rpc_record(empty, handler, 0));

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
