// The device-node reconciler: makes <root>/dev match a NodePlan. It creates
// what is missing, repairs a wrong owner or mode in place, replaces a node of
// the wrong type or device number, and touches nothing else.
//
// Safe as root on a hostile /dev: every operation is relative to a directory
// fd opened with O_NOFOLLOW, symlinks are never followed, and access never
// widens during a change (new nodes are made with mode 0 under a temporary
// name, chowned, chmodded and renamed into place; in-place repairs narrow the
// mode before changing the owner).
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/devnodes/node_plan.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <string>
#include <sys/types.h>
#include <vector>

namespace gpuinit {

struct Change {
    enum class Kind { Create, Replace, Repair, Unchanged, Remove, Failed };
    Kind kind = Kind::Unchanged;
    std::string name;   // relative to /dev
    std::string detail; // what differs, or why it failed
    bool is_link = false;
};

const char* change_kind_name(Change::Kind kind);

struct ReconcileResult {
    std::vector<Change> changes;
    size_t count(Change::Kind kind) const;
    bool failed() const { return count(Change::Kind::Failed) > 0; }
};

// Exclusive lock on <root>/run/gpuinit/lock, held until the fd closes.
// Concurrent runs (udev starts one per GPU) serialize on it.
Result<UniqueFd> lock_run_dir(const Sysroot& root);

// With dry_run, only inspects (a missing /dev means everything is created).
Result<ReconcileResult> reconcile(const Sysroot& root, const NodePlan& plan, bool dry_run);

// Removes /dev/nvidiaN and /dev/char/MAJ:N when they are what gpu-mknod would
// have made for that minor; anything else at those names is left alone.
Result<ReconcileResult> remove_gpu_nodes(const Sysroot& root, unsigned major, unsigned minor,
                                         bool dry_run);

} // namespace gpuinit
