#include "exit_codes.hpp"

#include "gpuinit/modules/failures.hpp"

#include <algorithm>

namespace gpuinit::tools {

int mig_nodes_exit(MknodStatus status) {
    return status == MknodStatus::Done      ? kMigOk
           : status == MknodStatus::Partial ? kMigPartial
                                            : kMigCannotRun;
}

int mig_sync_exit(const mig::SyncOutcome& outcome) {
    using Status = mig::SyncOutcome::Status;
    int code = outcome.status == Status::Done      ? kMigOk
               : outcome.status == Status::Partial ? kMigPartial
                                                   : kMigCannotRun;
    return std::max(code, mig_nodes_exit(outcome.nodes.status));
}

int mig_apply_exit(const mig::ApplyReport& report, mig::ApplyRequest::Mode mode) {
    using Status = mig::ApplyReport::Status;
    int code = kMigOk;
    if (report.status == Status::Differs) {
        code = mode == mig::ApplyRequest::Mode::Check ? kMigDiffers : kMigOk;
    } else if (report.status == Status::Partial) {
        code = kMigPartial;
    }
    return report.sync ? std::max(code, mig_sync_exit(*report.sync)) : code;
}

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
    case ModuleFailure::BadOption:
        return kModloadBadOption;
    }
    return kModloadOtherError;
}

} // namespace gpuinit::tools
