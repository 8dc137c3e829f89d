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

} // namespace gpuinit
