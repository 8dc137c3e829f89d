// NVIDIA's persistence RPC, the one nvidia-smi speaks to decide
// "Persistence-M" and to carry out `nvidia-smi -pm 0|1`: ONC RPC (RFC 5531)
// with XDR (RFC 4506) bodies and record marking, on a unix stream socket.
// A codec and the answers, without I/O: the daemon feeds bytes to an
// RpcRecordReader, reads each whole record with read_rpc_record() and
// follows plan_rpc_call() to answer it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace gpuinit {

inline constexpr uint32_t kPersistenceRpcProgram = 35006;
// Where nvidia-smi looks for the daemon: /var/run/nvidia-persistenced/socket,
// and /var/run is a link to /run on every current distribution; links on the
// way are refused when the daemon creates it, so it uses /run's name.
inline constexpr std::string_view kPersistenceRpcSocket = "run/nvidia-persistenced/socket";
// The largest record the server accepts. A real call is under 512 bytes
// (a 400-byte AUTH_SYS credential at most, and four or five ints).
inline constexpr size_t kMaxRpcRecord = 2048;

// NvPciDevice: the GPU, by PCI address.
struct NvPciDevice {
    uint32_t domain = 0;
    uint32_t bus = 0;
    uint32_t slot = 0;
    uint32_t function = 0;
    bool operator==(const NvPciDevice&) const = default;
};

// NvPdStatus, as the protocol numbers it.
enum class NvPdStatus : uint32_t {
    Success = 0,
    DaemonNotPresent = 1,
    DeviceNotFound = 2,
    Driver = 3,
    InsufficientResources = 4,
    InvalidArgument = 5,
    Io = 6,
    Permissions = 7,
    Rpc = 8,
    UserNotFound = 9,
    NumaFailure = 10,
    Unknown = 11,
};

// The four procedures (program 35006), as nvpd_rpc.h numbers them.
enum class RpcProcedure {
    SetPersistenceMode,     // v1 p1 (SetPersistenceModeArgs) -> NvPdStatus
    GetPersistenceMode,     // v1 p2 (GetPersistenceModeArgs) -> GetPersistenceModeRes
    SetPersistenceModeOnly, // v2 p1 (SetPersistenceModeArgs) -> NvPdStatus
    SetNumaStatus,          // v2 p2 (SetNumaStatusArgs) -> NvPdStatus
};

// A call whose header, credential and arguments libtirpc accepts, for the
// daemon to answer with encode_rpc_answer().
struct RpcCall {
    uint32_t xid = 0;
    RpcProcedure procedure = RpcProcedure::GetPersistenceMode;
    NvPciDevice device;
    // The mode (0 disabled, 1 enabled) or NUMA status (0 offline, 1 online)
    // as sent: XDR enums decode to any 32-bit value, and the answer to one
    // outside the enum is the daemon's (NVPD_ERR_INVALID_ARGUMENT), not the
    // codec's. Unused by GetPersistenceMode.
    uint32_t value = 0;
    // The verifier the reply carries (XDR: flavor, length, body), as
    // libtirpc chooses it: AUTH_SYS callers get theirs back.
    std::string reply_verifier;
};

// What one record from a client calls for.
struct RpcIncoming {
    enum class Kind {
        Call,  // `call`: the daemon decides the answer
        Reply, // `reply`: answered without the daemon (NULL, a transport error)
        Close, // no reply: close the connection, as libtirpc's svc_vc does
    };
    Kind kind = Kind::Close;
    RpcCall call;
    std::string reply;
};

// Reads one record as libtirpc's server (which nvidia-persistenced links)
// reads it, with the two programs registered that nvidia-persistenced
// registers (versions 1 and 2): the answers below were compared, reply
// byte for reply byte, with such a server (tests/persist_rpc).
// - Close: not a call, an RPC version other than 2, a header cut short, a
//   credential or verifier over 400 bytes or past the record's end.
// - Reply MSG_DENIED AUTH_ERROR: the credential, checked before the program
//   (AUTH_SYS that does not parse: BADCRED; AUTH_SHORT and unknown flavors:
//   REJECTEDCRED; AUTH_DES: FAILED; RPCSEC_GSS without a context).
// - Reply PROG_UNAVAIL, PROG_MISMATCH (1-2), PROC_UNAVAIL; NULL (procedure 0)
//   of either version answers empty, whatever follows.
// - Reply GARBAGE_ARGS: arguments cut short. Bytes after the arguments are
//   ignored (svc_vc skips the rest of the record).
RpcIncoming read_rpc_record(std::string_view record);

// The accepted reply to `call`: `status`, and for GetPersistenceMode with
// Success the mode.
std::string encode_rpc_answer(const RpcCall& call, NvPdStatus status, bool enabled = false);

// A peer whose credentials SO_PEERCRED could not give.
inline constexpr uid_t kUnknownRpcPeer = static_cast<uid_t>(-1);

// What gpu-persist knows of the GPU a call names.
struct RpcGpu {
    bool held = false;     // initialized and held open: persistence mode on
    bool settling = false; // its open is under way (HoldState::Opening)
    bool wanted = false;   // the admin's choice: held when it can be
};

// nvidia-persistenced's table matches a device by domain, bus and slot,
// never by function (get_device() in nvidia-persistenced.c; nvidia-cfg
// does not fill the function in). `bdf` is the canonical
// "dddd:bb:ss.f" address (longer domains too).
bool rpc_device_matches(const NvPciDevice& device, std::string_view bdf);

// The next step of a call, as command_server.c and nvidia-persistenced.c
// answer it (see rpc.cpp). `gpu` is the GPU the call names, if any;
// `applied` says the Enable or Disable this call asked for has been
// carried out. nvidia-persistenced opens a GPU synchronously and answers
// after, so a call about a GPU that is settling waits.
struct RpcStep {
    enum class Kind {
        Answer,  // encode_rpc_answer(call, status, enabled)
        Wait,    // ask again once the GPU has settled
        Enable,  // enable the GPU, then ask again with `applied`
        Disable, // disable the GPU, then ask again with `applied`
    };
    Kind kind = Kind::Answer;
    NvPdStatus status = NvPdStatus::Success;
    bool enabled = false;
};
RpcStep plan_rpc_call(const RpcCall& call, uid_t peer_uid, const std::optional<RpcGpu>& gpu,
                      bool applied);

// Reassembles records from a byte stream (RFC 5531 section 11: fragments of
// a 4-byte big-endian header, top bit = last fragment, then the length).
class RpcRecordReader {
  public:
    enum class State {
        NeedMore, // feed more bytes
        Record,   // take_record() returns a whole record
        Error,    // oversized or malformed: close the connection
    };
    // Consumes bytes from `data` and returns how many it used (it stops at
    // the end of a record, so the rest belongs to the next one; in Error or
    // Record state it uses nothing). A record longer than kMaxRpcRecord is an
    // Error as soon as the fragment header announcing it arrives, and so is
    // an empty fragment that is not the last (libtirpc refuses those too). An
    // empty last fragment ends the record, which may then be empty.
    size_t feed(std::string_view data);
    State state() const { return state_; }
    // The whole record; the reader is then ready for the next one. Outside
    // Record state: empty, and nothing changes.
    std::string take_record();

  private:
    State state_ = State::NeedMore;
    std::string header_; // up to 4 bytes of a fragment header
    std::string record_; // fragments so far
    uint32_t fragment_left_ = 0;
    bool in_fragment_ = false;
    bool last_fragment_ = false;
};

// Wraps `record` in one last fragment.
std::string frame_rpc_record(std::string_view record);

// The client side, for `gpu-persist nvidia-smi-get/-set` and the tests.
std::string encode_get_mode_call(uint32_t xid, const NvPciDevice& device);
std::string encode_set_mode_call(uint32_t xid, uint32_t version, const NvPciDevice& device,
                                 bool enable);
// A reply record's outcome: the status, and for a get the mode. An error
// (not a reply, wrong xid, denied, not accepted, short) is reported in
// `rpc_error` with a message.
struct RpcReply {
    std::string rpc_error; // empty when the call was accepted and decoded
    NvPdStatus status = NvPdStatus::Unknown;
    std::optional<bool> enabled; // a get's mode, when status is Success
};
RpcReply decode_get_mode_reply(std::string_view record, uint32_t xid);
RpcReply decode_set_mode_reply(std::string_view record, uint32_t xid);

const char* nvpd_status_name(NvPdStatus status);

} // namespace gpuinit
