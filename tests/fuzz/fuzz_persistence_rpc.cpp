// The persistence RPC: the input after its first two bytes is a byte stream
// fed to RpcRecordReader in chunks whose sizes those two bytes give; each
// record it yields is read as a call (and planned for GPUs the first byte
// chooses) and decoded as a reply, and so is the whole input.
#include "fuzz_check.hpp"
#include "gpuinit/persist/rpc.hpp"

#include <algorithm>
#include <optional>

namespace gpuinit::fuzz {
namespace {

constexpr uid_t kPeer = 4242;

uint32_t load_u32(std::string_view bytes) {
    uint32_t value = 0;
    for (size_t i = 0; i < 4 && i < bytes.size(); ++i) {
        value = value << 8 | static_cast<unsigned char>(bytes[i]);
    }
    return value;
}

void check_decoded(const RpcReply& reply, bool get) {
    if (!reply.rpc_error.empty()) {
        FUZZ_CHECK(one_safe_line(reply.rpc_error));
        FUZZ_CHECK(reply.status == NvPdStatus::Unknown && !reply.enabled);
        return;
    }
    FUZZ_CHECK(reply.enabled.has_value() == (get && reply.status == NvPdStatus::Success));
}

void check_as_reply(std::string_view record) {
    uint32_t xid = load_u32(record);
    check_decoded(decode_get_mode_reply(record, xid), true);
    check_decoded(decode_set_mode_reply(record, xid), false);
    FUZZ_CHECK(!decode_set_mode_reply(record, xid + 1).rpc_error.empty() || record.size() < 4);
}

// The plan for a call follows command_server.c's order whatever the GPU:
// the uid before the device, the device before the value.
void check_plan(const RpcCall& call, uint8_t choice) {
    bool get = call.procedure == RpcProcedure::GetPersistenceMode;
    std::optional<RpcGpu> gpu;
    if ((choice & 0x01) != 0) {
        gpu = RpcGpu{(choice & 0x02) != 0, (choice & 0x04) != 0, (choice & 0x08) != 0};
    }
    for (uid_t uid : {uid_t{0}, kPeer, kUnknownRpcPeer}) {
        for (bool applied : {false, true}) {
            RpcStep step = plan_rpc_call(call, uid, gpu, applied);
            if (!get && uid != 0) {
                FUZZ_CHECK(step.kind == RpcStep::Kind::Answer);
                FUZZ_CHECK(step.status ==
                           (uid == kPeer ? NvPdStatus::Permissions : NvPdStatus::Unknown));
                continue;
            }
            if (!gpu) {
                FUZZ_CHECK(step.kind == RpcStep::Kind::Answer &&
                           step.status == NvPdStatus::DeviceNotFound);
                continue;
            }
            if (gpu->settling) {
                FUZZ_CHECK(step.kind == RpcStep::Kind::Wait);
                continue;
            }
            if (step.kind != RpcStep::Kind::Answer) {
                // Only a set changes anything, once, and only with 0 or 1.
                FUZZ_CHECK(!get && call.procedure != RpcProcedure::SetNumaStatus && !applied);
                FUZZ_CHECK(call.value == (step.kind == RpcStep::Kind::Enable ? 1u : 0u));
                continue;
            }
            FUZZ_CHECK(step.enabled == (get && gpu->held));
            if (!get && call.value > 1) {
                FUZZ_CHECK(step.status == NvPdStatus::InvalidArgument);
            }
        }
    }
}

void check_as_call(std::string_view record, uint8_t choice) {
    RpcIncoming incoming = read_rpc_record(record);
    if (incoming.kind == RpcIncoming::Kind::Close) {
        return;
    }
    // Every reply is whole XDR words, answers the call's xid and is a reply.
    if (incoming.kind == RpcIncoming::Kind::Reply) {
        const std::string& reply = incoming.reply;
        FUZZ_CHECK(reply.size() % 4 == 0 && reply.size() >= 20);
        FUZZ_CHECK(reply.substr(0, 4) == record.substr(0, 4));
        FUZZ_CHECK(load_u32(std::string_view(reply).substr(4)) == 1);
        return;
    }
    const RpcCall& call = incoming.call;
    FUZZ_CHECK(call.xid == load_u32(record));
    FUZZ_CHECK(load_u32(record.substr(4)) == 0 && load_u32(record.substr(8)) == 2);
    FUZZ_CHECK(load_u32(record.substr(12)) == kPersistenceRpcProgram);
    uint32_t version = load_u32(record.substr(16));
    uint32_t procedure = load_u32(record.substr(20));
    switch (call.procedure) {
    case RpcProcedure::SetPersistenceMode:
        FUZZ_CHECK(version == 1 && procedure == 1);
        break;
    case RpcProcedure::GetPersistenceMode:
        FUZZ_CHECK(version == 1 && procedure == 2);
        break;
    case RpcProcedure::SetPersistenceModeOnly:
        FUZZ_CHECK(version == 2 && procedure == 1);
        break;
    case RpcProcedure::SetNumaStatus:
        FUZZ_CHECK(version == 2 && procedure == 2);
        break;
    }
    FUZZ_CHECK(call.reply_verifier.size() % 4 == 0 && call.reply_verifier.size() >= 8);
    check_plan(call, choice);

    // The answer decodes to what was answered, whatever the verifier.
    auto status = static_cast<NvPdStatus>(choice % 13);
    bool mode = (choice & 0x80) != 0;
    std::string reply = encode_rpc_answer(call, status, mode);
    bool get = call.procedure == RpcProcedure::GetPersistenceMode;
    RpcReply decoded =
        get ? decode_get_mode_reply(reply, call.xid) : decode_set_mode_reply(reply, call.xid);
    FUZZ_CHECK(decoded.rpc_error.empty());
    FUZZ_CHECK(decoded.status == status);
    if (get && status == NvPdStatus::Success) {
        FUZZ_CHECK(decoded.enabled == mode);
    }
}

void check_record(std::string_view record, uint8_t choice) {
    FUZZ_CHECK(record.size() <= kMaxRpcRecord);
    check_as_call(record, choice);
    check_as_reply(record);

    RpcRecordReader reader;
    std::string framed = frame_rpc_record(record);
    FUZZ_CHECK(reader.feed(framed) == framed.size());
    FUZZ_CHECK(reader.state() == RpcRecordReader::State::Record);
    FUZZ_CHECK(reader.take_record() == record);
}

} // namespace
} // namespace gpuinit::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace gpuinit;
    using namespace gpuinit::fuzz;
    std::string_view input = as_text(data, size);
    uint8_t choice = size > 0 ? data[0] : 0;
    check_as_call(input, choice);
    check_as_reply(input);

    std::string_view chunk_sizes = input.substr(0, std::min<size_t>(2, size));
    std::string_view stream = input.substr(chunk_sizes.size());
    RpcRecordReader reader;
    for (size_t n = 0; !stream.empty() && reader.state() != RpcRecordReader::State::Error; ++n) {
        size_t chunk = stream.size();
        if (!chunk_sizes.empty()) {
            chunk = 1 + static_cast<unsigned char>(chunk_sizes[n % chunk_sizes.size()]);
        }
        std::string_view piece = stream.substr(0, chunk);
        stream.remove_prefix(piece.size());
        for (;;) {
            size_t used = reader.feed(piece);
            FUZZ_CHECK(used <= piece.size());
            piece.remove_prefix(used);
            if (reader.state() == RpcRecordReader::State::Record) {
                check_record(reader.take_record(), choice);
                FUZZ_CHECK(reader.state() == RpcRecordReader::State::NeedMore);
                continue;
            }
            if (reader.state() == RpcRecordReader::State::Error) {
                FUZZ_CHECK(reader.feed(piece) == 0 && reader.take_record().empty());
                break;
            }
            FUZZ_CHECK(piece.empty());
            break;
        }
    }
    return 0;
}
