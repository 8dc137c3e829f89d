#include "command.hpp"

#include "gpuinit/base/process.hpp"
#include "gpuinit/base/text.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern char** environ;

namespace gpuinit::tools {

namespace {

#if !GPUINIT_DLOPEN_NVML
// Returns only when the helper did not run: there is none (nothing said),
// it is turned off, or it is not root's alone or failed to start (a warning;
// the command then runs here without NVML, as without a helper).
void exec_nvml_helper(const Command& command, char** argv) {
    const char* helper = std::getenv("GPUINIT_NVML_HELPER");
    if (helper == nullptr || *helper == '\0') {
        helper = GPUINIT_NVML_HELPER;
    }
    if (std::strcmp(helper, "none") == 0) {
        return;
    }
    // The helper is told to use none itself: a helper that is a static
    // build (or names this one again) would otherwise exec in a loop and
    // never run the command.
    std::vector<char*> environment;
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
        if (std::strncmp(*entry, "GPUINIT_NVML_HELPER=", 20) != 0) {
            environment.push_back(*entry);
        }
    }
    environment.push_back(const_cast<char*>("GPUINIT_NVML_HELPER=none"));
    environment.push_back(nullptr);
    auto ran = exec_trusted_program(helper, argv, environment.data());
    if (ran.error().code == ENOENT) {
        return;
    }
    std::string line = std::string(command.program) +
                       ": warning: NVML helper not used, going on without NVML: " +
                       printable(ran.error().message) + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
}
#endif

} // namespace

int run_command(const Command& command, int argc, char** argv) {
    if (auto refused = refuse_elevated_start(command.program); !refused) {
        std::string line =
            std::string(command.program) + ": error: " + printable(refused.error().message) + "\n";
        std::fwrite(line.data(), 1, line.size(), stderr);
        return command.cannot_run_exit;
    }
    argv[0] = const_cast<char*>(command.program);
    // The SysV scripts and ps know a tool by this name, also when it was
    // started as `gpuinit COMMAND` or is the NVML helper.
    name_process(command.program);
#if !GPUINIT_DLOPEN_NVML
    if (command.uses_nvml != nullptr && command.uses_nvml(argc, argv)) {
        exec_nvml_helper(command, argv);
    }
#endif
    return command.run(argc, argv);
}

} // namespace gpuinit::tools
