// Why loading modules failed, as Diagnostic::reason: the tool maps these to
// its exit codes (gpu-modload(8)).
#pragma once

#include "gpuinit/base/diag.hpp"

#include <string>

namespace gpuinit {

enum class ModuleFailure : int {
    None = 0,
    Usage,       // which release, which root: the command line must say
    NotFound,    // no such module, no index, no file
    BadModule,   // unknown symbol, bad parameter, vermagic, format
    KeyRejected, // signature rejected (Secure Boot)
    Permission,  // EPERM, EACCES: not root, module loading disabled
    Blacklisted, // modprobe.d or the kernel command line blacklists it
    Other,       // anything else, including unreadable configuration
    CheckDanger, // --check: a driver setting undoes or widens the policy
    BadOption,   // an option the module does not declare, a bad value, ModifyDeviceFiles
};

// A Diagnostic with `reason` set.
Diagnostic module_failure(ModuleFailure reason, std::string message, int code = 0);

// What the kernel's errno from inserting `module` (`path`) means, with the fix.
Diagnostic insert_failure(const std::string& module, const std::string& path, int error);

} // namespace gpuinit
