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
// exposition format 0.0.4): a HELP and a TYPE line per family, label values
// escaped, one sample a line.
std::string render_status_prometheus(const status::Report& report, int exit_code);

} // namespace gpuinit::tools
