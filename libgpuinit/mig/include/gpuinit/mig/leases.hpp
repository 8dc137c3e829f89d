// MIG leases: one lease per compute instance in <root>/run/gpu-mig, named
// by the instance ("gpu1-gi7-ci0"). `gpu-mig sync` (root) makes them: a
// root-owned 0755 directory of root-owned FIFOs whose group and mode follow
// the instance's CI cap node (the MIG rule of the policy): owner rw, the
// node's group rw when the group may read the node, others rw when others
// may. A job takes a lease with an open file description lock
// (F_OFD_SETLK, F_WRLCK) on an O_RDWR fd; it holds while that open file
// lives (in any process the fd was passed to), and ends when the last fd
// on it closes, also when its holder is killed.
//
// Why FIFOs with an OFD write lock: the kernel grants a write lock only on
// an fd open for writing (EBADF otherwise), and opening the lease for
// writing needs the same group as the cap node. So a user who may not use
// the instance can neither open nor lock its lease, and a flock(2) (what
// flock(1) takes, on any readable file) is a different lock that no lease
// check looks at. A FIFO, not a regular file: whoever may lock it may
// write to it, and what is written to a FIFO stays in a pipe buffer (at
// most 64 KiB, charged to the writer), not in /run.
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

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <sys/stat.h>
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
    NotYours = 4,  // the caller may not open it: its CI cap node is another group's
};

// Who may hold an instance's lease: its CI cap node's group and mode as
// planned.
struct LeaseAccess {
    gid_t gid = 0;
    unsigned mode = 0; // the cap node's permission bits
    std::string group; // the name, for messages
};

// The lease's mode for a cap node's mode: the owner always, the group and
// others when they may read the node (caps are opened read-only).
mode_t lease_mode(unsigned cap_mode);

// "gpu1-gi7-ci0": the lease file of the instance.
std::string lease_name(const MigInstance& instance);

// What sync did, by lease name.
struct LeaseSync {
    std::vector<std::string> created;
    std::vector<std::string> repaired; // replaced (planted, wrong type or owner) or chmod'ed
    std::vector<std::string> removed;  // of instances that no longer exist
    size_t kept = 0;
};

// Makes <root>/run/gpu-mig (0755) and a lease FIFO for every instance,
// owned by this user, its group and mode from `access` (by CI cap minor;
// an instance without an entry gets this user's group and 0600: nobody
// else), and removes the leases of instances that no longer exist (only
// with `remove_stale`: not when the instance list may be incomplete). A
// good lease is never replaced (a holder's fd on the old inode would lock
// nothing on the new one): a wrong group or mode is fixed in place,
// narrowed first. Anything else (not a FIFO, more than one link, another
// owner) is replaced. Runs as root on the machine (as any user under
// another root, for tests). Fails when the directory cannot be made or
// trusted; a lease that cannot be made is an error in `diagnostics`.
Result<LeaseSync> sync_leases(const Sysroot& root, const std::vector<MigInstance>& instances,
                              const std::map<unsigned, LeaseAccess>& access, bool remove_stale,
                              Diagnostics& diagnostics);

class LeaseDir {
  public:
    // Opens <root>/run/gpu-mig without following symlinks anywhere on the
    // way. It must be a directory owned by root (or by this user: a test or
    // a copy of a machine) that group and others cannot write; otherwise a
    // user could have planted the files in it. ENOENT: sync has not run.
    static Result<LeaseDir> open(const Sysroot& root);

    // Opens the instance's lease O_RDWR | O_NOFOLLOW | O_NONBLOCK |
    // O_CLOEXEC, checks it is what sync makes (a FIFO, one link, the
    // directory's owner, no execute or set-id bits) and takes its OFD write
    // lock without waiting. The lease lasts while the returned fd (or a dup,
    // or a copy across fork and exec) is open. Fails with reason Held
    // (EWOULDBLOCK), Missing, Untrusted or NotYours (EACCES).
    Result<UniqueFd> take(const MigInstance& instance) const;
    // Whether someone holds the lease (F_OFD_GETLK: takes nothing). Fails
    // with NotYours when the caller may not open it.
    Result<bool> held(const MigInstance& instance) const;
    // The lease as it is now (a checked FIFO), for finding its holders.
    Result<struct stat> stat_lease(const MigInstance& instance) const;
    // Root: replaces the lease by a new FIFO with the same owner, group
    // and mode (made under a temporary name, renamed over it), so a lock
    // held on the old one no longer counts. Returns the old one's stat.
    Result<struct stat> replace(const MigInstance& instance) const;

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
