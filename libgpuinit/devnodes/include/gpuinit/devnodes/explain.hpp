// gpu-mknod --explain: for each node the policy gives, who can open it and
// which policy line decides that. Built from a dry run's plan and its
// reconcile (what is there now), so it shows exactly what a run would make.
#pragma once

#include "gpuinit/devnodes/mknod.hpp"

#include <optional>
#include <string>
#include <vector>

namespace gpuinit {

// "rw", "r", "w" or "-": what the read and write bits of one class allow
// (the nodes are character devices: execute means nothing there).
std::string access_of(unsigned mode_bits);

struct NodeExplanation {
    std::string path;    // "/dev/nvidia0"
    std::string subject; // "GPU 0 (0000:17:00.0)", "control", "MIG 1/7/0 (gpu1/gi7/ci0)"
    std::string owner;   // name, or the number the policy gave
    std::string group;
    uid_t uid = 0;
    gid_t gid = 0;
    unsigned mode = 0;
    std::string owner_access; // access_of the owner bits
    std::string group_access;
    std::string other_access;
    // The policy line ("/etc/gpu-restriction.conf:3"), "default" for the
    // built-in scheme, or "driver" for a MIG cap no rule names.
    std::string decided_by;
    // The policy's group or owner does not exist: the node is root-only
    // (root:root 0600) instead of what decided_by says.
    bool root_only = false;
    // What is there now: "" when the node is as planned, else the dry
    // run's change ("would create", "would repair: mode 0666 -> 0660, ACL
    // removed"). An ACL is always a difference: the policy grants none.
    std::string now;
};

// The minor of the GPU `gpu` names, for explain_nodes. A GPU the driver
// does not list is an error in the outcome, which becomes NothingDone.
std::optional<unsigned> explain_gpu(MknodOutcome& outcome, const GpuSelector& gpu);

// The nodes of `outcome.plan` (a dry run of Scope::All), in plan order. With
// `gpu`, only what opening that GPU involves: the control nodes, its
// /dev/nvidiaN and its MIG caps.
std::vector<NodeExplanation> explain_nodes(const MknodOutcome& outcome,
                                           std::optional<unsigned> gpu);

} // namespace gpuinit
