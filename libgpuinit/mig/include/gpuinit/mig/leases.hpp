// MIG leases: one lease file per compute instance in <root>/run/gpu-mig,
// named by the instance ("gpu1-gi7-ci0"). `gpu-mig sync` (root) makes them:
// a root-owned 0755 directory of root-owned 0444 empty regular files, so any
// user can open one read-only and nobody but root can add, swap or remove
// one. A job takes a lease with flock(LOCK_EX | LOCK_NB) on a read-only fd;
// it holds while that open file lives (in any process the fd was passed
// to), and ends when the last fd on it closes, also when its holder is
// killed.
//
// Its own directory, not run/gpuinit: that one is root-only on purpose
// (RunDir's locks are 0600 so users cannot hold them); these are meant to
// be held by job users.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/mig/instances.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace gpuinit {

inline constexpr std::string_view kMigLeaseDir = "run/gpu-mig";

// Why a lease could not be taken (Diagnostic::reason).
enum class LeaseFailure : int {
    None = 0,
    Held = 1,      // another open file holds it (code EWOULDBLOCK)
    Missing = 2,   // no lease file: the instance is newer than the last sync
    Untrusted = 3, // the directory or the file is not what sync makes
};

// "gpu1-gi7-ci0": the lease file of the instance.
std::string lease_name(const MigInstance& instance);

// What sync did, by lease name.
struct LeaseSync {
    std::vector<std::string> created;
    std::vector<std::string> repaired; // replaced (planted, wrong type or owner) or chmod'ed
    std::vector<std::string> removed;  // of instances that no longer exist
    size_t kept = 0;
};

// Makes <root>/run/gpu-mig (0755) and a lease file for every instance, and
// removes the lease files of instances that no longer exist (only with
// `remove_stale`: not when the instance list may be incomplete). A good lease
// file is never replaced (a holder's fd on the old inode would lock nothing
// on the new one); a wrong one is: anything but a regular file with one
// link owned by this user, or one others could write. Runs as root on the
// machine (as any user under another root, for tests). Fails when the
// directory cannot be made or trusted; a lease that cannot be made is an
// error in `diagnostics`.
Result<LeaseSync> sync_leases(const Sysroot& root, const std::vector<MigInstance>& instances,
                              bool remove_stale, Diagnostics& diagnostics);

class LeaseDir {
  public:
    // Opens <root>/run/gpu-mig without following symlinks anywhere on the
    // way. It must be a directory owned by root (or by this user: a test or
    // a copy of a machine) that group and others cannot write; otherwise a
    // user could have planted the files in it. ENOENT: sync has not run.
    static Result<LeaseDir> open(const Sysroot& root);

    // Opens the instance's lease file O_RDONLY | O_NOFOLLOW | O_CLOEXEC,
    // checks it is what sync makes (regular, one link, the directory's
    // owner, no write bits) and flocks it without waiting. The lease lasts
    // while the returned fd (or a dup, or a copy across fork and exec) is
    // open. Fails with reason Held (EWOULDBLOCK), Missing or Untrusted.
    Result<UniqueFd> take(const MigInstance& instance) const;
    // Whether someone holds the lease: takes it for an instant and lets go.
    Result<bool> held(const MigInstance& instance) const;

    std::string display(const MigInstance& instance) const;
    std::string path_of(std::string_view name) const { return dir_.path_of(name); }

    // Another file sync writes here (the names file): its text, checked
    // like a lease file (regular, one link, the directory's owner, no
    // write bits for group or others), at most `limit` bytes; nullopt
    // when it does not exist.
    Result<std::optional<std::string>> read_file(std::string_view name, size_t limit) const;

  private:
    LeaseDir(SafeDir dir, uid_t owner) : dir_(std::move(dir)), owner_(owner) {}

    SafeDir dir_;
    uid_t owner_ = 0;
};

} // namespace gpuinit
