// The server's answers were checked against NVIDIA/nvidia-persistenced tag
// 595.71.05 (commit 410f35493c277b5767877b65bb011f7f66a60ed1):
// command_server.c (who may call what), nvidia-persistenced.c
// (nvPdSetDevicePersistenceMode, nvPdSetDevicePersistenceModeOnly,
// nvPdSetDeviceNumaStatus, nvPdGetDevicePersistenceMode, get_device,
// set_device_mode, set_device_numa_status), nvidia-numa.c (what NUMA
// onlining does for a GPU without NUMA memory), nvpd_rpc.h and
// nvpd_rpc_xdr.c (the XDR), nvpd_rpc_server.c (the rpcgen dispatch); and,
// for the transport that nvidia-persistenced leaves to libtirpc, against
// libtirpc 1.3.3 (Debian 12's libtirpc3; src/svc.c svc_getreq_common,
// svc_vc.c, rpc_callmsg.c, svc_auth.c, svc_auth_unix.c, svc_auth_gss.c),
// and by tests/persist_rpc, which compares our replies with a libtirpc
// server's byte for byte.
#include "gpuinit/persist/rpc.hpp"

#include "gpuinit/base/text.hpp"

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
constexpr uint32_t kAuthSys = 1;
constexpr uint32_t kAuthShort = 2;
constexpr uint32_t kAuthDes = 3;
constexpr uint32_t kRpcsecGss = 6;
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

// RFC 5531 auth_stat, and RFC 2203's for RPCSEC_GSS.
enum class AuthStat : uint32_t {
    Ok = 0,
    BadCred = 1,
    RejectedCred = 2,
    Failed = 7,
    GssCredProblem = 13,
};

constexpr uint32_t kLowVersion = 1;
constexpr uint32_t kHighVersion = 2;
constexpr uint32_t kProcNull = 0;
constexpr uint32_t kProcSet = 1;     // v1 SetPersistenceMode, v2 SetPersistenceModeOnly
constexpr uint32_t kProcGet = 2;     // v1
constexpr uint32_t kProcSetNuma = 2; // v2

// NvPersistenceMode and NvNumaStatus (nvpd_rpc.h).
constexpr uint32_t kModeDisabled = 0;
constexpr uint32_t kModeEnabled = 1;
constexpr uint32_t kNumaOffline = 0;
constexpr uint32_t kNumaOnline = 1;

constexpr size_t padded(size_t length) {
    return (length + 3) & ~size_t{3};
}

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

    // An opaque_auth (flavor, opaque body<400>, padded). The caller's uid
    // comes from SO_PEERCRED, never from a credential it wrote itself.
    struct Auth {
        uint32_t flavor = 0;
        std::string_view body;
    };
    std::optional<Auth> auth() {
        auto flavor = u32();
        auto length = u32();
        if (!flavor || !length || *length > kMaxAuthBytes || padded(*length) > data_.size()) {
            return std::nullopt;
        }
        Auth auth{*flavor, data_.substr(0, *length)};
        data_.remove_prefix(padded(*length));
        return auth;
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

    bool at_end() const { return data_.empty(); }

  private:
    std::string_view data_;
};

// The verifier of an accepted reply: libtirpc's xp_verf. AUTH_SYS sets it
// to the call's verifier when that has a body (_svcauth_unix); every other
// flavor that gets this far leaves it AUTH_NONE.
std::string reply_verifier(uint32_t cred_flavor, const XdrReader::Auth& verifier) {
    std::string out;
    if (cred_flavor == kAuthSys && !verifier.body.empty()) {
        put_u32(out, verifier.flavor);
        put_u32(out, static_cast<uint32_t>(verifier.body.size()));
        out.append(verifier.body);
        out.append(padded(verifier.body.size()) - verifier.body.size(), '\0');
        return out;
    }
    put_u32(out, kAuthNone);
    put_u32(out, 0);
    return out;
}

std::string accepted_reply(uint32_t xid, std::string_view verifier, AcceptStat stat) {
    std::string reply;
    put_u32(reply, xid);
    put_u32(reply, kReply);
    put_u32(reply, kMsgAccepted);
    reply.append(verifier);
    put_u32(reply, static_cast<uint32_t>(stat));
    return reply;
}

// _svcauth_unix(): a body too short for what it announces, a machine name
// over 255 bytes or more than 16 groups is BADCRED. libtirpc reads the
// counts even past a short body; its length check then fails whatever it
// read, so stopping at the body's end gives the same answer.
AuthStat check_auth_sys(std::string_view body) {
    constexpr uint32_t kMaxMachineName = 255; // MAX_MACHINE_NAME
    constexpr uint32_t kMaxGroups = 16;       // NGRPS
    if (body.size() < 8) {
        return AuthStat::BadCred;
    }
    uint32_t name = load_u32(body.data() + 4); // after the stamp
    if (name > kMaxMachineName) {
        return AuthStat::BadCred;
    }
    size_t groups_at = 8 + padded(name) + 8; // then uid and gid
    if (groups_at + 4 > body.size()) {
        return AuthStat::BadCred;
    }
    uint32_t groups = load_u32(body.data() + groups_at);
    if (groups > kMaxGroups || (5 + size_t{groups}) * 4 + padded(name) > body.size()) {
        return AuthStat::BadCred;
    }
    return AuthStat::Ok;
}

// _svcauth_gss() on a connection that has no context, which is every one
// here: nothing in this protocol makes one, and an INIT needs the host's
// "nfs" service key to get further than AUTH_FAILED (a machine with such a
// key in its keytab answers an INIT to procedure 0 with a GSS result
// instead; gpu-persist does not).
AuthStat check_rpcsec_gss(std::string_view body, uint32_t procedure) {
    enum : uint32_t { kData = 0, kInit = 1, kContinueInit = 2, kDestroy = 3 };
    XdrReader in(body);
    auto version = in.u32();
    auto gss_procedure = in.u32();
    auto sequence = in.u32();
    auto service = in.u32();
    auto handle = in.u32();
    if (!version || !gss_procedure || !sequence || !service || !handle || *handle > kMaxAuthBytes ||
        padded(*handle) > body.size() - 20) {
        return AuthStat::BadCred;
    }
    if (*version != 1 || *service < 1 || *service > 3) {
        return AuthStat::BadCred;
    }
    switch (*gss_procedure) {
    case kInit:
    case kContinueInit:
        return AuthStat::Failed;
    case kData:
        return AuthStat::GssCredProblem; // no context to check its verifier with
    case kDestroy:
        return procedure != kProcNull ? AuthStat::Failed : AuthStat::GssCredProblem;
    default:
        return AuthStat::RejectedCred;
    }
}

// _gss_authenticate() of a server that registered no flavor of its own.
AuthStat check_credential(const XdrReader::Auth& credential, uint32_t procedure) {
    switch (credential.flavor) {
    case kAuthNone:
        return AuthStat::Ok;
    case kAuthSys:
        return check_auth_sys(credential.body);
    case kAuthShort:
        return AuthStat::RejectedCred;
    case kAuthDes:
        return AuthStat::Failed; // libtirpc is built without AUTHDES_SUPPORT
    case kRpcsecGss:
        return check_rpcsec_gss(credential.body, procedure);
    default:
        return AuthStat::RejectedCred;
    }
}

std::string denied_auth_reply(uint32_t xid, AuthStat why) {
    std::string reply;
    for (uint32_t word : {xid, kReply, kMsgDenied, kAuthError, static_cast<uint32_t>(why)}) {
        put_u32(reply, word);
    }
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

// The procedure, once libtirpc found the program and version: `in` is at
// the arguments. What nvpd_rpc_server.c does: NULL answers at once, a
// procedure it does not know is PROC_UNAVAIL, arguments that do not decode
// (svc_getargs) are GARBAGE_ARGS; what follows them is never read.
RpcIncoming dispatch(XdrReader& in, uint32_t xid, uint32_t version, uint32_t procedure,
                     std::string verifier) {
    RpcIncoming incoming;
    incoming.kind = RpcIncoming::Kind::Reply;
    if (procedure == kProcNull) {
        incoming.reply = accepted_reply(xid, verifier, AcceptStat::Success);
        return incoming;
    }
    RpcCall call;
    call.xid = xid;
    bool with_value = true;
    if (procedure == kProcSet) {
        call.procedure =
            version == 1 ? RpcProcedure::SetPersistenceMode : RpcProcedure::SetPersistenceModeOnly;
    } else if (procedure == kProcGet && version == 1) {
        call.procedure = RpcProcedure::GetPersistenceMode;
        with_value = false;
    } else if (procedure == kProcSetNuma && version == 2) {
        call.procedure = RpcProcedure::SetNumaStatus;
    } else {
        incoming.reply = accepted_reply(xid, verifier, AcceptStat::ProcUnavail);
        return incoming;
    }
    auto device = in.device();
    auto value = with_value ? in.u32() : std::optional<uint32_t>(0);
    if (!device || !value) {
        incoming.reply = accepted_reply(xid, verifier, AcceptStat::GarbageArgs);
        return incoming;
    }
    call.device = *device;
    call.value = *value;
    call.reply_verifier = std::move(verifier);
    incoming.kind = RpcIncoming::Kind::Call;
    incoming.call = std::move(call);
    return incoming;
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
    if (!in.auth()) {
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
        auto mode = in.u32();
        if (mode == kModeDisabled || mode == kModeEnabled) {
            enabled = *mode == kModeEnabled;
        } else {
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

// svc_vc_recv(): a record that xdr_callmsg() cannot read as a call (not a
// call, RPC version other than 2, cut short, a credential or verifier over
// 400 bytes or past the record's end) gets no reply, and libtirpc closes
// the connection. Then svc_getreq_common(): the credential first, then the
// program and version.
RpcIncoming read_rpc_record(std::string_view record) {
    RpcIncoming incoming;
    XdrReader in(record);
    auto xid = in.u32();
    auto type = in.u32();
    auto rpc_version = in.u32();
    auto program = in.u32();
    auto version = in.u32();
    auto procedure = in.u32();
    if (!xid || type != kCall || rpc_version != kRpcVersion || !program || !version || !procedure) {
        return incoming;
    }
    auto credential = in.auth();
    auto verifier = credential ? in.auth() : std::nullopt;
    if (!verifier) {
        return incoming;
    }
    incoming.kind = RpcIncoming::Kind::Reply;
    if (AuthStat why = check_credential(*credential, *procedure); why != AuthStat::Ok) {
        incoming.reply = denied_auth_reply(*xid, why);
        return incoming;
    }
    std::string reply_verf = reply_verifier(credential->flavor, *verifier);
    if (*program != kPersistenceRpcProgram) {
        incoming.reply = accepted_reply(*xid, reply_verf, AcceptStat::ProgUnavail);
        return incoming;
    }
    if (*version < kLowVersion || *version > kHighVersion) {
        incoming.reply = accepted_reply(*xid, reply_verf, AcceptStat::ProgMismatch);
        put_u32(incoming.reply, kLowVersion);
        put_u32(incoming.reply, kHighVersion);
        return incoming;
    }
    return dispatch(in, *xid, *version, *procedure, std::move(reply_verf));
}

std::string encode_rpc_answer(const RpcCall& call, NvPdStatus status, bool enabled) {
    std::string reply = accepted_reply(call.xid, call.reply_verifier, AcceptStat::Success);
    put_u32(reply, static_cast<uint32_t>(status));
    // GetPersistenceModeRes: a union on the status, the mode only with success.
    if (call.procedure == RpcProcedure::GetPersistenceMode && status == NvPdStatus::Success) {
        put_u32(reply, enabled ? kModeEnabled : kModeDisabled);
    }
    return reply;
}

bool rpc_device_matches(const NvPciDevice& device, std::string_view bdf) {
    // dddd:bb:ss.f, the domain four hex digits or more.
    size_t colon = bdf.rfind(':');
    if (colon == std::string_view::npos || colon < 3 || bdf.size() != colon + 5 ||
        bdf[colon - 3] != ':' || bdf[colon + 3] != '.') {
        return false;
    }
    auto domain = parse_hex_digits(bdf.substr(0, colon - 3), UINT32_MAX);
    auto bus = parse_hex_digits(bdf.substr(colon - 2, 2));
    auto slot = parse_hex_digits(bdf.substr(colon + 1, 2));
    return domain && bus && slot && *domain == device.domain && *bus == device.bus &&
           *slot == device.slot;
}

// command_server.c: the three sets ask _nvpdIsClientRoot() first (uid 0
// from SO_PEERCRED, else NVPD_ERR_PERMISSIONS; NVPD_ERR_UNKNOWN when the
// credentials cannot be read); the get asks nobody. Then each looks the
// device up (get_device(): NVPD_ERR_DEVICE_NOT_FOUND), and only then reads
// the mode or status it was sent.
RpcStep plan_rpc_call(const RpcCall& call, uid_t peer_uid, const std::optional<RpcGpu>& gpu,
                      bool applied) {
    auto answer = [](NvPdStatus status, bool enabled = false) {
        return RpcStep{RpcStep::Kind::Answer, status, enabled};
    };
    auto step = [](RpcStep::Kind kind) { return RpcStep{kind, NvPdStatus::Success, false}; };
    if (call.procedure != RpcProcedure::GetPersistenceMode) {
        if (peer_uid == kUnknownRpcPeer) {
            return answer(NvPdStatus::Unknown);
        }
        if (peer_uid != 0) {
            return answer(NvPdStatus::Permissions);
        }
    }
    if (!gpu) {
        return answer(NvPdStatus::DeviceNotFound);
    }
    // nvidia-persistenced opens a GPU before it answers, and serves one call
    // at a time: nobody sees a GPU half-initialized.
    if (gpu->settling) {
        return step(RpcStep::Kind::Wait);
    }
    switch (call.procedure) {
    case RpcProcedure::GetPersistenceMode:
        return answer(NvPdStatus::Success, gpu->held);
    case RpcProcedure::SetPersistenceMode:
    case RpcProcedure::SetPersistenceModeOnly:
        // set_device_mode(): the mode it is in already is a success that
        // changes nothing; enabling opens the GPU (NVPD_ERR_DRIVER when that
        // fails, the mode staying off), disabling closes it; any other value
        // is NVPD_ERR_INVALID_ARGUMENT. SetPersistenceMode then onlines or
        // offlines the GPU's NUMA memory, which for a GPU without any
        // (nvidia-numa.c: NUMA status disabled) succeeds, so both versions
        // answer alike here: gpu-persist does not run where a GPU's memory
        // is NUMA memory.
        if (call.value == kModeEnabled) {
            if (applied) {
                return answer(gpu->held ? NvPdStatus::Success : NvPdStatus::Driver);
            }
            return gpu->held ? answer(NvPdStatus::Success) : step(RpcStep::Kind::Enable);
        }
        if (call.value == kModeDisabled) {
            // A GPU that is not held but still wanted (waiting for its node,
            // failed, lost) is disabled too, so that it is not taken later:
            // the answer is the same success.
            if (applied || (!gpu->held && !gpu->wanted)) {
                return answer(NvPdStatus::Success);
            }
            return step(RpcStep::Kind::Disable);
        }
        return answer(NvPdStatus::InvalidArgument);
    case RpcProcedure::SetNumaStatus:
        // set_device_numa_status() for a GPU without NUMA memory: offlining
        // succeeds (offline_memory() has nothing to do); onlining opens
        // /dev/nvidiaN and succeeds when it opens, which for a GPU that
        // gpu-persist holds it does. For one it does not hold,
        // nvidia-persistenced would open it and keep it open without
        // persistence mode; gpu-persist holds GPUs only in persistence mode
        // and answers NVPD_ERR_NUMA_FAILURE, as nvidia-persistenced does
        // when the open fails.
        if (call.value == kNumaOffline) {
            return answer(NvPdStatus::Success);
        }
        if (call.value == kNumaOnline) {
            return answer(gpu->held ? NvPdStatus::Success : NvPdStatus::NumaFailure);
        }
        return answer(NvPdStatus::InvalidArgument);
    }
    return answer(NvPdStatus::Unknown);
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
