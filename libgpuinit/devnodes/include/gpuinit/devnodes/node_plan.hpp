// Pure planning: given the machine and the policy, which directories, nodes
// and links should exist under /dev. No filesystem effects; that split is
// what makes --dry-run, --json and the tests cheap.
#pragma once

#include "gpuinit/host/accounts.hpp"
#include "gpuinit/host/gpu_selector.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/host/policy.hpp"

#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace gpuinit {

// A directory the nodes live in: /dev itself ("") and /dev/char. Anyone who
// can write it can swap a node; so it is root's, 0755, without ACLs.
struct DirSpec {
    std::string name; // relative to /dev; "" is /dev
    uid_t uid = 0;
    gid_t gid = 0;
    unsigned mode = 0755;
};

struct NodeSpec {
    std::string name; // relative to /dev: "nvidia0", "nvidiactl"
    unsigned major = 0;
    unsigned minor = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    unsigned mode = 0;
    std::string owner; // names, for people
    std::string group;
    std::string subject; // "GPU 0 (0000:17:00.0)" or "control"
    std::string origin;  // the policy line, or "built-in default"
    // The GPU the node belongs to (its /dev/nvidiaN, its MIG caps); none
    // for control nodes and MIG config/monitor.
    std::optional<unsigned> gpu_minor;
    // The rule's owner or group does not exist: root:root 0600 instead.
    bool unresolved = false;
};

struct LinkSpec {
    std::string name;   // relative to /dev: "char/195:0"
    std::string target; // "../nvidia0"
};

// Nodes in `dir` named `prefix` + a number, of character major `major`,
// that the plan does not list, are removed with their /dev/char links: the
// cap nodes of MIG instances that were destroyed.
struct PruneSpec {
    std::string dir;    // relative to /dev: "nvidia-caps"
    std::string prefix; // "nvidia-cap"
    unsigned major = 0;
};

struct NodePlan {
    std::vector<DirSpec> dirs;
    std::vector<NodeSpec> nodes;
    std::vector<LinkSpec> links;
    std::vector<PruneSpec> prune;
    // MIG access files (relative to the root) whose DeviceFileModify is 1:
    // nvidia-modprobe would reset the node gpu-mknod manages; it is set to 0.
    std::vector<std::string> modify_off;
};

struct PlanRequest {
    // Mig: only the MIG cap nodes (gpu-mknod --mig, gpu-mig sync).
    enum class Scope { All, Device, Control, Mig };
    Scope scope = Scope::All;
    std::optional<GpuSelector> device; // with Scope::Device
};

// Diagnostic::reason of a group or owner the policy names that does not
// exist: the node is not what the policy says (a difference for --check).
inline constexpr int kReasonNoAccount = 1;

// Problems (a group that does not exist, a GPU that gets no node) go to
// `diagnostics`; a name that does not resolve never widens access: the node
// becomes root:root 0600.
NodePlan plan_nodes(const Machine& machine, const Policy& policy, const AccountDb& accounts,
                    const PlanRequest& request, Diagnostics& diagnostics);

// "nvidia3": the node of the GPU with that minor.
std::string gpu_node_name(unsigned minor);
// "nvidia-caps/nvidia-cap337": the node of the MIG capability with that minor.
std::string cap_node_name(unsigned minor);
// "char/195:0": the /dev/char link of a node.
std::string char_link_name(unsigned major, unsigned minor);

} // namespace gpuinit
