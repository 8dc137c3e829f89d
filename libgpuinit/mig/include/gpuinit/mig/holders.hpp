// Who uses a MIG compute instance: a process that uses one has an fd on its
// CI cap device (the driver installs it), so <root>/proc/*/fd is scanned for
// char devices with the nvidia-caps major and the CI's minor (st_rdev by
// following each fd's magic link, never the link's name).
//
// What the caller sees is what /proc lets it see: another user's
// /proc/PID/fd needs ptrace access (root, or CAP_SYS_PTRACE), and hidepid
// and PID namespaces hide more. A job user sees only its own processes;
// such processes are counted, not guessed. The leases are the guarantee;
// this scan only catches users of an instance that took no lease.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace gpuinit {

struct CapHolders {
    // minor -> the PIDs holding an fd on it, sorted
    std::map<unsigned, std::vector<pid_t>> by_minor;
    // Processes whose fds could not be listed (another user's, without
    // ptrace access): they may hold any of the minors.
    size_t uninspected = 0;

    bool busy(unsigned minor) const;
};

// Scans every process of <root>/proc for fds on (caps_major, m) for each m
// in `minors`. Processes that exit during the scan are skipped. Fails only
// when <root>/proc cannot be listed (fail closed: the caller cannot tell).
Result<CapHolders> find_cap_holders(const Sysroot& root, unsigned caps_major,
                                    const std::vector<unsigned>& minors);

// A process holding a lease: an fd on the lease whose open file holds its
// OFD lock (/proc/PID/fdinfo/N shows the lock of that open file only).
struct LeaseHolder {
    pid_t pid = 0;
    uid_t uid = 0;    // real uid (/proc/PID/status)
    std::string user; // from <root>/etc/passwd; "" unknown
    // The Slurm or LSF job: from the process's cgroup (set by slurmd, not
    // by the job), else, for root only, SLURM_JOB_ID or LSB_JOBID in its
    // environment (the job's own word).
    std::string job;
    std::string job_source; // "cgroup", "environ" or ""
};

struct LeaseFile {
    dev_t dev = 0;
    ino_t ino = 0;
};

// For each lease (by index in `leases`), the processes whose fds hold its
// lock, sorted by PID; with `only_uid`, only processes of that real uid are
// looked at. Jobs are looked up with `with_jobs`. Fails only when
// <root>/proc cannot be listed.
Result<std::vector<std::vector<LeaseHolder>>>
find_lease_holders(const Sysroot& root, const std::vector<LeaseFile>& leases,
                   std::optional<uid_t> only_uid, bool with_jobs);

// The Slurm job of a process from its /proc/PID/cgroup text: the job_<id>
// component that Slurm's cgroup plugins make (src/plugins/cgroup/v1/
// xcgroup.c and v2/cgroup_v2.c of SchedMD/slurm, "/job_%u"); "" without
// one. LSF's cgroup layout is not published as source: LSF jobs are known
// by LSB_JOBID only.
std::string job_from_cgroup(std::string_view cgroup);
// SLURM_JOB_ID, else LSB_JOBID, from /proc/PID/environ text (NUL-separated).
std::string job_from_environ(std::string_view environ);

} // namespace gpuinit
