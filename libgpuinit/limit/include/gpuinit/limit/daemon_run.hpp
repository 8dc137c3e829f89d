// `gpu-limit daemon` as a process: NVML through the nvml layer, the
// registration socket, the compute steps every control period and a full
// pass every interval, signals, the pid file, the service manager, and what
// the daemon does to the machine (kills through a pidfd, the OOM script
// through base's run_program). DaemonCore (daemon.hpp) decides; this runs
// it. The tool parses options, calls these and renders.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/limit/daemon.hpp"
#include "gpuinit/limit/daemon_protocol.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace gpuinit::limit {

struct LimitDaemonOptions {
    std::string root = "/"; // /proc is read below it
    std::string state_dir = kDaemonStateDir;
    std::string socket; // empty: <state_dir>/daemon.sock
    uint64_t interval_ms = 100;
    uint64_t oom_grace_s = 5;
    std::string oom_script; // absolute; empty: none
    bool daemonize = false; // SysV: fork, syslog; the caller returns once it listens
    int verbosity = 0;      // -1 errors only, 0 normal, 1 more
};

enum class LimitDaemonOutcome {
    Stopped,     // ran and stopped on SIGTERM or SIGINT (or the SysV parent: it listens)
    StartFailed, // could not start: logged
    NoNvml,      // this build cannot load NVML (the static one)
};

// Whether this build can load NVML (the dynamic one).
bool limit_daemon_supported();

// Runs until SIGTERM or SIGINT, on the service layer: its log, systemd's
// notification (READY=1 once it listens, STOPPING=1), detaching with a
// readiness pipe, the pid lock on <state_dir>/daemon.pid, its event loop.
LimitDaemonOutcome run_limit_daemon(const LimitDaemonOptions& options);

// --once: one sampling pass, no socket. `warning` says why NVML could not
// be used ("" when it could).
struct LimitDaemonPass {
    PassReport report;
    std::string warning;
};
Result<LimitDaemonPass> run_limit_daemon_once(const LimitDaemonOptions& options);

} // namespace gpuinit::limit
