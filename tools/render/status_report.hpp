// gpuinit status: the table, the JSON document and the Prometheus textfile.
#pragma once

#include "common/report.hpp"
#include "gpuinit/status/report.hpp"

#include <string>

namespace gpuinit::tools {

// One line per probe (its verdict and reason); the rows with a problem
// under it, every row with verbosity >= 1. The first problem's reason is
// one line on stderr, "gpuinit status: PROBE: REASON".
Rendered render_status_text(const status::Report& report, int exit_code, int verbosity);
std::string render_status_json(const status::Report& report, int exit_code);
// node_exporter's textfile collector format (the Prometheus text
// exposition format 0.0.4, as prometheus/docs
// content/docs/instrumenting/exposition_formats.md gives it): a HELP and a
// TYPE line per family before its samples, which follow each other; label
// values with \\, \" and \n escaped; one sample a line, the last one ending
// in a newline.
std::string render_status_prometheus(const status::Report& report, int exit_code);

} // namespace gpuinit::tools
