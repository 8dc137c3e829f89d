// Each tool's exit codes, as its man page documents them.
#pragma once

#include "gpuinit/base/diag.hpp"
#include "gpuinit/devnodes/mknod.hpp"
#include "gpuinit/mig/apply_run.hpp"
#include "gpuinit/mig/sync.hpp"

namespace gpuinit::tools {

// The one table of exit codes every tool follows; gpuinit(8) documents it
// and tests/unit/tools/test_exit_table.cpp holds the man pages to it. A code
// beyond 0-5 exists only where a caller needs to tell that case apart, and
// keeps one meaning in every tool.
enum Exit : int {
    kExitOk = 0,                 // everything as it should be, or done
    kExitUsage = 1,              // the command line is wrong
    kExitPartial = 2,            // some of it was done, some not
    kExitFailed = 3,             // nothing could be done (the message says why)
    kExitDiffers = 4,            // a check found differences
    kExitNotPermitted = 5,       // needs root or the admin group, or the kernel said EPERM
    kExitBusy = 6,               // held by someone else: no free instance, another instance's lock
    kExitCommandCannotRun = 126, // CMD found but not executable (as the shell)
    kExitCommandNotFound = 127,  // CMD not found (as the shell)
};

// gpu-mknod(8)
enum MknodExit : int {
    kMknodOk = kExitOk,
    kMknodUsage = kExitUsage,
    kMknodPartial = kExitPartial,           // some GPU or node could not be set up
    kMknodNothingDone = kExitFailed,        // driver not loaded, bad policy, unknown --device GPU
    kMknodCheckDiffers = kExitDiffers,      // --check: a node differs, or a group does not exist
    kMknodNotPermitted = kExitNotPermitted, // not root: every change refused
    kMknodBusy = kExitBusy,                 // another run held the lock past the wait
};

// gpu-modload(8)
enum ModloadExit : int {
    kModloadOk = kExitOk,
    kModloadUsage = kExitUsage,
    kModloadNotFound = kExitFailed,
    kModloadBadModule = kExitFailed, // unknown symbol, bad parameter, vermagic
    // An option the module does not take, or one that undoes the policy
    kModloadBadOption = kExitFailed,
    kModloadKeyRejected = kExitFailed,      // signature rejected
    kModloadPermission = kExitNotPermitted, // EPERM/EACCES
    kModloadBlacklisted = kExitFailed,
    kModloadCheckFailed = kExitDiffers, // --check: a setting undoes or widens the policy
    // Anything else, including --check unable to read what it judges
    kModloadOtherError = kExitFailed,
    kModloadDriverNotLoaded = kExitFailed, // --check
};

// gpu-persist(8)
enum PersistExit : int {
    kPersistOk = kExitOk,
    kPersistUsage = kExitUsage,
    kPersistPartial = kExitPartial,    // --daemon: running, but some GPU could not be held;
                                       // status: a GPU it should hold is not held
    kPersistCannotStart = kExitFailed, // another instance, coherent-memory machine, bad --user, ...
    kPersistNotRunning = kExitFailed,  // client: no daemon answers
    kPersistDenied = kExitNotPermitted, // changes need root or the admin group
    kPersistRefused = kExitFailed,      // client: the daemon refused the request (unknown GPU, ...)
};

// gpu-mig(8): the table's codes, by what they mean here.
enum MigExit : int {
    kMigOk = kExitOk,
    kMigUsage = kExitUsage,
    kMigPartial = kExitPartial, // sync: some node or lease could not be made; list: some
                                // instance unreadable; apply: some GPU not changed
    // No usable leases or /proc, unknown UUIDs or profiles, bad *_VISIBLE_DEVICES; env: a
    // device gres.conf does not name
    kMigCannotRun = kExitFailed,
    kMigDiffers = kExitDiffers,           // gres --check, apply --check: differs from the machine
    kMigNotPermitted = kExitNotPermitted, // release: replacing a lease needs root
    kMigNoneFree = kExitBusy,             // pick: none free, or your share held (after --wait)
    kMigCommandCannotRun = kExitCommandCannotRun, // pick --hold: CMD found but not executable
    kMigCommandNotFound = kExitCommandNotFound,   // pick --hold: CMD not found
};

// gpu-limit(8)
enum LimitExit : int {
    kLimitOk = kExitOk,
    kLimitUsage = kExitUsage,
    kLimitPartial = kExitPartial, // status: some group could not be read
    // A value the library would refuse, an untrusted state directory, no
    // library, an unreadable state directory or group (status --group); the
    // daemon without NVML
    kLimitCannotRun = kExitFailed,
    kLimitNotPermitted = kExitNotPermitted,         // daemon: needs root
    kLimitCommandCannotRun = kExitCommandCannotRun, // run: CMD found but not executable
    kLimitCommandNotFound = kExitCommandNotFound,   // run: CMD not found
};

// gpu-mig's codes for what gpu-mknod --mig did, for sync, and for apply
// (the sync after it included).
int mig_nodes_exit(MknodStatus status);
int mig_sync_exit(const mig::SyncOutcome& outcome);
int mig_apply_exit(const mig::ApplyReport& report, mig::ApplyRequest::Mode mode);

// The exit code for a failure of the modules layer (its ModuleFailure reason).
int modload_exit_for(const Diagnostic& failure);

} // namespace gpuinit::tools
