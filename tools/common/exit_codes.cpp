#include "exit_codes.hpp"

#include "gpuinit/modules/failures.hpp"

namespace gpuinit::tools {

int modload_exit_for(const Diagnostic& failure) {
    switch (static_cast<ModuleFailure>(failure.reason)) {
    case ModuleFailure::None:
        return kModloadOtherError;
    case ModuleFailure::Usage:
        return kModloadUsage;
    case ModuleFailure::NotFound:
        return kModloadNotFound;
    case ModuleFailure::BadModule:
        return kModloadBadModule;
    case ModuleFailure::KeyRejected:
        return kModloadKeyRejected;
    case ModuleFailure::Permission:
        return kModloadPermission;
    case ModuleFailure::Blacklisted:
        return kModloadBlacklisted;
    case ModuleFailure::Other:
        return kModloadOtherError;
    case ModuleFailure::CheckDanger:
        return kModloadCheckFailed;
    }
    return kModloadOtherError;
}

} // namespace gpuinit::tools
