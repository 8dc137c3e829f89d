#include "gpuinit/modules/executor.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/modules/failures.hpp"

#include <cerrno>

namespace gpuinit {

ModloadReport execute_plan(const ModulePlan& plan, ModuleLoader& loader) {
    ModloadReport report;
    for (const ModuleStep& step : plan.steps) {
        ModuleStep done = step;
        if (step.kind == ModuleStep::Kind::Insert) {
            int result = loader.insert(step.name, step.path, step.options);
            if (result == -EEXIST) {
                done.kind = ModuleStep::Kind::AlreadyLoaded; // loaded meanwhile
            } else if (result != 0) {
                report.failure = insert_failure(step.name, step.path, -result);
                return report;
            }
        } else if (step.kind == ModuleStep::Kind::RunInstall) {
            int status = loader.run_install(step.name, step.command);
            if (status != 0) {
                report.failure =
                    module_failure(ModuleFailure::Other,
                                   format("install command for %s exited %d: %s", step.name.c_str(),
                                          status, printable(step.command).c_str()));
                return report;
            }
        }
        report.done.push_back(std::move(done));
    }
    return report;
}

} // namespace gpuinit
