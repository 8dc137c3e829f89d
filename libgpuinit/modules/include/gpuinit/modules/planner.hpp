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
    bool force = false;       // ignore the blacklist
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
};

// A failure carries its ModuleFailure (failures.hpp) as reason; what libkmod
// says while reading the configuration goes to `diagnostics` as warnings.
Result<ModulePlan> plan_modules(const Sysroot& root, const ModloadOptions& options,
                                ModuleLoader& loader, Diagnostics& diagnostics);

} // namespace gpuinit
