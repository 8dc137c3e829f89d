// gpu-mig's reading of the machine and its sync sequence. sync (root, after
// every 'nvidia-smi mig' change): the cap nodes as gpu-mknod --mig makes
// them, then one lease per compute instance whose access follows its CI cap
// node (leases.hpp), then the names file of profiles and MIG UUIDs.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/devnodes/mknod.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/mig/instances.hpp"
#include "gpuinit/mig/leases.hpp"
#include "gpuinit/mig/names_source.hpp"

#include <optional>
#include <string>
#include <vector>

namespace gpuinit {

// The machine, its MIG topology and instances.
struct MigView {
    Machine machine;
    std::vector<MigInstance> instances;
    std::string names_source; // where profiles and UUIDs came from; "" none
};

// Reads the machine and its MIG topology (or takes `known`, already read)
// and joins the instances. Problems with single instances go to
// `diagnostics`; fails when nothing can be read.
Result<MigView> read_mig_view(const Sysroot& root, Diagnostics& diagnostics,
                              std::optional<Machine> known = std::nullopt);

// Fills the view's profiles and MIG UUIDs (name_mig_instances).
Status name_mig_view(const Sysroot& root, const MigNamesRequest& request, MigView& view,
                     Diagnostics& diagnostics);

// A file named on the command line (gres --check, --type-map, env
// --gres-conf): taken as given, not under the root. A regular file only (a
// FIFO would block), at most `limit` bytes.
Result<std::string> read_named_file(const std::string& path, size_t limit);

namespace mig {

struct SyncOptions {
    std::string smi_output; // --nvidia-smi-output DIR; "" none
};

struct SyncOutcome {
    enum class Status {
        Done,
        Partial,     // some node, lease or name failed: see diagnostics
        NothingDone, // the cap nodes step did nothing (nodes.diagnostics says why)
        Failed,      // the nodes were made, then the view or the leases failed: `failure`
    };
    Status status = Status::Done;
    MknodOutcome nodes;
    std::optional<Diagnostic> failure;
    MigView view;
    LeaseSync leases;
    std::string lease_dir; // as shown: <root>/run/gpu-mig
    Diagnostics diagnostics;
};

// The cap nodes (run_mknod with the MIG scope), then the leases (their
// access from each CI cap node's planned group and mode), then the names
// file. An incomplete instance list never costs a live instance its lease.
SyncOutcome sync(const Sysroot& root, const SyncOptions& options);

} // namespace mig

} // namespace gpuinit
