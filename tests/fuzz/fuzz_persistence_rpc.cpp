// The persistence RPC: the input after its first two bytes is a byte stream
// fed to RpcRecordReader in chunks whose sizes those two bytes give; each
// record it yields is handled as a call and decoded as a reply, and so is
// the whole input.
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

// Says what it was asked and answers what the input's first byte chose.
class CheckingHandler : public PersistenceRpcHandler {
  public:
    explicit CheckingHandler(uint8_t choice)
        : status(static_cast<NvPdStatus>(choice % 13)), mode((choice & 0x80) != 0) {}

    NvPdStatus get_mode(const NvPciDevice& asked, bool* enabled) override {
        ++calls;
        was_get = true;
        device = asked;
        *enabled = mode;
        return status;
    }
    NvPdStatus set_mode(const NvPciDevice& asked, bool asked_enable, uid_t peer_uid) override {
        ++calls;
        device = asked;
        enable = asked_enable;
        FUZZ_CHECK(peer_uid == kPeer);
        return status;
    }

    const NvPdStatus status;
    const bool mode;
    int calls = 0;
    bool was_get = false;
    NvPciDevice device;
    bool enable = false;
};

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

void check_as_call(std::string_view record, uint8_t choice) {
    CheckingHandler handler(choice);
    auto reply = handle_rpc_record(record, handler, kPeer);
    FUZZ_CHECK(handler.calls <= 1);
    if (!reply) {
        FUZZ_CHECK(handler.calls == 0);
        return;
    }
    // Every reply is whole XDR words, answers the call's xid and is a reply.
    FUZZ_CHECK(reply->size() % 4 == 0 && reply->size() >= 24);
    FUZZ_CHECK(reply->substr(0, 4) == record.substr(0, 4));
    FUZZ_CHECK(load_u32(std::string_view(*reply).substr(4)) == 1);
    if (handler.calls == 0) {
        return;
    }

    // The handler ran only for an RPC version 2 call to our get or set
    // whose arguments end the record and decode as it was told.
    uint32_t version = load_u32(record.substr(16));
    uint32_t procedure = load_u32(record.substr(20));
    FUZZ_CHECK(load_u32(record.substr(4)) == 0 && load_u32(record.substr(8)) == 2);
    FUZZ_CHECK(load_u32(record.substr(12)) == kPersistenceRpcProgram);
    std::string expected_call =
        handler.was_get
            ? encode_get_mode_call(load_u32(record), handler.device)
            : encode_set_mode_call(load_u32(record), version, handler.device, handler.enable);
    FUZZ_CHECK(handler.was_get ? version == 1 && procedure == 2
                               : (version == 1 || version == 2) && procedure == 1);
    size_t args = handler.was_get ? 16 : 20;
    FUZZ_CHECK(record.size() >= 40 + args);
    FUZZ_CHECK(record.substr(record.size() - args) ==
               std::string_view(expected_call).substr(expected_call.size() - args));

    // The reply decodes to what the handler said, whatever the credential.
    uint32_t xid = load_u32(record);
    RpcReply decoded =
        handler.was_get ? decode_get_mode_reply(*reply, xid) : decode_set_mode_reply(*reply, xid);
    FUZZ_CHECK(decoded.rpc_error.empty());
    FUZZ_CHECK(decoded.status == handler.status);
    if (handler.was_get && handler.status == NvPdStatus::Success) {
        FUZZ_CHECK(decoded.enabled == handler.mode);
    }
    CheckingHandler again(choice);
    FUZZ_CHECK(handle_rpc_record(expected_call, again, kPeer) == reply);
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
