#include "gpuinit/mig/pick.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/devnodes/node_plan.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/host/policy.hpp"
#include "gpuinit/mig/holders.hpp"
#include "gpuinit/mig/leases.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <set>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

namespace gpuinit {

namespace {

constexpr auto kPollPause = std::chrono::milliseconds(200);

Diagnostic failure(std::string message, PickFailure reason, int code = 0) {
    Diagnostic diagnostic = error(std::move(message), code);
    diagnostic.reason = static_cast<int>(reason);
    return diagnostic;
}

Diagnostic unusable(std::string message, int code = 0) {
    return failure(std::move(message), PickFailure::Unusable, code);
}

// The GPUs the caller may open, in PCI address order: what indices count.
Result<std::vector<const Gpu*>> openable_gpus(const Sysroot& root, const Machine& machine) {
    auto dev = SafeDir::open(root, "dev");
    if (!dev) {
        return unusable("cannot map GPU indices: " + dev.error().message, dev.error().code);
    }
    std::vector<const Gpu*> gpus;
    for (const Gpu& gpu : machine.gpus) {
        std::string node = format("nvidia%u", gpu.minor);
        if (::faccessat(dev->fd(), node.c_str(), R_OK | W_OK, AT_EACCESS | AT_SYMLINK_NOFOLLOW) ==
            0) {
            gpus.push_back(&gpu);
        }
    }
    std::sort(gpus.begin(), gpus.end(), [](const Gpu* a, const Gpu* b) { return a->bdf < b->bdf; });
    return gpus;
}

// The instances whose CI cap node the caller may open: what the kernel
// would let its CUDA process do (effective uid, groups and ACLs).
Result<std::vector<MigInstance>> openable_instances(const Sysroot& root,
                                                    const std::vector<MigInstance>& instances) {
    auto dev = SafeDir::open(root, "dev");
    if (!dev) {
        return unusable("cannot tell which MIG instances are yours: " + dev.error().message,
                        dev.error().code);
    }
    std::vector<MigInstance> yours;
    for (const MigInstance& instance : instances) {
        std::string node = cap_node_name(instance.ci_cap_minor);
        if (::faccessat(dev->fd(), node.c_str(), R_OK, AT_EACCESS | AT_SYMLINK_NOFOLLOW) == 0) {
            yours.push_back(instance);
        }
    }
    return yours;
}

// The leases the caller's other processes (its real uid, this one left
// out: under a copied root its /proc may not show this process) hold now.
size_t own_leases(const Sysroot& root, const LeaseDir& dir,
                  const std::vector<MigInstance>& instances) {
    std::vector<LeaseFile> files;
    for (const MigInstance& instance : instances) {
        if (auto st = dir.stat_lease(instance)) {
            files.push_back({st->st_dev, st->st_ino});
        }
    }
    auto holders = find_lease_holders(root, files, ::getuid(), false);
    if (!holders) {
        return SIZE_MAX; // cannot count: fail closed
    }
    pid_t self = ::getpid();
    return static_cast<size_t>(
        std::count_if(holders->begin(), holders->end(), [&](const std::vector<LeaseHolder>& list) {
            return std::any_of(list.begin(), list.end(),
                               [&](const LeaseHolder& holder) { return holder.pid != self; });
        }));
}

} // namespace

Result<std::vector<MigInstance>> visible_instances(const Sysroot& root, const Machine& machine,
                                                   const std::vector<MigInstance>& instances,
                                                   const PickRequest& request) {
    const char* variable =
        request.cuda_visible_devices ? "CUDA_VISIBLE_DEVICES" : "NVIDIA_VISIBLE_DEVICES";
    const std::optional<std::string>& setting = request.cuda_visible_devices
                                                    ? request.cuda_visible_devices
                                                    : request.nvidia_visible_devices;
    std::set<unsigned> gpu_minors;
    std::set<std::string> mig_uuids;
    bool all = !setting || (!request.cuda_visible_devices && trim(*setting) == "all");
    bool names_known = std::all_of(instances.begin(), instances.end(),
                                   [](const MigInstance& i) { return !i.uuid.empty(); });
    if (!all && !(!request.cuda_visible_devices &&
                  (trim(*setting) == "none" || trim(*setting) == "void"))) {
        std::optional<std::vector<const Gpu*>> by_index;
        for (std::string_view entry : split_words(*setting)) {
            // Entries are comma-separated; split_words took the spaces.
            size_t start = 0;
            while (start <= entry.size()) {
                size_t comma = entry.find(',', start);
                std::string_view token = trim(entry.substr(start, comma == std::string_view::npos
                                                                      ? std::string_view::npos
                                                                      : comma - start));
                start = comma == std::string_view::npos ? entry.size() + 1 : comma + 1;
                if (token.empty()) {
                    continue;
                }
                if (token.starts_with("MIG-")) {
                    if (!names_known) {
                        return unusable(std::string(variable) + " names " + quote(token) +
                                        ", but the MIG UUIDs of this machine are unknown (no NVML "
                                        "or nvidia-smi output); give GPU UUIDs or indices");
                    }
                    auto found =
                        std::find_if(instances.begin(), instances.end(),
                                     [&](const MigInstance& i) { return i.uuid == token; });
                    if (found == instances.end()) {
                        return unusable(std::string(variable) + " names " + quote(token) +
                                        ", which is no MIG instance of this machine; fix it");
                    }
                    mig_uuids.emplace(token);
                    continue;
                }
                if (token.starts_with("GPU-")) {
                    auto found = std::find_if(machine.gpus.begin(), machine.gpus.end(),
                                              [&](const Gpu& gpu) { return gpu.uuid == token; });
                    if (found == machine.gpus.end()) {
                        return unusable(std::string(variable) + " names " + quote(token) +
                                        ", which is no GPU of this machine; fix it");
                    }
                    gpu_minors.insert(found->minor);
                    continue;
                }
                auto index = parse_decimal(token, 1024);
                if (!index) {
                    return unusable(std::string(variable) + " has " + quote(token) +
                                    ", which is no index, GPU-UUID or MIG-UUID; fix it");
                }
                if (!by_index) {
                    auto gpus = openable_gpus(root, machine);
                    if (!gpus) {
                        return gpus.error();
                    }
                    by_index = std::move(*gpus);
                }
                if (*index >= by_index->size()) {
                    return unusable(format("%s names GPU index %u, but this job may open only "
                                           "%zu GPUs (indices count the /dev/nvidiaN it may "
                                           "open, in PCI order); give GPU UUIDs",
                                           variable, static_cast<unsigned>(*index),
                                           by_index->size()));
                }
                gpu_minors.insert((*by_index)[*index]->minor);
            }
        }
    }
    std::vector<MigInstance> visible;
    for (const MigInstance& instance : instances) {
        if (!all && gpu_minors.count(instance.gpu_minor) == 0 &&
            mig_uuids.count(instance.uuid) == 0) {
            continue;
        }
        if (!request.profile.empty()) {
            if (instance.profile.empty()) {
                return unusable("--profile " + quote(request.profile) + ": the profile of " +
                                instance.key() +
                                " is unknown (no NVML or nvidia-smi output); pick without "
                                "--profile");
            }
            if (instance.profile != request.profile) {
                continue;
            }
        }
        visible.push_back(instance);
    }
    return visible;
}

Result<Pick> pick_instances(const Sysroot& root, const Machine& machine,
                            const std::vector<MigInstance>& instances, const PickRequest& request,
                            Diagnostics& diagnostics) {
    auto candidates = visible_instances(root, machine, instances, request);
    if (!candidates) {
        return candidates.error();
    }
    if (request.need_uuid) {
        for (const MigInstance& instance : *candidates) {
            if (instance.uuid.empty()) {
                return unusable("the MIG UUID of " + instance.key() +
                                " is unknown (gpu-mig reads it from NVML or nvidia-smi "
                                "output); use --format key");
            }
        }
    }
    // Root may open every node and has no bound; anyone else picks among
    // what the policy lets it use, and holds at most its share.
    std::optional<unsigned> limit;
    std::string limit_origin;
    size_t not_yours = 0;
    if (::geteuid() != 0) {
        auto yours = openable_instances(root, *candidates);
        if (!yours) {
            return yours.error();
        }
        not_yours = candidates->size() - yours->size();
        *candidates = std::move(*yours);
        auto policy = Policy::load(root);
        if (!policy) {
            return unusable(policy.error().message + "; cannot tell how many instances a user "
                                                     "may hold",
                            policy.error().code);
        }
        limit = policy->mig_leases_per_user();
        limit_origin = policy->mig_leases_origin();
        if (request.count > *limit) {
            return failure(format("--count %u is more than the %u MIG instance%s one user may "
                                  "hold (mig-leases-per-user, %s)",
                                  request.count, *limit, *limit == 1 ? "" : "s",
                                  limit_origin.c_str()),
                           PickFailure::OverLimit, EDQUOT);
        }
    }
    if (candidates->size() < request.count) {
        return unusable(format(
            "%zu MIG instances are visible to this job%s, fewer than "
            "--count %u%s",
            candidates->size(),
            request.profile.empty() ? "" : (" with profile " + quote(request.profile)).c_str(),
            request.count,
            not_yours == 0 ? ""
                           : format(" (%zu more are other groups': your user and groups may not "
                                    "open their CI cap nodes)",
                                    not_yours)
                                 .c_str()));
    }
    if (!machine.caps_major) {
        return unusable(root.display("proc/devices") +
                        " has no nvidia-caps major: cannot tell which instances are in use "
                        "(load the nvidia driver with MIG support)");
    }
    auto dir = LeaseDir::open(root);
    if (!dir) {
        Diagnostic refused = dir.error();
        refused.reason = static_cast<int>(PickFailure::Unusable);
        return refused;
    }
    std::set<std::string> warned;
    auto deadline = std::chrono::steady_clock::now() + request.wait;
    for (;;) {
        Pick pick;
        size_t leased = 0;
        size_t skipped = 0;
        std::set<pid_t> users;
        size_t uninspected = 0;
        size_t next = 0;
        while (pick.instances.size() < request.count && next < candidates->size()) {
            // Leases for as many as are still needed, then one scan for all.
            Pick batch;
            while (pick.instances.size() + batch.instances.size() < request.count &&
                   next < candidates->size()) {
                const MigInstance& instance = (*candidates)[next++];
                auto lease = dir->take(instance);
                if (!lease) {
                    if (lease.error().reason == static_cast<int>(LeaseFailure::Held)) {
                        ++leased;
                        continue;
                    }
                    ++skipped;
                    if (warned.insert(instance.key()).second) {
                        Diagnostic warning = lease.error();
                        warning.severity = Severity::Warning;
                        diagnostics.add(warning);
                    }
                    continue;
                }
                batch.instances.push_back(instance);
                batch.leases.push_back(std::move(*lease));
            }
            if (batch.instances.empty()) {
                break;
            }
            std::vector<unsigned> minors;
            for (const MigInstance& instance : batch.instances) {
                minors.push_back(instance.ci_cap_minor);
            }
            auto holders = find_cap_holders(root, *machine.caps_major, minors);
            if (!holders) {
                Diagnostic refused = holders.error();
                refused.reason = static_cast<int>(PickFailure::Unusable);
                return refused;
            }
            uninspected = holders->uninspected;
            for (size_t i = 0; i < batch.instances.size(); ++i) {
                if (holders->busy(batch.instances[i].ci_cap_minor)) {
                    for (pid_t pid : holders->by_minor.at(batch.instances[i].ci_cap_minor)) {
                        users.insert(pid);
                    }
                    continue; // its lease closes with the batch
                }
                pick.instances.push_back(batch.instances[i]);
                pick.leases.push_back(std::move(batch.leases[i]));
            }
        }
        size_t held_by_caller = 0;
        if (pick.instances.size() == request.count) {
            if (!limit) {
                return pick;
            }
            // Counted with this pick's locks taken: two racing picks of one
            // user both see both, and both let go.
            size_t others = own_leases(root, *dir, instances);
            if (others == SIZE_MAX) {
                return unusable("cannot count the MIG leases you hold (" + root.display("proc") +
                                "); is /proc mounted?");
            }
            held_by_caller = others + pick.instances.size();
            if (held_by_caller <= *limit) {
                return pick;
            }
        }
        if (held_by_caller != 0 && std::chrono::steady_clock::now() >= deadline) {
            return failure(format("you hold %zu MIG lease%s already, and one user may hold %u "
                                  "(mig-leases-per-user, %s); end a job that holds one, or "
                                  "give --wait SECONDS",
                                  held_by_caller - request.count,
                                  held_by_caller - request.count == 1 ? "" : "s", *limit,
                                  limit_origin.c_str()),
                           PickFailure::OverLimit, EDQUOT);
        }
        if (held_by_caller == 0 && std::chrono::steady_clock::now() >= deadline) {
            std::string pids;
            for (pid_t pid : users) {
                pids += (pids.empty() ? "" : ",") + std::to_string(pid);
            }
            std::string message =
                format("no %u free MIG instance%s among the %zu visible to "
                       "this job: %zu leased by other jobs",
                       request.count, request.count == 1 ? "" : "s", candidates->size(), leased);
            if (!users.empty()) {
                message += ", in use by PID " + pids;
            }
            if (skipped != 0) {
                message +=
                    format(", %zu without a usable lease file (run 'gpu-mig sync')", skipped);
            }
            if (uninspected != 0) {
                message +=
                    format(" (%zu processes of other users could not be inspected)", uninspected);
            }
            message += request.wait.count() > 0
                           ? format(" after waiting %lld s",
                                    static_cast<long long>(request.wait.count() / 1000))
                           : "; retry later or give --wait SECONDS";
            return failure(message, PickFailure::NoneFree, EBUSY);
        }
        auto left = deadline - std::chrono::steady_clock::now();
        std::this_thread::sleep_for(
            std::min<std::chrono::steady_clock::duration>(kPollPause, left));
    }
}

Result<InstanceUses> instance_uses(const Sysroot& root, const Machine& machine,
                                   const std::vector<MigInstance>& instances,
                                   Diagnostics& diagnostics) {
    if (instances.empty()) {
        return InstanceUses{};
    }
    if (!machine.caps_major) {
        return unusable(root.display("proc/devices") +
                        " has no nvidia-caps major: cannot tell which instances are in use "
                        "(load the nvidia driver with MIG support)");
    }
    std::vector<unsigned> minors;
    minors.reserve(instances.size());
    for (const MigInstance& instance : instances) {
        minors.push_back(instance.ci_cap_minor);
    }
    auto holders = find_cap_holders(root, *machine.caps_major, minors);
    if (!holders) {
        return holders.error();
    }
    auto dir = LeaseDir::open(root);
    if (!dir) {
        Diagnostic warning = dir.error();
        warning.severity = Severity::Warning;
        diagnostics.add(warning);
    }
    InstanceUses uses;
    uses.uninspected = holders->uninspected;
    std::vector<LeaseFile> files;
    std::vector<size_t> file_of(instances.size(), SIZE_MAX);
    for (const MigInstance& instance : instances) {
        InstanceUse use{instance, std::nullopt, true, {}, {}};
        if (dir) {
            auto held = dir->held(instance);
            if (held) {
                use.leased = *held;
                if (auto st = dir->stat_lease(instance); st && *held) {
                    file_of[uses.uses.size()] = files.size();
                    files.push_back({st->st_dev, st->st_ino});
                }
            } else if (held.error().reason == static_cast<int>(LeaseFailure::NotYours)) {
                use.lease_yours = false;
            } else {
                Diagnostic warning = held.error();
                warning.severity = Severity::Warning;
                diagnostics.add(warning);
            }
        }
        if (auto found = holders->by_minor.find(instance.ci_cap_minor);
            found != holders->by_minor.end()) {
            use.pids = found->second;
        }
        uses.uses.push_back(std::move(use));
    }
    // Root sees every holder and its job; a user, its own processes.
    bool root_caller = ::geteuid() == 0;
    uses.all_holders = root_caller;
    if (!files.empty()) {
        auto lease_holders = find_lease_holders(
            root, files, root_caller ? std::nullopt : std::optional<uid_t>(::getuid()), true);
        if (!lease_holders) {
            return lease_holders.error();
        }
        for (size_t i = 0; i < uses.uses.size(); ++i) {
            if (file_of[i] != SIZE_MAX) {
                uses.uses[i].holders = std::move((*lease_holders)[file_of[i]]);
            }
        }
    }
    return uses;
}

Result<LeaseRelease> release_lease(const Sysroot& root, const std::vector<MigInstance>& instances,
                                   std::string_view key) {
    auto found = std::find_if(instances.begin(), instances.end(), [&](const MigInstance& i) {
        return i.key() == key || lease_name(i) == key;
    });
    if (found == instances.end()) {
        return unusable("no MIG instance " + quote(key) +
                            " on this machine; 'gpu-mig list' shows the keys (gpu1/gi7/ci0)",
                        ENOENT);
    }
    auto dir = LeaseDir::open(root);
    if (!dir) {
        return dir.error();
    }
    LeaseRelease release;
    release.instance = *found;
    auto held = dir->held(*found);
    if (!held) {
        return held.error();
    }
    release.was_held = *held;
    auto st = dir->stat_lease(*found);
    if (!st) {
        return st.error();
    }
    auto holders = find_lease_holders(root, {{st->st_dev, st->st_ino}}, std::nullopt, true);
    if (!holders) {
        return holders.error();
    }
    release.holders = std::move(holders->front());
    if (auto replaced = dir->replace(*found); !replaced) {
        Diagnostic why = replaced.error();
        why.message += " (releasing a lease needs root)";
        return why;
    }
    return release;
}

Status exec_holding(Pick& pick, const std::string& visible, char* const* argv) {
    for (const UniqueFd& lease : pick.leases) {
        if (::fcntl(lease.get(), F_SETFD, 0) != 0) {
            return errno_error("cannot pass the lease on to the command");
        }
    }
    if (::setenv("CUDA_VISIBLE_DEVICES", visible.c_str(), 1) != 0) {
        return errno_error("cannot set CUDA_VISIBLE_DEVICES");
    }
    ::execvp(argv[0], argv);
    int saved = errno;
    return os_error(saved, "cannot run " + quote(argv[0]));
}

Result<pid_t> keep_leases(Pick& pick, std::optional<pid_t> until) {
    pid_t watched = until ? *until : ::getppid();
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, watched, 0)));
    if (!pidfd.valid()) {
        return errno_error(format("cannot watch PID %d to hold the lease until it exits "
                                  "(pidfd_open needs Linux 5.3; use --hold)",
                                  static_cast<int>(watched)));
    }
    // Our parent died before we watched it: we would watch its reaper.
    if (!until && ::getppid() != watched) {
        return error("the process that started gpu-mig exited before the lease was held; "
                     "give --until PID",
                     ESRCH);
    }
    pid_t keeper = ::fork();
    if (keeper < 0) {
        return errno_error("cannot fork the lease keeper");
    }
    if (keeper > 0) {
        return keeper;
    }
    // The keeper: nothing but the leases and the pidfd stay open, so a
    // command substitution reading our stdout ends when gpu-mig does.
    ::setsid();
    if (::chdir("/") != 0) {
        _exit(1);
    }
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0) {
        _exit(1);
    }
    for (int fd = 0; fd <= 2; ++fd) {
        ::dup2(null, fd);
    }
    std::vector<int> keep = {pidfd.get()};
    for (const UniqueFd& lease : pick.leases) {
        keep.push_back(lease.get());
    }
    std::sort(keep.begin(), keep.end());
    unsigned from = 3;
    for (int fd : keep) {
        if (static_cast<unsigned>(fd) > from) {
            ::syscall(SYS_close_range, from, static_cast<unsigned>(fd) - 1, 0);
        }
        from = static_cast<unsigned>(fd) + 1;
    }
    ::syscall(SYS_close_range, from, ~0U, 0);
    pollfd watch{pidfd.get(), POLLIN, 0};
    while (::poll(&watch, 1, -1) < 0 && errno == EINTR) {
    }
    _exit(0);
}

} // namespace gpuinit
