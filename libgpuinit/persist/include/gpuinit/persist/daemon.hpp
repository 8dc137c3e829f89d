// gpu-persist, the daemon: holds one fd on /dev/nvidiaN for every GPU the
// driver has bound (so the driver keeps it initialized between jobs), takes
// GPUs bound later, releases them on request, on a lost GPU and on stop, and
// answers its control socket and nvidia-smi's persistence RPC. One thread
// and an epoll loop; short-lived threads only wait for GPU inits and run
// parallel closes. Nothing wakes it when nothing happens.
#pragma once

#include <optional>
#include <string>
#include <sys/types.h>

namespace gpuinit {

struct PersistOptions {
    std::string root = "/";
    std::string user;        // empty: stay root
    std::string group;       // with user: its primary gid; empty: the user's
    std::string admin_group; // may change through the control socket besides root
    bool daemonize = false;  // SysV: fork, pidfile, the parent exits once the GPUs are held
    bool use_syslog = false;
    bool nvidia_smi_compat = true;
    bool hotplug = true;
    int verbosity = 0;
};

enum class DaemonOutcome {
    Stopped,     // ran and stopped on a signal
    StartFailed, // could not start: reported
    Partial,     // --daemon: started, but some GPU could not be held
};

// Runs until SIGTERM or SIGINT. With `daemonize`, the caller's process
// returns once the daemon holds its GPUs (or failed to), with the outcome.
DaemonOutcome run_persist_daemon(const PersistOptions& options);

} // namespace gpuinit
