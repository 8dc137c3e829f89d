// The device-node reconciler: makes <root>/dev match a NodePlan. It
// decides, for every directory, node and link, what differs from the plan,
// and carries the change out through safe-fs (gpuinit/fs/safe_fs.hpp): it
// creates what is missing, repairs a wrong owner, mode or ACL in place,
// replaces a node of the wrong type or device number (or one with other
// hard links, so the change does not reach outside /dev), removes what an
// interrupted run left behind, and touches nothing else.
//
// Access never widens during a change: new nodes are made with mode 0 and
// without ACLs under a temporary name, chowned, chmodded and renamed into
// place; in-place repairs narrow the mode (and so an ACL's mask) before
// changing the owner or removing the ACL.
#pragma once

#include "gpuinit/devnodes/node_plan.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <string>
#include <vector>

namespace gpuinit {

struct Change {
    enum class Kind { Create, Replace, Repair, Unchanged, Remove, Failed };
    // AccessFile: a MIG access file (name relative to the root, not /dev).
    enum class Target { Node, Link, Directory, Leftover, AccessFile };
    Kind kind = Kind::Unchanged;
    Target target = Target::Node;
    std::string name;   // relative to /dev; "" is /dev itself
    std::string detail; // what differs, or why it failed
};

const char* change_kind_name(Change::Kind kind);

struct ReconcileResult {
    std::vector<Change> changes;
    size_t count(Change::Kind kind) const;
    bool failed() const { return count(Change::Kind::Failed) > 0; }
};

// Every failure is a Failed change and an error in `diagnostics`. With
// dry_run, only inspects (a missing directory means everything in it is
// created). The caller holds the run lock unless dry_run: leftovers of an
// interrupted run are removed only then.
ReconcileResult reconcile(const Sysroot& root, const NodePlan& plan, bool dry_run,
                          Diagnostics& diagnostics);

// Removes /dev/nvidiaN and /dev/char/MAJ:N when they are what gpu-mknod
// would have made for that minor; anything else at those names is left alone.
ReconcileResult remove_gpu_nodes(const Sysroot& root, unsigned major, unsigned minor, bool dry_run,
                                 Diagnostics& diagnostics);

} // namespace gpuinit
