// gpu-mig pick: free MIG instances for a job, race-free. For each candidate
// in order (GPU minor, GI, CI): take its lease (never waiting on it), then
// look for processes holding its CI cap device, and let the lease go again
// if one does. Two picks never get the same instance: only one of them can
// hold its lease. The instance stays the job's while the lease fds stay
// open: in a command that inherits them (exec_holding) or in a small keeper
// process that lives until a given process exits (keep_leases).
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/mig/holders.hpp"
#include "gpuinit/mig/instances.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace gpuinit {

// Why a pick failed (Diagnostic::reason).
enum class PickFailure : int {
    None = 0,
    Unusable = 1,  // cannot pick at all: no leases, unknown names, bad visibility, no /proc
    NoneFree = 2,  // every visible instance is leased or in use (after the wait)
    OverLimit = 3, // the caller already holds mig-leases-per-user leases (after the wait)
};

struct PickRequest {
    std::string profile; // empty: any; else must equal MigInstance::profile
    unsigned count = 1;
    bool need_uuid = true; // the ids are MIG UUIDs, which must be known
    // The scheduler's choice of GPUs, as the environment gave it (nullopt:
    // unset). CUDA_VISIBLE_DEVICES wins when both are set.
    std::optional<std::string> cuda_visible_devices;
    std::optional<std::string> nvidia_visible_devices;
    // How long to keep trying when none is free; polled every 200 ms.
    std::chrono::milliseconds wait{0};
};

// The instances a job may use: on GPUs (or exactly the MIG instances) that
// CUDA_VISIBLE_DEVICES, else NVIDIA_VISIBLE_DEVICES, names, of the profile
// asked for. Entries are GPU UUIDs ("GPU-..."), MIG UUIDs ("MIG-...") or
// indices; NVIDIA_VISIBLE_DEVICES also takes "all", "none" and "void".
// Index i is the i-th GPU in PCI address order among those whose
// /dev/nvidiaN the caller may open read-write (faccessat, effective ids):
// what CUDA with CUDA_DEVICE_ORDER=PCI_BUS_ID enumerates for the job, never
// nvidia-smi's index. An entry that names no GPU or instance is an error
// (reason Unusable), as is a MIG UUID or --profile while names are unknown.
Result<std::vector<MigInstance>> visible_instances(const Sysroot& root, const Machine& machine,
                                                   const std::vector<MigInstance>& instances,
                                                   const PickRequest& request);

struct Pick {
    std::vector<MigInstance> instances;
    std::vector<UniqueFd> leases; // one per instance, flocked, O_CLOEXEC
};

// Picks request.count free instances among visible_instances(), all or
// none. A caller other than root picks only among the instances whose CI
// cap node it may open (faccessat R_OK with its effective uid and groups:
// the MIG rule's group decides), and holds at most the policy's
// mig-leases-per-user leases at once: counted after the leases are taken
// (its own processes' locks, this pick's included), so that picks racing
// each other never exceed it. Lease files that are missing or refused (planted, symlinks) are
// skipped with a warning in `diagnostics`. Fails with reason Unusable or
// NoneFree (the message says how many are leased and which PIDs use the
// others).
Result<Pick> pick_instances(const Sysroot& root, const Machine& machine,
                            const std::vector<MigInstance>& instances, const PickRequest& request,
                            Diagnostics& diagnostics);

// What pick judges by, for `gpu-mig list`.
struct InstanceUse {
    MigInstance instance;
    std::optional<bool> leased;       // nullopt: no usable lease, or not the caller's to open
    bool lease_yours = true;          // false: the caller may not use it (another group's)
    std::vector<LeaseHolder> holders; // of the lease; root sees everyone's, a user its own
    std::vector<pid_t> pids;          // holding its CI cap device, those the caller may see
};

struct InstanceUses {
    std::vector<InstanceUse> uses;
    size_t uninspected = 0; // processes the caller may not inspect
    // Whose processes were searched for lease holders: every process in
    // <root>/proc (root), else only the caller's (another user's fds need
    // ptrace access, and the lock itself does not say who took it).
    bool all_holders = false;
};

// Every instance's lease (taken for an instant to see whether someone
// holds it: a pick at that moment moves on) and the PIDs using it. No lease
// directory is a warning in `diagnostics` (leased stays unknown); no
// nvidia-caps major or no /proc fails.
Result<InstanceUses> instance_uses(const Sysroot& root, const Machine& machine,
                                   const std::vector<MigInstance>& instances,
                                   Diagnostics& diagnostics);

// Root: takes the lease of `key` ("gpu1/gi7/ci0" or "gpu1-gi7-ci0") back
// by replacing its lease, so the holder's lock no longer counts. The holder
// itself runs on (kill it if it must stop).
struct LeaseRelease {
    MigInstance instance;
    bool was_held = false;
    std::vector<LeaseHolder> holders; // who held it
};
Result<LeaseRelease> release_lease(const Sysroot& root, const std::vector<MigInstance>& instances,
                                   std::string_view key);

// Runs argv (PATH searched) in this process with CUDA_VISIBLE_DEVICES set to
// `visible`, the lease fds inherited (their O_CLOEXEC cleared): the leases
// last while the command, or anything it passes the fds to, keeps them
// open. Returns only on failure: code ENOENT when argv[0] was not found.
Status exec_holding(Pick& pick, const std::string& visible, char* const* argv);

// Forks a keeper that holds the leases (its own session, stdio on
// /dev/null, nothing else open) until process `until` exits; without
// `until`, until this process's parent exits. Returns the keeper's PID.
// Needs pidfd_open (Linux 5.3).
Result<pid_t> keep_leases(Pick& pick, std::optional<pid_t> until);

} // namespace gpuinit
