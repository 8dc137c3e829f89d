// Planning module loads on libkmod: resolve names and aliases in the root's
// lib/modules/<release>, merge options from modprobe.d, the root's kernel
// command line and this command line, order dependencies. Pure: the loader
// is asked only what is loaded already.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/modules/loader.hpp"

#include <string>
#include <vector>

namespace gpuinit {

// What gpu-modload loads when no module is named.
inline constexpr const char* kDefaultModules[] = {"nvidia", "nvidia_uvm"};
inline constexpr const char* kModesetModules[] = {"nvidia_modeset", "nvidia_drm"};

struct ModuleRequest {
    std::string name;                 // a module name or an alias
    std::vector<std::string> options; // "NVreg_DeviceFileMode=0660", ...
};

struct ModloadOptions {
    std::string release; // empty: the running kernel's (only on the host root)
    std::vector<ModuleRequest> modules;
    bool force = false;       // ignore the blacklist and the options' problems
    bool run_install = false; // honour "install" lines
};

struct ModuleStep {
    enum class Kind { Insert, AlreadyLoaded, Builtin, RunInstall };
    Kind kind = Kind::Insert;
    std::string name;
    std::string path;
    std::string options;
    std::string command; // with RunInstall
};

struct ModulePlan {
    std::string modules_dir; // <root>/lib/modules/<release>, for messages
    std::vector<ModuleStep> steps;
    // Options of the modules to insert that the module does not declare, whose
    // value its parameter's type refuses, or that undo the access policy
    // (module_params.hpp): errors with reason ModuleFailure::BadOption, at the
    // option's origin. Nothing may load while there are any. With `force`
    // they are warnings in the diagnostics instead, and this stays empty.
    std::vector<Diagnostic> option_errors;
};

// A failure carries its ModuleFailure (failures.hpp) as reason; what libkmod
// says while reading the configuration goes to `diagnostics` as warnings,
// and so does a module whose parameter list cannot be read (its options are
// then not checked).
Result<ModulePlan> plan_modules(const Sysroot& root, const ModloadOptions& options,
                                ModuleLoader& loader, Diagnostics& diagnostics);

// What the next load of `module` would get from the root's configuration
// (modprobe.d and the root's kernel command line), checked against the
// module file, loaded or not: the errors of ModulePlan::option_errors, with
// reason ModuleFailure::CheckDanger for a setting that undoes the policy.
// Fails (NotFound, Other) when the module or its index is not there.
Result<std::vector<Diagnostic>> check_configured_options(const Sysroot& root,
                                                         const std::string& release,
                                                         const std::string& module,
                                                         Diagnostics& diagnostics);

} // namespace gpuinit
