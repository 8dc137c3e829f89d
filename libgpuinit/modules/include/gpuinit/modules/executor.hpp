// Carrying out a module plan through a ModuleLoader.
#pragma once

#include "gpuinit/base/diag.hpp"
#include "gpuinit/modules/loader.hpp"
#include "gpuinit/modules/planner.hpp"

#include <optional>
#include <vector>

namespace gpuinit {

struct ModloadReport {
    std::vector<ModuleStep> done;      // what was carried out, in order
    std::optional<Diagnostic> failure; // the step that failed; nothing after it ran
};

ModloadReport execute_plan(const ModulePlan& plan, ModuleLoader& loader);

} // namespace gpuinit
