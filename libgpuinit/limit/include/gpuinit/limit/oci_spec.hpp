// gpu-limit for containers (tool side, not freestanding: never linked into
// libgpulimit.so): what `gpu-limit oci-hook` and `gpu-limit runtime` do to
// an OCI runtime spec (config.json), and how they read the runtime's
// command line and state. Pure functions over text and JSON trees; the
// host's files are oci_host.hpp's.
//
// Only a spec whose process.env has AMP_VGPU_ENABLE=1 is edited (eGPU's
// master switch). The edit adds, after every mount of the spec so that none
// of the image's or the user's can cover them:
//   - <library> read-only at /usr/lib/gpuinit/libgpulimit.so;
//   - <state root>/ld.so.preload (a host file naming that path) read-only at
//     /etc/ld.so.preload: the dynamic loader reads it in every process and,
//     unlike LD_PRELOAD, the container's user cannot unset it (musl images
//     ignore both: the limit needs glibc in the image);
//   - <state root>/<group> read-write at the same path: the group's state;
//   - <state root>/daemon.sock at the same path, when the daemon runs,
//     named in GPU_LIMIT_DAEMON_SOCKET;
// and sets GPU_LIMIT_STATE_DIR=<state root> and GPU_LIMIT_GROUP=<group>,
// replacing any value the spec had (the group is the container: a name of
// the user's choosing would point at a directory nobody mounted), and the
// annotation org.gpuinit.gpu-limit.group (for people and tools to read;
// nothing of ours reads it back). Editing an edited spec changes nothing.
#pragma once

#include "gpuinit/base/json_value.hpp"
#include "gpuinit/base/result.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace gpuinit::limit::oci {

inline constexpr const char* kStateRoot = "/run/gpu-limit";
inline constexpr const char* kContainerLibrary = "/usr/lib/gpuinit/libgpulimit.so";
inline constexpr const char* kPreloadTarget = "/etc/ld.so.preload";
inline constexpr const char* kPreloadFile = "ld.so.preload"; // in the state root
inline constexpr const char* kDaemonSocket = "daemon.sock";  // in the state root
inline constexpr const char* kGroupAnnotation = "org.gpuinit.gpu-limit.group";

// Parses a config.json: strict JSON (json_value.hpp), an object, and the
// members the edit reads or writes of the right types when present
// (process.env strings, mounts objects, annotations strings, process.user
// and linux id mappings numbers).
Result<JsonValue> parse_spec(std::string_view text);

// process.env holds the entry AMP_VGPU_ENABLE=1, exactly.
bool limit_requested(const JsonValue& spec);

// The host's GPUs in the host's numbering (nvidia-smi's: the vector is in
// PCI order of the driver's GPUs, /proc/driver/nvidia/gpus).
struct HostGpu {
    std::string pci; // "0000:3b:00.0"
    unsigned minor = 0;
    std::string uuid; // empty when the driver did not print one
};
struct HostGpus {
    bool listed = false; // false: the driver's list is absent (not loaded)
    std::vector<HostGpu> gpus;
};
inline constexpr unsigned kNvidiaMajor = 195; // the driver's fixed character major
inline constexpr unsigned kMaxGpuMinor = 253; // 254, 255: modeset and ctl

// Which GPUs the host gives the container, decided before it starts, as
// GPU_LIMIT_DEVICES says it to the library: the union of
//   - the GPU nodes in linux.devices (char, type "c" or "u", 195:minor,
//     0..253), which a CDI injector (podman's --device nvidia.com/gpu=N,
//     NVIDIA's jit-cdi runtime) has put there, and which NVIDIA's CDI specs
//     pair with NVIDIA_VISIBLE_DEVICES=void;
//   - CDI requests in annotations (cdi.k8s.io/<anything>:
//     "nvidia.com/gpu=N,..."), for a CDI-aware runtime after us;
//   - NVIDIA_VISIBLE_DEVICES, its last entry as NVIDIA's runtime reads it
//     (docker's --gpus appends one): host indices, UUIDs, CDI names
//     (nvidia.com/gpu=N), all; none and void name nothing.
// Each GPU as its UUID, or its PCI address when the driver printed no UUID;
// "all" when a source says all; std::nullopt when no source names a GPU
// (the library then keeps its own rule). An index or minor the host does
// not have, a UUID none of its GPUs has (when all have one), a MIG instance,
// or an index with no driver list is an error: the container would start
// with caps on the wrong GPUs or none. So are more than kMaxListedDevices
// GPUs and a UUID the host cannot confirm that is not in NVML's form: the
// library would refuse the list.
Result<std::optional<std::string>> container_devices(const JsonValue& spec, const HostGpus& host);

struct EditOptions {
    std::string library;                 // host path of libgpulimit.so
    std::string state_root = kStateRoot; // host path, the same in the container
    std::string group;                   // valid_group_name
    bool daemon_socket = false;          // <state root>/daemon.sock exists
    // GPU_LIMIT_DEVICES (container_devices); nullopt removes any the spec has.
    std::optional<std::string> devices;
};

// Applies the edit to a parsed spec; returns whether anything changed.
bool edit_spec(JsonValue& spec, const EditOptions& options);

// [A-Za-z0-9._-]{1,64}, not "." or "..": the names GroupState accepts, and
// a single path component.
bool valid_group_name(std::string_view name);

// A container path as the runtime resolves it ("/etc//ld.so.preload/" is
// "/etc/ld.so.preload"; ".." stops at the root).
std::string normalized_path(std::string_view path);
// A mount at normalized `outer` hides what is at normalized `inner`: the
// same path or a directory above it.
bool covers(const std::string& outer, const std::string& inner);

// The container's id as a precreate hook can learn it (podman does not hand
// precreate hooks the id or the state): the 64-hex id that podman and CRI-O
// end linux.cgroupsPath with ("/libpod_parent/libpod-<id>",
// "machine.slice:libpod:<id>", "...:crio:<id>", "crio-<id>.scope"): the
// runtime makes that path, and podman's --cgroup-parent only chooses what
// comes before the id. Never an annotation or a variable: the container's
// creator writes those. std::nullopt: the hook makes up a name
// (random_group_name).
std::optional<std::string> group_from_spec(const JsonValue& spec);
inline constexpr const char* kRandomGroupPrefix = "oci-";

struct HostOwner {
    uid_t uid = 0;
    gid_t gid = 0;
};
// Who owns the group's directory on the host: the spec's process.user uid
// and gid mapped through linux.uidMappings/gidMappings (a user namespace),
// so that the container's processes may open it and nobody else. An id no
// mapping covers is an error.
Result<HostOwner> state_owner(const JsonValue& spec);

// An OCI runtime's command line as docker (containerd's runc shim, after
// daemon.json's runtimeArgs) or podman give it to `gpu-limit runtime`:
//   [our options] [global options] COMMAND [command options] [ID] ...
struct RuntimeCall {
    // Ours, only before everything else.
    std::optional<std::string> runtime_path; // --runtime-path PATH
    std::optional<std::string> library;      // --library PATH
    std::optional<std::string> state_root;   // --state-root DIR
    std::optional<std::string> host_root;    // --host-root DIR: where the host's files are read
    bool help = false;                       // --help or -h as the only word
    bool version = false;                    // --version or -v as the only word (runc's)
    // The real runtime's arguments, unchanged.
    std::vector<std::string> forward;
    std::string command;               // "create", "delete", ...; "" when none
    std::optional<std::string> bundle; // create/run: --bundle/-b (else the cwd)
    std::optional<std::string> config; // create/run: crun's --config/-f
    std::string id;                    // the first word after the command's options
};
Result<RuntimeCall> parse_runtime_args(const std::vector<std::string>& args);

// The group a poststop hook cleans up: the id of the OCI state on its stdin,
// as the runtime wrote it. Not an annotation: podman hands hooks those of
// the container's creator.
Result<std::string> group_from_state(std::string_view text);

} // namespace gpuinit::limit::oci
