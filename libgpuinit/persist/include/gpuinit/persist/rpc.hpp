// NVIDIA's persistence RPC, the one nvidia-smi speaks to decide
// "Persistence-M" and to carry out `nvidia-smi -pm 0|1`: ONC RPC (RFC 5531)
// with XDR (RFC 4506) bodies and record marking, on a unix stream socket.
// A codec only: no I/O. The daemon feeds bytes to an RpcRecordReader and
// hands each whole record to handle_rpc_record().
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

// What the server does for the calls it understands. `peer_uid` is the
// caller's uid from SO_PEERCRED; only uid 0 may set (the handler is told
// nothing else and decides).
class PersistenceRpcHandler {
  public:
    virtual ~PersistenceRpcHandler() = default;
    // Whether the daemon holds the GPU at `device`.
    virtual NvPdStatus get_mode(const NvPciDevice& device, bool* enabled) = 0;
    virtual NvPdStatus set_mode(const NvPciDevice& device, bool enable, uid_t peer_uid) = 0;
};

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

// The reply record to one call record, or nullopt when nothing should be
// sent: the record is not a call (a reply, too short to carry an xid), or
// its call header does not parse (cut short, or a credential or verifier
// over 400 bytes or past the record's end; libtirpc drops those too).
// Calls to another program get PROG_UNAVAIL; an unknown version
// PROG_MISMATCH (1-2); an unknown procedure PROC_UNAVAIL; arguments that do
// not decode (short, trailing bytes, a mode other than 0 or 1) GARBAGE_ARGS;
// an RPC version other than 2 is denied with RPC_MISMATCH. Procedure 0
// (NULL) of both versions answers empty, as RPC servers do.
//   v1 p1 SetPersistenceMode(SetPersistenceModeArgs) -> NvPdStatus
//   v1 p2 GetPersistenceMode(GetPersistenceModeArgs) -> GetPersistenceModeRes
//   v2 p1 SetPersistenceModeOnly(SetPersistenceModeArgs) -> NvPdStatus
//   v2 p2 SetNumaStatus(SetNumaStatusArgs) -> NvPdStatus (NumaFailure: unsupported;
//         gpu-persist does no NUMA onlining)
std::optional<std::string> handle_rpc_record(std::string_view record,
                                             PersistenceRpcHandler& handler, uid_t peer_uid);

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
