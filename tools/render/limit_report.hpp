// gpu-limit's output: the environment `run --dry-run` would give the job,
// and the groups `status` finds, for people and for scripts.
#pragma once

#include "common/report.hpp"
#include "gpuinit/limit/launch.hpp"

#include <string>
#include <vector>

namespace gpuinit::tools {

// Shell lines: export NAME=VALUE, unset NAME, exec CMD ARG... (quoted so
// that `eval "$(gpu-limit run --dry-run -- cmd)"` means the same).
Rendered render_run_plan_text(const limit::RunPlan& plan, const std::vector<std::string>& command,
                              const Diagnostics& diagnostics, int verbosity);
std::string render_run_plan_json(const limit::RunPlan& plan,
                                 const std::vector<std::string>& command,
                                 const Diagnostics& diagnostics, int exit_code);

Rendered render_status_text(const limit::StatusReport& report, const Diagnostics& diagnostics,
                            int verbosity);
std::string render_status_json(const limit::StatusReport& report, const Diagnostics& diagnostics,
                               int exit_code);

// "1.50 GiB" (binary units, two decimals), "512 B" below 1 KiB.
std::string human_bytes(uint64_t bytes);
// A word for a shell: as is when it is safe, else in single quotes.
std::string shell_word(const std::string& word);

} // namespace gpuinit::tools
