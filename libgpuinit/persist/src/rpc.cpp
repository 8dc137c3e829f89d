#include "gpuinit/persist/rpc.hpp"

#include <algorithm>

namespace gpuinit {

namespace {

// RFC 5531's message numbers.
constexpr uint32_t kRpcVersion = 2;
constexpr uint32_t kCall = 0;
constexpr uint32_t kReply = 1;
constexpr uint32_t kMsgAccepted = 0;
constexpr uint32_t kMsgDenied = 1;
constexpr uint32_t kRpcMismatch = 0;
constexpr uint32_t kAuthError = 1;
constexpr uint32_t kAuthNone = 0;
constexpr uint32_t kMaxAuthBytes = 400;
constexpr uint32_t kLastFragment = 0x80000000;

enum class AcceptStat : uint32_t {
    Success = 0,
    ProgUnavail = 1,
    ProgMismatch = 2,
    ProcUnavail = 3,
    GarbageArgs = 4,
    SystemErr = 5,
};

constexpr uint32_t kLowVersion = 1;
constexpr uint32_t kHighVersion = 2;
constexpr uint32_t kProcNull = 0;
constexpr uint32_t kProcSet = 1;     // v1 SetPersistenceMode, v2 SetPersistenceModeOnly
constexpr uint32_t kProcGet = 2;     // v1
constexpr uint32_t kProcSetNuma = 2; // v2

uint32_t load_u32(const char* bytes) {
    auto byte = [bytes](int i) {
        return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i]));
    };
    return byte(0) << 24 | byte(1) << 16 | byte(2) << 8 | byte(3);
}

void put_u32(std::string& out, uint32_t value) {
    out += static_cast<char>(value >> 24);
    out += static_cast<char>(value >> 16);
    out += static_cast<char>(value >> 8);
    out += static_cast<char>(value);
}

// Reads XDR items from a record. A failed read consumes nothing, so every
// later read fails too; the record is the peer's, so nothing it announces is
// believed before it is checked against what is left.
class XdrReader {
  public:
    explicit XdrReader(std::string_view data) : data_(data) {}

    std::optional<uint32_t> u32() {
        if (data_.size() < 4) {
            return std::nullopt;
        }
        uint32_t value = load_u32(data_.data());
        data_.remove_prefix(4);
        return value;
    }

    // An opaque_auth (flavor, opaque body<400>), skipped: the caller's uid
    // comes from SO_PEERCRED, never from a credential it wrote itself.
    bool skip_auth() {
        auto flavor = u32();
        auto length = u32();
        if (!flavor || !length || *length > kMaxAuthBytes) {
            return false;
        }
        size_t padded = (size_t{*length} + 3) & ~size_t{3};
        if (padded > data_.size()) {
            return false;
        }
        data_.remove_prefix(padded);
        return true;
    }

    std::optional<NvPciDevice> device() {
        NvPciDevice device;
        for (uint32_t* field : {&device.domain, &device.bus, &device.slot, &device.function}) {
            auto value = u32();
            if (!value) {
                return std::nullopt;
            }
            *field = *value;
        }
        return device;
    }

    // NvPersistenceMode is an enum of two values: anything else is garbage,
    // not "enabled".
    std::optional<bool> mode() {
        auto value = u32();
        if (!value || *value > 1) {
            return std::nullopt;
        }
        return *value == 1;
    }

    bool at_end() const { return data_.empty(); }

  private:
    std::string_view data_;
};

std::string accepted_reply(uint32_t xid, AcceptStat stat) {
    std::string reply;
    put_u32(reply, xid);
    put_u32(reply, kReply);
    put_u32(reply, kMsgAccepted);
    put_u32(reply, kAuthNone);
    put_u32(reply, 0);
    put_u32(reply, static_cast<uint32_t>(stat));
    return reply;
}

std::string status_reply(uint32_t xid, NvPdStatus status) {
    std::string reply = accepted_reply(xid, AcceptStat::Success);
    put_u32(reply, static_cast<uint32_t>(status));
    return reply;
}

std::string call_header(uint32_t xid, uint32_t version, uint32_t procedure) {
    std::string call;
    for (uint32_t word : {xid, kCall, kRpcVersion, kPersistenceRpcProgram, version, procedure,
                          kAuthNone, 0u, kAuthNone, 0u}) {
        put_u32(call, word);
    }
    return call;
}

void put_device(std::string& out, const NvPciDevice& device) {
    for (uint32_t word : {device.domain, device.bus, device.slot, device.function}) {
        put_u32(out, word);
    }
}

// The procedure's reply once the call header has been accepted: `in` is at
// the arguments.
std::string dispatch(XdrReader& in, uint32_t xid, uint32_t version, uint32_t procedure,
                     PersistenceRpcHandler& handler, uid_t peer_uid) {
    if (procedure == kProcNull) {
        return accepted_reply(xid, in.at_end() ? AcceptStat::Success : AcceptStat::GarbageArgs);
    }
    if (procedure == kProcSet) {
        // v2's SetPersistenceModeOnly differs from v1's Set only in leaving
        // NUMA onlining alone, which gpu-persist never does anyway.
        auto device = in.device();
        auto enable = in.mode();
        if (!device || !enable || !in.at_end()) {
            return accepted_reply(xid, AcceptStat::GarbageArgs);
        }
        return status_reply(xid, handler.set_mode(*device, *enable, peer_uid));
    }
    if (procedure == kProcGet && version == 1) {
        auto device = in.device();
        if (!device || !in.at_end()) {
            return accepted_reply(xid, AcceptStat::GarbageArgs);
        }
        bool enabled = false;
        NvPdStatus status = handler.get_mode(*device, &enabled);
        std::string reply = status_reply(xid, status);
        if (status == NvPdStatus::Success) {
            put_u32(reply, enabled ? 1 : 0);
        }
        return reply;
    }
    if (procedure == kProcSetNuma && version == 2) {
        // The NUMA status is an enum whose values we never act on.
        auto device = in.device();
        auto numa_status = in.u32();
        if (!device || !numa_status || !in.at_end()) {
            return accepted_reply(xid, AcceptStat::GarbageArgs);
        }
        return status_reply(xid, NvPdStatus::NumaFailure);
    }
    return accepted_reply(xid, AcceptStat::ProcUnavail);
}

// The reply header of `record` up to the results: an error message, or
// empty with `in` at the results.
std::string read_reply_header(XdrReader& in, uint32_t xid) {
    auto reply_xid = in.u32();
    if (reply_xid && *reply_xid != xid) {
        return "xid mismatch";
    }
    auto type = in.u32();
    if (type && *type != kReply) {
        return "not a reply";
    }
    auto reply_stat = in.u32();
    if (!reply_stat) {
        return "short reply";
    }
    if (*reply_stat == kMsgDenied) {
        auto reject_stat = in.u32();
        if (reject_stat == kRpcMismatch) {
            return "denied: RPC version mismatch";
        }
        if (reject_stat == kAuthError) {
            return "denied: authentication error";
        }
        return "denied";
    }
    if (*reply_stat != kMsgAccepted) {
        return "bad reply status";
    }
    if (!in.skip_auth()) {
        return "short reply or bad verifier";
    }
    auto stat = in.u32();
    if (!stat) {
        return "short reply";
    }
    switch (static_cast<AcceptStat>(*stat)) {
    case AcceptStat::Success:
        return {};
    case AcceptStat::ProgUnavail:
        return "program unavailable";
    case AcceptStat::ProgMismatch:
        return "program version mismatch";
    case AcceptStat::ProcUnavail:
        return "procedure unavailable";
    case AcceptStat::GarbageArgs:
        return "garbage arguments";
    case AcceptStat::SystemErr:
        return "system error";
    }
    return "bad accept status";
}

RpcReply decode_reply(std::string_view record, uint32_t xid, bool with_mode) {
    RpcReply result;
    XdrReader in(record);
    result.rpc_error = read_reply_header(in, xid);
    if (!result.rpc_error.empty()) {
        return result;
    }
    auto status = in.u32();
    if (!status) {
        result.rpc_error = "short reply";
        return result;
    }
    std::optional<bool> enabled;
    if (with_mode && *status == static_cast<uint32_t>(NvPdStatus::Success)) {
        enabled = in.mode();
        if (!enabled) {
            result.rpc_error = "short reply or bad mode";
            return result;
        }
    }
    if (!in.at_end()) {
        result.rpc_error = "trailing bytes in reply";
        return result;
    }
    result.status = static_cast<NvPdStatus>(*status);
    result.enabled = enabled;
    return result;
}

} // namespace

size_t RpcRecordReader::feed(std::string_view data) {
    size_t used = 0;
    while (state_ == State::NeedMore && used < data.size()) {
        if (!in_fragment_) {
            size_t n = std::min(4 - header_.size(), data.size() - used);
            header_.append(data.substr(used, n));
            used += n;
            if (header_.size() < 4) {
                break;
            }
            uint32_t header = load_u32(header_.data());
            header_.clear();
            last_fragment_ = (header & kLastFragment) != 0;
            fragment_left_ = header & ~kLastFragment;
            // Checked before a byte of it arrives, so a header announcing
            // 2 GiB costs nothing. Empty fragments that are not the last
            // would let a peer send headers forever; libtirpc refuses
            // them too.
            if (fragment_left_ > kMaxRpcRecord - record_.size() ||
                (fragment_left_ == 0 && !last_fragment_)) {
                state_ = State::Error;
                break;
            }
            in_fragment_ = true;
        }
        size_t n = std::min(size_t{fragment_left_}, data.size() - used);
        record_.append(data.substr(used, n));
        used += n;
        fragment_left_ -= static_cast<uint32_t>(n);
        if (fragment_left_ == 0) {
            in_fragment_ = false;
            if (last_fragment_) {
                state_ = State::Record;
            }
        }
    }
    return used;
}

std::string RpcRecordReader::take_record() {
    if (state_ != State::Record) {
        return {};
    }
    std::string record = std::move(record_);
    record_.clear();
    state_ = State::NeedMore;
    return record;
}

std::string frame_rpc_record(std::string_view record) {
    // Our records are all far below the 2 GiB a fragment can carry.
    std::string framed;
    put_u32(framed, kLastFragment | static_cast<uint32_t>(record.size()));
    framed.append(record);
    return framed;
}

// A call whose header cannot be parsed (too short, a credential or verifier
// longer than 400 bytes or than the record) is dropped, as libtirpc drops
// one: an AUTH_ERROR reply would answer an xid from a message that is not
// one. Once the header parses, every failure gets a reply.
std::optional<std::string> handle_rpc_record(std::string_view record,
                                             PersistenceRpcHandler& handler, uid_t peer_uid) {
    XdrReader in(record);
    auto xid = in.u32();
    auto type = in.u32();
    if (!xid || type != kCall) {
        return std::nullopt;
    }
    // RFC 5531: the rest of a call of another RPC version may be laid out
    // differently, so it is denied before being read.
    auto rpc_version = in.u32();
    if (!rpc_version) {
        return std::nullopt;
    }
    if (*rpc_version != kRpcVersion) {
        std::string reply;
        for (uint32_t word : {*xid, kReply, kMsgDenied, kRpcMismatch, kRpcVersion, kRpcVersion}) {
            put_u32(reply, word);
        }
        return reply;
    }
    auto program = in.u32();
    auto version = in.u32();
    auto procedure = in.u32();
    if (!program || !version || !procedure || !in.skip_auth() || !in.skip_auth()) {
        return std::nullopt;
    }
    if (*program != kPersistenceRpcProgram) {
        return accepted_reply(*xid, AcceptStat::ProgUnavail);
    }
    if (*version < kLowVersion || *version > kHighVersion) {
        std::string reply = accepted_reply(*xid, AcceptStat::ProgMismatch);
        put_u32(reply, kLowVersion);
        put_u32(reply, kHighVersion);
        return reply;
    }
    return dispatch(in, *xid, *version, *procedure, handler, peer_uid);
}

std::string encode_get_mode_call(uint32_t xid, const NvPciDevice& device) {
    std::string call = call_header(xid, 1, kProcGet);
    put_device(call, device);
    return call;
}

std::string encode_set_mode_call(uint32_t xid, uint32_t version, const NvPciDevice& device,
                                 bool enable) {
    std::string call = call_header(xid, version, kProcSet);
    put_device(call, device);
    put_u32(call, enable ? 1 : 0);
    return call;
}

RpcReply decode_get_mode_reply(std::string_view record, uint32_t xid) {
    return decode_reply(record, xid, true);
}

RpcReply decode_set_mode_reply(std::string_view record, uint32_t xid) {
    return decode_reply(record, xid, false);
}

const char* nvpd_status_name(NvPdStatus status) {
    switch (status) {
    case NvPdStatus::Success:
        return "success";
    case NvPdStatus::DaemonNotPresent:
        return "daemon not present";
    case NvPdStatus::DeviceNotFound:
        return "device not found";
    case NvPdStatus::Driver:
        return "driver error";
    case NvPdStatus::InsufficientResources:
        return "insufficient resources";
    case NvPdStatus::InvalidArgument:
        return "invalid argument";
    case NvPdStatus::Io:
        return "i/o error";
    case NvPdStatus::Permissions:
        return "permissions";
    case NvPdStatus::Rpc:
        return "rpc error";
    case NvPdStatus::UserNotFound:
        return "user not found";
    case NvPdStatus::NumaFailure:
        return "numa failure";
    case NvPdStatus::Unknown:
        return "unknown error";
    }
    // A reply carries whatever number the daemon sent.
    return "unrecognized status";
}

} // namespace gpuinit
