// The probing half of `gpuinit status`: each probe calls its layer's own
// check and hands the result to the pure assembly (report.hpp). A probe
// that may block (NVML and nvidia-smi hang on a wedged GPU; a daemon may not
// answer its socket) runs in a child process of its own with a deadline:
// past it the child's process group is killed and the probe reported as
// timed out, so one wedged GPU never stops the report or the textfile.
#pragma once

#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/status/report.hpp"

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace gpuinit::status {

inline constexpr std::chrono::milliseconds kDefaultProbeTimeout{10000};
// What a child may hand back; more is refused (a section is a few KiB).
inline constexpr size_t kMaxSectionBytes = size_t{4} << 20;

struct StatusOptions {
    std::chrono::milliseconds probe_timeout = kDefaultProbeTimeout;
};

// Every probe in order (driver, nodes, persist, mig, limit), each in its
// own child with options.probe_timeout.
Report run_status(const Sysroot& root, const StatusOptions& options);

// Runs `probe` in a forked child (a process group of its own) and returns
// the section it wrote to the pipe; a child that does not finish within
// `timeout` is killed with its group, and one that dies or writes nonsense
// gives a failed section. `seconds` is measured here.
Section run_with_deadline(std::string_view name, const std::function<Section()>& probe,
                          std::chrono::milliseconds timeout);

// Each probe, in this process (run_status runs them through
// run_with_deadline).
Section probe_driver(const Sysroot& root);
Section probe_nodes(const Sysroot& root);
Section probe_persist(const Sysroot& root, std::chrono::milliseconds timeout);
Section probe_mig(const Sysroot& root);
Section probe_limit(const Sysroot& root);

// How "configured" is judged for a daemon that is not running: its systemd
// unit is enabled (a link in etc/systemd/system/multi-user.target.wants),
// its SysV script has a start link (etc/rc2.d/S??NAME), or it ran since
// boot (its run directory, on tmpfs, is there). Returns what says so, or ""
// for none of them.
std::string daemon_configured_by(const Sysroot& root, std::string_view unit,
                                 std::string_view sysv_name, std::string_view run_dir);

// Writes `text` to `file` (absolute, or relative to the working directory;
// taken as given, not under a --root) as the textfile collector needs it:
// a temporary name in the same directory, fsync, rename over `file`, so
// node_exporter reads the old file or the new one, never half of one. No
// component of the directory's path may be a symlink. Mode 0644.
Status write_textfile(const std::string& file, std::string_view text);

} // namespace gpuinit::status
