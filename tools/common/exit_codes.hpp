// Each tool's exit codes, as its man page documents them.
#pragma once

#include "gpuinit/base/diag.hpp"

namespace gpuinit::tools {

// gpu-mknod(8)
enum MknodExit : int {
    kMknodOk = 0,
    kMknodUsage = 1,
    kMknodPartial = 2,     // some GPU or node could not be set up
    kMknodNothingDone = 3, // driver not loaded, broken /proc, bad policy, lock not taken
};

// gpu-modload(8)
enum ModloadExit : int {
    kModloadOk = 0,
    kModloadUsage = 1,
    kModloadNotFound = 2,
    kModloadBadModule = 3,   // unknown symbol, bad parameter, vermagic
    kModloadKeyRejected = 4, // signature rejected
    kModloadPermission = 5,  // EPERM/EACCES
    kModloadBlacklisted = 6,
    kModloadCheckFailed = 7, // --check: a setting undoes or widens the policy
    kModloadOtherError = 8,  // anything else, including --check unable to read what it judges
    kModloadDriverNotLoaded = 9,
};

// The exit code for a failure of the modules layer (its ModuleFailure reason).
int modload_exit_for(const Diagnostic& failure);

} // namespace gpuinit::tools
