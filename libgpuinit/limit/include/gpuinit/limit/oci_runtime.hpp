// gpu-limit runtime, the shim's side of the real runtime (tool side, not
// freestanding): which runtime runs, where it logs, running it. The config
// edit before `create` is oci_edit.hpp's.
#pragma once

#include "gpuinit/base/diag.hpp"
#include "gpuinit/base/result.hpp"

#include <optional>
#include <string>
#include <vector>

namespace gpuinit::limit::oci {

// The real runtime: `given` (--runtime-path), else `from_environment`
// ($GPU_LIMIT_RUNTIME: the environment of containerd or podman, both
// root's), else the first of nvidia-container-runtime, runc, crun in
// /usr/local/sbin, /usr/local/bin, /usr/sbin, /usr/bin, /sbin, /bin: $PATH is
// whatever the daemon was started with, and a runtime runs every container
// as root. Never this program itself.
Result<std::string> find_runtime(const std::optional<std::string>& given,
                                 const std::optional<std::string>& from_environment);

// Where the runtime logs, in which format (its --log and --log-format
// before the command).
struct RuntimeLog {
    std::string path;
    bool json = false;
};
RuntimeLog runtime_log(const std::vector<std::string>& forward, const std::string& command);

// Writes `message` to the runtime's log as runc would (containerd reports
// the log's last error to docker, which shows it to the user: "OCI runtime
// create failed: ..."): a JSON line {"level":"error","msg":...,"time":...}
// or the plain line. Best effort: a log that cannot be written is skipped.
void log_runtime_failure(const RuntimeLog& log, const std::string& message);

// Replaces this process with the runtime and its arguments; returns only
// when that fails.
Diagnostic exec_runtime(const std::string& runtime, const std::vector<std::string>& forward);

// Runs the runtime as a child and waits: its exit status (128 + N when
// killed by signal N).
Result<int> run_runtime(const std::string& runtime, const std::vector<std::string>& forward);

} // namespace gpuinit::limit::oci
