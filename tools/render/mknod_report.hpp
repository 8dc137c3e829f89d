// gpu-mknod's report: the plan and what was done, for people and for scripts.
#pragma once

#include "common/report.hpp"
#include "gpuinit/devnodes/explain.hpp"
#include "gpuinit/devnodes/mknod.hpp"

#include <string>

namespace gpuinit::tools {

// "/" or the root directory, as the report names it, and the tool the
// user ran (gpu-mig sync makes the cap nodes through the same layer).
struct MknodReportContext {
    std::string root_display = "/";
    int exit_code = 0;
    const char* program = "gpu-mknod";
};

// verbosity: -1 quiet (errors only), 0 changes and problems, 1 also
// unchanged entries and the GPU table.
Rendered render_mknod_text(const MknodOutcome& outcome, const MknodReportContext& context,
                           int verbosity);
std::string render_mknod_json(const MknodOutcome& outcome, const MknodReportContext& context);
// The same object, as a value inside a larger document (gpu-mig sync's).
void write_mknod_json(JsonWriter& json, const MknodOutcome& outcome,
                      const MknodReportContext& context);

// --explain: one line per node (who can open it, and the policy line that
// says so), an indented "now:" line where /dev differs from that.
Rendered render_explain_text(const MknodOutcome& outcome, const std::vector<NodeExplanation>& nodes,
                             const MknodReportContext& context, int verbosity);
std::string render_explain_json(const MknodOutcome& outcome,
                                const std::vector<NodeExplanation>& nodes,
                                const MknodReportContext& context);

} // namespace gpuinit::tools
