// The commands of gpuinit, kmod-style: each tool is a Command, run as its
// own program (gpu-mknod), as a link to the multi-call binary (argv[0] is
// gpu-mknod) or as `gpuinit mknod`.
#pragma once

#include <span>
#include <string_view>

namespace gpuinit::tools {

struct Command {
    const char* name;    // "mknod", as in `gpuinit mknod`
    const char* program; // "gpu-mknod": the installed name
    int (*run)(int argc, char** argv);
    const char* summary; // one line, for `gpuinit --help`
    int cannot_run_exit; // the tool's exit code for "refused to start"
    // Whether this command line uses NVML. The static build cannot load it;
    // run_command then execs the dynamic build installed beside it
    // (gpuinit-nvml) when there is one. nullptr: never.
    bool (*uses_nvml)(int argc, char** argv);
};

extern const Command kMknodCommand;
extern const Command kModloadCommand;
extern const Command kPersistCommand;
extern const Command kMigCommand;
extern const Command kLimitCommand;
// gpu-limit-runtime: `gpu-limit runtime` by its own name, for containerd's
// BinaryName and a Kubernetes RuntimeClass, which run a runtime with runc's
// arguments and no words of ours.
extern const Command kLimitRuntimeCommand;
// gpuinit status: the machine as a whole; run as `gpuinit status` only.
extern const Command kStatusCommand;

// Every command, in the order `gpuinit --help` lists them.
std::span<const Command* const> all_commands();

// By `name` ("mknod") or `program` ("gpu-mknod"); nullptr when none.
const Command* find_command(std::string_view name);
// By the installed name only, as argv[0] gives it.
const Command* find_program(std::string_view program);

// Runs `command` after the checks every tool makes before it starts (it
// refuses to run setuid or setgid). In the static build, a command line
// that uses NVML is handed to the NVML helper (GPUINIT_NVML_HELPER, or the
// environment's GPUINIT_NVML_HELPER; "none" turns it off) when it exists
// and only root can change it; without one the command runs here, without
// NVML.
int run_command(const Command& command, int argc, char** argv);

} // namespace gpuinit::tools
