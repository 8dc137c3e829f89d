#include "gpuinit/modules/failures.hpp"

#include <cerrno>
#include <cstring>

namespace gpuinit {

Diagnostic module_failure(ModuleFailure reason, std::string message, int code) {
    Diagnostic diagnostic = error(std::move(message), code);
    diagnostic.reason = static_cast<int>(reason);
    return diagnostic;
}

Diagnostic insert_failure(const std::string& module, const std::string& path, int error) {
    std::string what = "cannot insert " + module + " (" + path + "): ";
    Diagnostic failure;
    switch (error) {
    case ENOENT:
        // The file was opened: the kernel says ENOENT for an unresolved symbol.
        failure = module_failure(
            ModuleFailure::BadModule,
            what + "unknown symbol in module: a module it needs is not loaded, or it was built"
                   " for another driver version; see 'dmesg | tail' for which",
            error);
        break;
    case ENOEXEC:
    case EINVAL:
        failure = module_failure(ModuleFailure::BadModule,
                                 what + std::strerror(error) +
                                     ": unknown symbol, bad parameter or vermagic mismatch;"
                                     " see 'dmesg | tail' for which",
                                 error);
        break;
    case ENOSYS:
        failure = module_failure(
            ModuleFailure::Other,
            what + "this kernel cannot load modules (built without CONFIG_MODULES, or a"
                   " container's seccomp filter); load it on the host",
            error);
        break;
    case EKEYREJECTED:
        failure = module_failure(
            ModuleFailure::KeyRejected,
            what + "signature rejected by the kernel (Secure Boot): sign the module with a key"
                   " enrolled with mokutil, or use the distribution's signed driver",
            error);
        break;
    case EPERM:
    case EACCES:
        failure = module_failure(ModuleFailure::Permission,
                                 what + std::strerror(error) +
                                     ": run as root; module loading may be disabled"
                                     " (kernel.modules_disabled, lockdown)",
                                 error);
        break;
    default:
        failure = module_failure(ModuleFailure::Other, what + std::strerror(error), error);
    }
    failure.where.device = module;
    return failure;
}

} // namespace gpuinit
