// gpu-mknod's job as a library call: discover the machine, load the policy,
// plan the nodes and reconcile /dev, under the run lock. The tool parses
// options, calls this and renders what it returns.
#pragma once

#include "gpuinit/devnodes/node_plan.hpp"
#include "gpuinit/devnodes/reconcile.hpp"
#include "gpuinit/fs/run_dir.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/machine.hpp"

#include <chrono>

namespace gpuinit {

struct MknodOptions {
    bool dry_run = false;
    bool remove = false; // with Scope::Device: delete that GPU's nodes
    PlanRequest request;
    std::chrono::milliseconds lock_wait = kDefaultLockWait;
    // pci.ids names for the GPUs (Machine::pci_names), for --verbose and --json;
    // never on the udev and boot path, where they would cost milliseconds.
    bool names = false;
    // A candidate policy file (gpu-mknod --policy) instead of the root's
    // etc/gpu-restriction.conf; "" for that.
    std::string policy_file;
};

enum class MknodStatus {
    Done,        // everything as planned
    Partial,     // some GPU or node could not be set up (see the errors)
    NothingDone, // driver not loaded, broken /proc, bad policy, lock not taken...
};

// Why a run did nothing, where a caller acts on it differently (gpu-mknod's
// exit codes 5 and 6): run as root, or wait for the other run.
enum class MknodCause {
    Other,
    NotPermitted, // EPERM/EACCES: not root, or the kernel refused every change
    Busy,         // another run held the lock for longer than lock_wait
};

struct MknodOutcome {
    MknodStatus status = MknodStatus::Done;
    MknodCause cause = MknodCause::Other; // with NothingDone
    bool dry_run = false;
    Machine machine;
    NodePlan plan;
    ReconcileResult result;
    Diagnostics diagnostics;
};

MknodOutcome run_mknod(const Sysroot& root, const MknodOptions& options);

// What --check asks: would a run change anything, or does the policy name a
// group or owner that does not exist (its node would be root-only, not what
// the policy says)?
bool mknod_differs(const MknodOutcome& outcome);

} // namespace gpuinit
