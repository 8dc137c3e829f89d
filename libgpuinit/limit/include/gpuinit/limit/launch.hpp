// `gpu-limit run` and `gpu-limit status` (tool side, not freestanding: never
// linked into libgpulimit.so). run turns options into the eGPU environment
// and checks it with the library's own parser, so that it never starts a job
// the library would refuse; status reads every group's shared state.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/limit/egpu.hpp"
#include "gpuinit/limit/group_state.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace gpuinit::limit {

// Bytes, with an optional binary suffix: K, M, G, T (2^10 .. 2^40), each
// optionally followed by "iB" or "B" ("2G", "2GiB", "512m"); "B" alone is
// bytes. Zero, overflow and anything else are errors.
Result<uint64_t> parse_memory_size(std::string_view text);

struct RunRequest {
    std::optional<std::string> mem;       // --mem
    std::optional<std::string> mem_ratio; // --mem-ratio C/D
    std::optional<std::string> reserved_mib;
    std::optional<std::string> util; // --util PERCENT (GPU_UTIL_PER_DEVICE)
    std::optional<std::string> group;
    std::optional<std::string> state_dir;
    std::optional<std::string> oom_script;
    std::optional<std::string> oom_policy;
    std::optional<std::string> library;
};

// What the caller's world gives run: its environment, ids and the path the
// library was installed to.
struct RunContext {
    std::map<std::string, std::string> environment;
    uid_t uid = 0;
    pid_t pid = 0;
    uint64_t now_s = 0;          // distinguishes per-run groups across pid reuse
    std::string default_library; // ${libdir}/gpuinit/libgpulimit.so
};

struct RunPlan {
    std::vector<std::pair<std::string, std::string>> set; // in the order printed
    std::vector<std::string> unset;                       // inherited variables that conflict
    std::string library;
    std::string group;
    std::string group_source; // "--group", "SLURM_JOB_ID", "LSB_JOBID", "per run"
    std::string state_dir;
    MemoryRule rule = MemoryRule::None;
    uint32_t compute_percent = 0; // 0: no compute cap
};

// Builds the job's environment and runs parse_settings over it exactly as
// the library will see it. The library must be an absolute path to a
// regular file without ':' or spaces (LD_PRELOAD separators).
Result<RunPlan> plan_run(const RunRequest& request, const RunContext& context);

// Sets and unsets the plan's variables in this process (before exec).
Status apply_run_plan(const RunPlan& plan);

// A state directory is trusted when it is a directory (not a symlink) owned
// by `uid` or root and not writable by group or others. A missing one is
// fine when `missing_ok` (the library creates it 0700).
Status check_state_dir(const std::string& path, uid_t uid, bool missing_ok);

// The state directory status reads and run sets: GPU_LIMIT_STATE_DIR when
// given, else default_state_dir() for this uid.
Result<std::string> effective_state_dir(const std::optional<std::string>& given, uid_t uid,
                                        const char* xdg_runtime_dir);

struct ProcessUsage {
    int slot = 0;
    int32_t pid = 0; // in the process's own pid namespace
    // As the host daemon verified it (SO_PEERCRED) and only while that process
    // holds the slot (checked in /proc: a group can write its state file);
    // 0: not registered, or not shown.
    int32_t host_pid = 0;
    std::string comm;
    bool alive = false;
    std::vector<uint64_t> charged; // per device of the group, bytes
};

struct GroupReport {
    std::string name;
    std::string path; // <state dir>/<group>/state
    std::vector<DeviceUsage> devices;
    std::vector<ProcessUsage> processes;
    int reclaimed = 0; // dead processes whose memory this status returned
};

struct StatusReport {
    std::string state_dir;
    bool state_dir_exists = false;
    std::vector<GroupReport> groups; // by name
};

// Every group under `state_dir` (or only `group`). A group that cannot be
// read is a diagnostic, not the end of the report.
Result<StatusReport> read_status(const std::string& state_dir,
                                 const std::optional<std::string>& group, uid_t uid,
                                 Diagnostics& diagnostics);

} // namespace gpuinit::limit
