// gpu-modload's reports: the module steps, and --check's findings.
#pragma once

#include "common/report.hpp"
#include "gpuinit/modules/driver_check.hpp"
#include "gpuinit/modules/planner.hpp"

#include <string>
#include <vector>

namespace gpuinit::tools {

struct StepsReport {
    std::vector<ModuleStep> steps; // planned (dry run) or done
    bool dry_run = false;
    std::string modules_dir; // shown with -v
    int exit_code = 0;
    Diagnostics diagnostics; // libkmod's warnings, and the failure last
};

Rendered render_steps_text(const StepsReport& report, int verbosity);
std::string render_steps_json(const StepsReport& report);

struct CheckReport {
    std::optional<DriverCheck> check; // absent when it could not be made
    std::string params_path;          // shown when the driver is not loaded
    int exit_code = 0;
    Diagnostics diagnostics; // the findings (CheckDanger), or why it failed
};

Rendered render_check_text(const CheckReport& report, int verbosity);
std::string render_check_json(const CheckReport& report);

} // namespace gpuinit::tools
