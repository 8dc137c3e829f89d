// Module loading on libkmod: resolve names and aliases in the root's
// lib/modules/<release>, merge options, order dependencies, and insert through
// a small loader interface so the whole path runs in tests without a kernel.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <string>
#include <vector>

namespace gpuinit {

// Documented in gpu-modload(8).
enum ModloadExit : int {
    kModloadOk = 0,
    kModloadUsage = 1,
    kModloadNotFound = 2,
    kModloadBadModule = 3,   // ENOENT/ENOEXEC/EINVAL: unknown symbol, vermagic, format
    kModloadKeyRejected = 4, // EKEYREJECTED
    kModloadPermission = 5,  // EPERM/EACCES
    kModloadBlacklisted = 6,
    kModloadCheckFailed = 7,
    kModloadOtherError = 8,
    kModloadDriverNotLoaded = 9,
};

// What the kernel side looks like to the planner and the executor.
class ModuleLoader {
  public:
    virtual ~ModuleLoader() = default;
    virtual bool is_loaded(const std::string& name) = 0;
    // 0, or a negative errno.
    virtual int insert(const std::string& name, const std::string& path,
                       const std::string& options) = 0;
    // Exit status of the install command run through /bin/sh.
    virtual int run_install(const std::string& name, const std::string& command) = 0;
};

// The real kernel: /sys/module under the root, finit_module through libkmod.
class KernelLoader : public ModuleLoader {
  public:
    explicit KernelLoader(const Sysroot& root) : root_(root) {}
    bool is_loaded(const std::string& name) override;
    int insert(const std::string& name, const std::string& path,
               const std::string& options) override;
    int run_install(const std::string& name, const std::string& command) override;

  private:
    const Sysroot& root_;
};

struct ModuleRequest {
    std::string name;                 // a module name or an alias
    std::vector<std::string> options; // "NVreg_DeviceFileMode=0660", ...
};

struct ModloadOptions {
    std::string release; // empty: the running kernel's
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

struct ModloadFailure {
    int exit_code = kModloadOk;
    std::string message;
};

// Pure planning over the module tree and the configuration; the loader is
// asked only what is loaded already.
Result<ModulePlan> plan_modules(const Sysroot& root, const ModloadOptions& options,
                                ModuleLoader& loader, ModloadFailure* failure);

struct ModloadReport {
    std::vector<ModuleStep> done;
    ModloadFailure failure;
};

// Carries out the plan in order; stops at the first failure.
ModloadReport execute_plan(const ModulePlan& plan, ModuleLoader& loader);

// Merges option strings: a later "key=value" replaces an earlier one with the
// same key, in place; new keys are appended.
std::string merge_module_options(const std::vector<std::string>& layers);

} // namespace gpuinit
