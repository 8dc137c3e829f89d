// Tool side of gpu-limit (see launch.hpp): uses the standard library, so it
// must never be reached from libgpulimit.so (tests/limiter/abi checks).
#include "gpuinit/limit/launch.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/limit/daemon.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <memory>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace gpuinit::limit {

namespace {

constexpr const char* kMemoryVariables[] = {"GPU_MEM_PER_DEVICE", "ALIYUN_COM_GPU_MEM_DEV",
                                            "ALIYUN_COM_GPU_MEM_CONTAINER"};

const char* lookup_map(const char* name, void* context) {
    const auto& environment = *static_cast<const std::map<std::string, std::string>*>(context);
    auto found = environment.find(name);
    return found == environment.end() ? nullptr : found->second.c_str();
}

std::optional<std::string> get(const std::map<std::string, std::string>& environment,
                               const char* name) {
    auto found = environment.find(name);
    if (found == environment.end()) {
        return std::nullopt;
    }
    return found->second;
}

// A job id as the scheduler gives it: digits (and for LSF arrays the index).
bool is_job_id(const std::string& value) {
    return !value.empty() && value.size() <= 20 &&
           std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
}

struct GroupChoice {
    std::string name;
    std::string source;
};

Result<GroupChoice> choose_group(const RunRequest& request, const RunContext& context) {
    if (request.group) {
        return GroupChoice{*request.group, "--group"};
    }
    if (auto slurm = get(context.environment, "SLURM_JOB_ID"); slurm && !slurm->empty()) {
        if (!is_job_id(*slurm)) {
            return error("SLURM_JOB_ID=" + quote(*slurm) +
                         " is not a job id; give the group with --group NAME");
        }
        return GroupChoice{"slurm-" + *slurm, "SLURM_JOB_ID"};
    }
    if (auto lsf = get(context.environment, "LSB_JOBID"); lsf && !lsf->empty()) {
        if (!is_job_id(*lsf)) {
            return error("LSB_JOBID=" + quote(*lsf) +
                         " is not a job id; give the group with --group NAME");
        }
        std::string name = "lsf-" + *lsf;
        // The elements of an LSF job array share LSB_JOBID; each is its own job.
        if (auto index = get(context.environment, "LSB_JOBINDEX");
            index && is_job_id(*index) && *index != "0") {
            name += "_" + *index;
        }
        return GroupChoice{name, "LSB_JOBID"};
    }
    return GroupChoice{format("run-%d-%llu", static_cast<int>(context.pid),
                              static_cast<unsigned long long>(context.now_s)),
                       "per run"};
}

Status check_library(const std::string& path, const std::string& from) {
    if (path.empty() || path[0] != '/') {
        return error("the library " + quote(path) + " (" + from +
                     ") is not an absolute path; give the full path of libgpulimit.so with "
                     "--library");
    }
    if (path.find_first_of(": \t\n") != std::string::npos) {
        return error("the library path " + quote(path) + " (" + from +
                     ") contains ':' or a space, which split LD_PRELOAD; install it under a "
                     "path without them");
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        return os_error(errno, "cannot use the library " + quote(path) + " (" + from +
                                   "); install gpuinit's libgpulimit.so or give its path with "
                                   "--library");
    }
    if (!S_ISREG(st.st_mode)) {
        return error("the library " + quote(path) + " (" + from +
                     ") is not a regular file; give the path of libgpulimit.so with --library");
    }
    return {};
}

// LD_PRELOAD with the library first and nowhere else.
std::string preload_with(const std::string& library, const std::optional<std::string>& existing) {
    std::string preload = library;
    if (!existing) {
        return preload;
    }
    std::string_view rest = *existing;
    while (!rest.empty()) {
        size_t end = rest.find_first_of(": ");
        std::string_view entry = rest.substr(0, end);
        if (!entry.empty() && entry != library) {
            preload += ":";
            preload += entry;
        }
        if (end == std::string_view::npos) {
            break;
        }
        rest.remove_prefix(end + 1);
    }
    return preload;
}

} // namespace

Result<uint64_t> parse_memory_size(std::string_view text) {
    size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
        ++digits;
    }
    std::string_view suffix = text.substr(digits);
    std::string lower;
    for (char c : suffix) {
        lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    unsigned shift = 0;
    if (!lower.empty() && lower != "b") {
        const std::string units = "kmgt";
        size_t unit = units.find(lower[0]);
        std::string_view tail = std::string_view(lower).substr(1);
        if (unit == std::string::npos || (!tail.empty() && tail != "b" && tail != "ib")) {
            return error("--mem " + quote(text) +
                         " is not a size; give bytes, or a number with K, M, G or T (binary: "
                         "G is 2^30 bytes), such as --mem 8G");
        }
        shift = 10 * static_cast<unsigned>(unit + 1);
    }
    auto number = parse_decimal(text.substr(0, digits), UINT64_MAX >> shift);
    if (!number || *number == 0) {
        return error("--mem " + quote(text) +
                     " is not a positive size below 2^64 bytes; give bytes, or a number with K, "
                     "M, G or T (binary), such as --mem 8G");
    }
    return *number << shift;
}

Result<std::string> effective_state_dir(const std::optional<std::string>& given, uid_t uid,
                                        const char* xdg_runtime_dir) {
    if (given) {
        if (given->empty() || (*given)[0] != '/') {
            return error("the state directory " + quote(*given) +
                         " is not an absolute path; give one with --state-dir /PATH");
        }
        return *given;
    }
    char path[kPathSize];
    Problem problem;
    if (!default_state_dir(static_cast<uint32_t>(uid), xdg_runtime_dir, path, problem)) {
        return error(problem.text);
    }
    return std::string(path);
}

Status check_state_dir(const std::string& path, uid_t uid, bool missing_ok) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT && missing_ok) {
            return {};
        }
        return os_error(errno, "cannot use the state directory " + quote(path));
    }
    if (!S_ISDIR(st.st_mode)) {
        return error("the state directory " + quote(path) +
                         " is not a directory (a symlink is not followed); remove it or give "
                         "another with --state-dir",
                     ENOTDIR);
    }
    if (st.st_uid != uid && st.st_uid != 0) {
        return error(format("the state directory %s is owned by uid %u, not by you (uid %u) or "
                            "root, so another user could forge the group's usage; remove it or "
                            "give another with --state-dir",
                            quote(path).c_str(), static_cast<unsigned>(st.st_uid),
                            static_cast<unsigned>(uid)),
                     EPERM);
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return error(format("the state directory %s is writable by %s (mode %s), so others could "
                            "forge the group's usage; chmod go-w %s",
                            quote(path).c_str(),
                            (st.st_mode & S_IWOTH) != 0 ? "others" : "its group",
                            format_mode(st.st_mode & 07777).c_str(), quote(path).c_str()),
                     EPERM);
    }
    return {};
}

Result<RunPlan> plan_run(const RunRequest& request, const RunContext& context) {
    RunPlan plan;
    std::map<std::string, std::string> environment = context.environment;
    auto set = [&](const char* name, const std::string& value) {
        plan.set.emplace_back(name, value);
        environment[name] = value;
    };
    auto unset = [&](const char* name) {
        if (environment.erase(name) != 0) {
            plan.unset.emplace_back(name);
        }
    };
    set("AMP_VGPU_ENABLE", "1");
    if (request.mem && request.mem_ratio) {
        return error("--mem and --mem-ratio do not go together; a cap is either bytes or a share");
    }
    if (request.mem) {
        auto bytes = parse_memory_size(*request.mem);
        if (!bytes) {
            return bytes.error();
        }
        set("GPU_MEM_PER_DEVICE", std::to_string(*bytes));
        unset("ALIYUN_COM_GPU_MEM_DEV");
        unset("ALIYUN_COM_GPU_MEM_CONTAINER");
    } else if (request.mem_ratio) {
        size_t slash = request.mem_ratio->find('/');
        if (slash == std::string::npos) {
            return error("--mem-ratio " + quote(*request.mem_ratio) +
                         " is not C/D; give the job's share as parts of the GPU, such as "
                         "--mem-ratio 1/4");
        }
        set("ALIYUN_COM_GPU_MEM_CONTAINER", request.mem_ratio->substr(0, slash));
        set("ALIYUN_COM_GPU_MEM_DEV", request.mem_ratio->substr(slash + 1));
        unset("GPU_MEM_PER_DEVICE");
    }
    if (request.reserved_mib) {
        set("ALIYUN_COM_GPU_MEM_RESERVED", *request.reserved_mib);
    }
    if (request.util) {
        set("GPU_UTIL_PER_DEVICE", *request.util);
    }
    if (request.oom_script) {
        set("ALIYUN_COM_GPU_OOM_SCRIPT", *request.oom_script);
    }
    if (request.oom_policy) {
        set("GPU_LIMIT_OOM_POLICY", *request.oom_policy);
    }
    auto group = choose_group(request, context);
    if (!group) {
        return group.error();
    }
    plan.group = group->name;
    plan.group_source = group->source;
    set("GPU_LIMIT_GROUP", plan.group);
    std::optional<std::string> state_dir = request.state_dir;
    if (!state_dir) {
        state_dir = get(environment, "GPU_LIMIT_STATE_DIR");
    }
    auto xdg = get(environment, "XDG_RUNTIME_DIR");
    auto effective = effective_state_dir(state_dir, context.uid, xdg ? xdg->c_str() : nullptr);
    if (!effective) {
        return effective.error();
    }
    plan.state_dir = *effective;
    // Pinned, so that the job and `gpu-limit status` agree on it.
    set("GPU_LIMIT_STATE_DIR", plan.state_dir);

    std::string from = "--library";
    if (request.library) {
        plan.library = *request.library;
    } else if (auto variable = get(context.environment, "GPU_LIMIT_LIBRARY")) {
        plan.library = *variable;
        from = "GPU_LIMIT_LIBRARY";
    } else {
        plan.library = context.default_library;
        from = "the installed default";
    }
    if (auto checked = check_library(plan.library, from); !checked) {
        return checked.error();
    }
    set("LD_PRELOAD", preload_with(plan.library, get(environment, "LD_PRELOAD")));

    // The library's own parser, over exactly what the job will see.
    auto settings = std::make_unique<Settings>();
    Problem problem;
    if (!parse_settings(lookup_map, &environment, *settings, problem)) {
        return error(std::string(problem.text));
    }
    plan.rule = settings->rule;
    plan.compute_percent = settings->compute_percent;
    if (auto trusted = check_state_dir(plan.state_dir, context.uid, true); !trusted) {
        return trusted.error();
    }
    return plan;
}

Status apply_run_plan(const RunPlan& plan) {
    for (const std::string& name : plan.unset) {
        if (::unsetenv(name.c_str()) != 0) {
            return errno_error("cannot unset " + name);
        }
    }
    for (const auto& [name, value] : plan.set) {
        if (::setenv(name.c_str(), value.c_str(), 1) != 0) {
            return errno_error("cannot set " + name);
        }
    }
    return {};
}

namespace {

bool valid_group_name(const std::string& name) {
    if (name.empty() || name.size() >= kGroupNameSize || name == "." || name == "..") {
        return false;
    }
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               c == '.' || c == '_' || c == '-';
    });
}

// Where status checks host pids: this process's /proc (status runs on the
// host), and how much of it one run reads (about a second at most).
struct HostPidCheck {
    const Sysroot* proc = nullptr;
    FdinfoBudget budget{65536, 64u << 20};
};

// The host pid in a slot is the daemon's word, but it sits in the group's
// state file, which the group's processes write: believe it only while that
// process holds the slot's lock, as the daemon checked before writing it.
bool holds_slot(HostPidCheck& check, const GroupState& state, int slot, int32_t pid) {
    uint64_t device = 0;
    uint64_t inode = 0;
    uint64_t offset = 0;
    return check.proc != nullptr && pid > 0 && state.slot_lock_place(slot, device, inode, offset) &&
           process_holds_lock(*check.proc, pid, ::major(device), ::minor(device), inode, offset,
                              &check.budget);
}

Result<GroupReport> read_group(const std::string& state_dir, const std::string& name,
                               HostPidCheck& check) {
    GroupReport report;
    report.name = name;
    report.path = state_dir + "/" + name + "/state";
    auto state = std::make_unique<GroupState>();
    Problem problem;
    // The file's owner (or root) opens it writable, without taking a slot,
    // and returns what dead processes left before reporting, as the library
    // does before it reports: a SIGKILLed job shows as freed at once, not at
    // the group's next allocation. Anyone else gets the read-only view.
    struct stat file {};
    bool writable = ::lstat(report.path.c_str(), &file) == 0 && S_ISREG(file.st_mode) &&
                    ::access(report.path.c_str(), R_OK | W_OK) == 0 &&
                    state->open(state_dir.c_str(), name.c_str(), problem);
    if (writable) {
        report.reclaimed = state->reclaim_dead();
    } else if (!state->open_read_only(state_dir.c_str(), name.c_str(), problem)) {
        Diagnostic failure = error(std::string(problem.text), problem.errnum);
        failure.where.group = name;
        return failure;
    }
    int devices = std::min(state->device_count(), kMaxGroupDevices);
    for (int device = 0; device < devices; ++device) {
        DeviceUsage usage{};
        if (state->device_usage(device, usage)) {
            report.devices.push_back(usage);
        }
    }
    for (int slot = 0; slot < kMaxSlots; ++slot) {
        ProcessUsage process;
        uint64_t charged[kMaxGroupDevices] = {};
        char comm[16] = {};
        if (!state->slot_usage(slot, process.pid, charged, process.alive, comm)) {
            continue;
        }
        process.slot = slot;
        int32_t pid = 0;
        if (!process.alive || !state->slot_pids(slot, pid, process.host_pid) ||
            pid != process.pid || !holds_slot(check, *state, slot, process.host_pid)) {
            process.host_pid = 0;
        }
        process.comm.assign(comm, strnlen(comm, sizeof comm));
        process.charged.assign(charged, charged + devices);
        report.processes.push_back(std::move(process));
    }
    state->close();
    return report;
}

} // namespace

Result<StatusReport> read_status(const std::string& state_dir,
                                 const std::optional<std::string>& group, uid_t uid,
                                 Diagnostics& diagnostics) {
    StatusReport report;
    report.state_dir = state_dir;
    struct stat st {};
    if (::lstat(state_dir.c_str(), &st) != 0 && errno == ENOENT) {
        if (group) {
            return error("no group " + quote(*group) + ": the state directory " + quote(state_dir) +
                         " does not exist (no job has run under gpu-limit)");
        }
        return report;
    }
    if (auto trusted = check_state_dir(state_dir, uid, false); !trusted) {
        return trusted.error();
    }
    report.state_dir_exists = true;
    std::vector<std::string> names;
    if (group) {
        if (!valid_group_name(*group)) {
            return error("--group " + quote(*group) +
                         " is not a group name; use 1 to 64 of A-Z a-z 0-9 . _ -");
        }
        names.push_back(*group);
    } else {
        std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(state_dir.c_str()), ::closedir);
        if (!dir) {
            return os_error(errno, "cannot list the state directory " + quote(state_dir));
        }
        while (const dirent* entry = ::readdir(dir.get())) {
            std::string name = entry->d_name;
            if (name == "." || name == "..") {
                continue;
            }
            // The host's own files beside the groups (/run/gpu-limit: the
            // daemon's socket and pid file, the containers' ld.so.preload)
            // are no groups; anything else that is not a directory is
            // reported by read_group.
            if (entry->d_type != DT_DIR &&
                (name == "daemon.sock" || name == "daemon.pid" || name == "ld.so.preload")) {
                continue;
            }
            if (!valid_group_name(name)) {
                diagnostics.warning("skipped " + quote(name) + " in " + quote(state_dir) +
                                    ": not a group name");
                continue;
            }
            names.push_back(std::move(name));
        }
        std::sort(names.begin(), names.end());
    }
    auto proc = Sysroot::open("/");
    HostPidCheck check;
    check.proc = proc ? &*proc : nullptr;
    for (const std::string& name : names) {
        auto read = read_group(state_dir, name, check);
        if (!read) {
            if (group) {
                return read.error();
            }
            diagnostics.add(read.error());
            continue;
        }
        report.groups.push_back(std::move(*read));
    }
    return report;
}

} // namespace gpuinit::limit
