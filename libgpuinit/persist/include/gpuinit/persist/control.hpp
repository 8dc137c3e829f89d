// gpu-persist's control protocol, on its unix socket under /run/gpu-persist:
// the client sends one request line, the daemon answers and closes.
//   status | enable GPU|all | disable GPU|all      (GPU: minor, PCI address, UUID)
// The reply is lines of tab-separated fields, so the client renders text or
// JSON itself:
//   gpu-persist-reply 1
//   result  CODE  MESSAGE                     (CODE: 0, or an errno)
//   daemon  PID  UID  ROOT(yes|no)  COMPAT(on|off|reason)  HOTPLUG(udev|kernel|off)
//   gpu  MINOR  BDF  UUID|-  STATE  WANTED(yes|no)  ERRNO  MESSAGE
//   end
// A codec only; both sides treat the other's bytes as hostile.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/host/gpu_selector.hpp"
#include "gpuinit/persist/gpu_table.hpp"
#include "gpuinit/service/peer.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace gpuinit {

inline constexpr std::string_view kPersistRunDir = "run/gpu-persist";
inline constexpr std::string_view kPersistSocketName = "socket";
inline constexpr std::string_view kPersistPidName = "gpu-persist.pid";
inline constexpr std::string_view kPersistStateDir = "var/lib/gpu-persist";
inline constexpr std::string_view kPersistStateName = "state";
// A request is one short line; anything longer is refused unread.
inline constexpr size_t kMaxControlRequest = 256;
// A reply lists at most every minor the driver can hand out.
inline constexpr size_t kMaxControlReply = size_t{128} << 10;

struct ControlRequest {
    enum class Kind { Query, Enable, Disable }; // Query: status
    Kind kind = Kind::Query;
    std::optional<GpuSelector> gpu; // empty: all
    bool changes() const { return kind != Kind::Query; }
};

// One line without its newline.
Result<ControlRequest> parse_control_request(std::string_view line);
std::string format_control_request(const ControlRequest& request);

// Queries are open to all; a change needs uid 0 or the admin group (the
// peer's primary or supplementary group).
bool peer_may_change(const PeerCredentials& peer, std::optional<gid_t> admin_group);

struct DaemonInfo {
    pid_t pid = 0;
    uid_t uid = 0;
    bool runs_as_root = true;
    std::string compat = "off"; // "on", "off", or why it is off
    std::string hotplug = "off";
};

struct ControlReply {
    int code = 0; // 0, or an errno
    std::string message;
    DaemonInfo daemon;
    std::vector<HeldGpu> gpus;
};

std::string format_control_reply(const ControlReply& reply);
Result<ControlReply> parse_control_reply(std::string_view text);

} // namespace gpuinit
