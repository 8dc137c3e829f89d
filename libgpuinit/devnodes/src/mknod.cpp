#include "gpuinit/devnodes/mknod.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/devnodes/gpu_records.hpp"
#include "gpuinit/host/accounts.hpp"
#include "gpuinit/host/gpu_information.hpp"
#include "gpuinit/host/policy.hpp"

#include <algorithm>
#include <cerrno>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

namespace gpuinit {

namespace {

bool refused(int code) {
    return code == EPERM || code == EACCES;
}

MknodOutcome nothing_done(MknodOutcome outcome, Diagnostic why) {
    outcome.status = MknodStatus::NothingDone;
    if (refused(why.code)) {
        outcome.cause = MknodCause::NotPermitted;
    }
    why.severity = Severity::Error;
    outcome.diagnostics.add(std::move(why));
    return outcome;
}

void finish(MknodOutcome& outcome) {
    const ReconcileResult& result = outcome.result;
    size_t failed = result.count(Change::Kind::Failed);
    size_t attempted = failed + result.count(Change::Kind::Create) +
                       result.count(Change::Kind::Replace) + result.count(Change::Kind::Repair) +
                       result.count(Change::Kind::Remove);
    if (failed > 0 && failed == attempted && result.count(Change::Kind::Unchanged) == 0) {
        outcome.status = MknodStatus::NothingDone;
        // Every change the kernel refused: not root (or not a root that may).
        bool all_refused = true;
        for (const Diagnostic& problem : outcome.diagnostics.items()) {
            if (problem.severity == Severity::Error && problem.code != 0) {
                all_refused = all_refused && refused(problem.code);
            }
        }
        outcome.cause = all_refused ? MknodCause::NotPermitted : MknodCause::Other;
    } else if (failed > 0 || outcome.diagnostics.has_errors()) {
        outcome.status = MknodStatus::Partial;
    }
}

// Which PCI functions the request needs read: all of them to report GPUs
// the driver does not list; for one GPU named by address, that one.
PciNeed pci_need(const MknodOptions& options) {
    const PlanRequest& request = options.request;
    if (options.remove || request.scope == PlanRequest::Scope::Control ||
        request.scope == PlanRequest::Scope::Mig) {
        return {PciNeed::Scope::None, {}, options.names};
    }
    if (request.scope == PlanRequest::Scope::Device) {
        if (request.device->kind() == GpuSelector::Kind::Bdf) {
            return {PciNeed::Scope::One, request.device->key(), options.names};
        }
        return {PciNeed::Scope::None, {}, options.names};
    }
    return {PciNeed::Scope::All, {}, options.names};
}

// --device for a GPU the driver does not list and PCI does not show: one
// error, and nothing to plan.
bool names_a_gpu(const Machine& machine, const GpuSelector& device) {
    for (const Gpu& gpu : machine.gpus) {
        if (device.matches(gpu.identity())) {
            return true;
        }
    }
    for (const UnusableGpu& gpu : machine.unusable) {
        if (device.matches(GpuIdentity{kMaxGpuMinor + 1, gpu.bdf, {}})) {
            return true;
        }
    }
    return false;
}

// Returns the minor whose nodes were removed (or found already gone), so its
// record can be forgotten; nullopt when nothing was removed.
std::optional<unsigned> run_remove(const Sysroot& root, const MknodOptions& options,
                                   const RunDir* run, MknodOutcome& outcome) {
    const GpuSelector& device = *options.request.device;
    std::optional<unsigned> minor;
    if (device.kind() == GpuSelector::Kind::Minor) {
        minor = device.minor();
    } else {
        auto recorded = run != nullptr ? recorded_minor(*run, device)
                                       : Result<std::optional<unsigned>>(std::nullopt);
        if (!recorded) {
            outcome.diagnostics.add(recorded.error());
            return std::nullopt;
        }
        minor = *recorded;
        if (!minor) {
            outcome.diagnostics.error(
                "no record of GPU " + device.text() + " in " +
                    root.display(std::string(kRunDir) + "/" + std::string(kGpuRecords)) +
                    "; pass its minor instead (gpu-mknod --remove --device N)",
                Location::of_device(device.text()));
            return std::nullopt;
        }
    }
    for (const Gpu& gpu : outcome.machine.gpus) {
        if (gpu.minor == *minor) {
            outcome.diagnostics.error(gpu.subject() +
                                          " is still bound to the driver; refusing to remove its"
                                          " node (unbind it first)",
                                      Location::of_device("/dev/" + gpu_node_name(gpu.minor)));
            return std::nullopt;
        }
    }
    unsigned major = outcome.machine.nvidia_major.value_or(kClassicNvidiaMajor);
    outcome.result = remove_gpu_nodes(root, major, *minor, options.dry_run, outcome.diagnostics);
    if (outcome.result.failed()) {
        return std::nullopt;
    }
    return minor;
}

// nvidia-modprobe resets a cap node whose DeviceFileModify is 1: for the
// nodes this run manages, the driver is told 0 (it takes the line when the
// file is closed). Failures are errors; the node itself is already right.
//
// Only the driver's own file takes the line: the access files are procfs
// entries (kernel-open/nvidia/nv-caps.c of NVIDIA/open-gpu-kernel-modules,
// tag 595.45.04: nv_cap_create_file_entry makes them with proc_create_data;
// nv_cap_procfs_write buffers what is written and nv_cap_procfs_release
// takes "DeviceFileModify: %d" from it on close). A file elsewhere
// (a copied tree under --root, a fixture) is a plain file whose start the
// line would overwrite: it is left alone, and the report says what would
// have been written.
void switch_off_modify(const Sysroot& root, const NodePlan& plan, bool dry_run,
                       MknodOutcome& outcome) {
    constexpr std::string_view kLine = "DeviceFileModify: 0\n";
    for (const std::string& access : plan.modify_off) {
        if (!dry_run) {
            auto fd = root.open_file_for_write(access);
            if (!fd) {
                outcome.result.changes.push_back(
                    {Change::Kind::Failed, Change::Target::AccessFile, access, fd.error().message});
                outcome.diagnostics.add(fd.error());
                continue;
            }
            struct statfs fs {};
            if (::fstatfs(fd->get(), &fs) != 0) {
                Diagnostic problem = errno_error("cannot tell the file system of " +
                                                 root.display(access) + "; wrote nothing to it");
                outcome.result.changes.push_back(
                    {Change::Kind::Failed, Change::Target::AccessFile, access, problem.message});
                outcome.diagnostics.add(std::move(problem));
                continue;
            }
            if (fs.f_type != PROC_SUPER_MAGIC) {
                outcome.result.changes.push_back({Change::Kind::Unchanged,
                                                  Change::Target::AccessFile, access,
                                                  "not procfs: would write DeviceFileModify: 0"});
                outcome.diagnostics.warning(
                    root.display(access) + " is not on procfs (a copy of a machine?): would write "
                                           "'DeviceFileModify: 0' to the driver; wrote nothing",
                    Location::in_file(root.display(access)));
                continue;
            }
            if (::write(fd->get(), kLine.data(), kLine.size()) !=
                static_cast<ssize_t>(kLine.size())) {
                Diagnostic problem =
                    errno_error("cannot write DeviceFileModify: 0 to " + root.display(access));
                outcome.result.changes.push_back(
                    {Change::Kind::Failed, Change::Target::AccessFile, access, problem.message});
                outcome.diagnostics.add(std::move(problem));
                continue;
            }
        }
        outcome.result.changes.push_back(
            {Change::Kind::Repair, Change::Target::AccessFile, access, "DeviceFileModify 1 -> 0"});
    }
}

} // namespace

MknodOutcome run_mknod(const Sysroot& root, const MknodOptions& options) {
    MknodOutcome outcome;
    outcome.dry_run = options.dry_run;
    auto machine = discover_machine(root, outcome.diagnostics, pci_need(options));
    if (!machine) {
        return nothing_done(std::move(outcome), machine.error());
    }
    outcome.machine = std::move(*machine);
    bool wants_mig = !options.remove && (options.request.scope == PlanRequest::Scope::All ||
                                         options.request.scope == PlanRequest::Scope::Mig);
    if (wants_mig && outcome.machine.caps_major) {
        auto mig = read_mig_topology(root, outcome.diagnostics);
        if (!mig) {
            // The GPUs still get their nodes; only the MIG caps are lost.
            outcome.diagnostics.add(mig.error());
        } else {
            outcome.machine.mig = std::move(*mig);
        }
    }

    // Everything that makes the run a no-op is checked before the lock, so a
    // run that does nothing leaves nothing behind (not even run/gpuinit/lock).
    Policy policy = Policy::classic();
    std::optional<AccountDb> accounts;
    if (!options.remove) {
        if (!outcome.machine.nvidia_major) {
            return nothing_done(std::move(outcome),
                                error("the nvidia driver is not loaded: no 'nvidia' in " +
                                      root.display("proc/devices") + "; run gpu-modload first"));
        }
        auto loaded = options.policy_file.empty() ? Policy::load(root)
                                                  : Policy::load_file(options.policy_file);
        if (!loaded) {
            Diagnostic why = loaded.error();
            why.message += "; nothing was changed";
            return nothing_done(std::move(outcome), std::move(why));
        }
        policy = std::move(*loaded);
        if (options.request.scope == PlanRequest::Scope::Device &&
            !names_a_gpu(outcome.machine, *options.request.device)) {
            Diagnostic unknown = error("no NVIDIA GPU " + options.request.device->text() +
                                       " (check /proc/driver/nvidia/gpus and lspci -d 10de:)");
            unknown.where.device = options.request.device->text();
            return nothing_done(std::move(outcome), std::move(unknown));
        }
        auto db = AccountDb::load(root, outcome.diagnostics);
        if (!db) {
            return nothing_done(std::move(outcome), db.error());
        }
        accounts = std::move(*db);
    }

    // Serialize with concurrent runs before reading anything /dev-related;
    // a dry run changes nothing and needs no lock.
    std::optional<RunDir> run;
    UniqueFd lock;
    if (!options.dry_run) {
        auto opened = RunDir::open(root, true);
        if (!opened) {
            return nothing_done(std::move(outcome), opened.error());
        }
        run = std::move(*opened);
        auto locked = run->lock(kMknodLock, options.lock_wait);
        if (!locked) {
            bool busy = locked.error().code == ETIMEDOUT;
            outcome = nothing_done(std::move(outcome), locked.error());
            outcome.cause = busy ? MknodCause::Busy : outcome.cause;
            return outcome;
        }
        lock = std::move(*locked);
    } else if (auto opened = RunDir::open(root, false); opened) {
        run = std::move(*opened); // read-only use: the records for --remove
    }

    std::optional<unsigned> removed_minor;
    if (options.remove) {
        removed_minor = run_remove(root, options, run ? &*run : nullptr, outcome);
    } else {
        outcome.plan =
            plan_nodes(outcome.machine, policy, *accounts, options.request, outcome.diagnostics);
        outcome.result = reconcile(root, outcome.plan, options.dry_run, outcome.diagnostics);
        switch_off_modify(root, outcome.plan, options.dry_run, outcome);
    }
    if (!options.dry_run) {
        if (auto saved = save_gpu_records(*run, outcome.machine, removed_minor); !saved) {
            Diagnostic warning = saved.error();
            warning.severity = Severity::Warning;
            outcome.diagnostics.add(std::move(warning));
        }
    }
    finish(outcome);
    return outcome;
}

bool mknod_differs(const MknodOutcome& outcome) {
    const ReconcileResult& result = outcome.result;
    if (result.count(Change::Kind::Create) + result.count(Change::Kind::Repair) +
            result.count(Change::Kind::Replace) + result.count(Change::Kind::Remove) >
        0) {
        return true;
    }
    for (const Diagnostic& problem : outcome.diagnostics.items()) {
        if (problem.reason == kReasonNoAccount) {
            return true;
        }
    }
    return false;
}

} // namespace gpuinit
