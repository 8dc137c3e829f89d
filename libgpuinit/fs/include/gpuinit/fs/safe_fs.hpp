// Filesystem primitives that are safe as root in a directory others may
// have touched (/dev, /run): every call works on a directory fd opened
// without following symlinks and on a single name in it, never follows a
// symlink at that name, and never grants more than asked, even for a moment.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <sys/types.h>
#include <vector>

namespace gpuinit {

// Every temporary name made here starts with this; a run that holds the
// lock of its directory may sweep leftovers with it.
inline constexpr std::string_view kTempPrefix = ".gpuinit.";

// ".gpuinit.<leaf>.<pid>.<tid>.<n>": unique across processes and threads.
std::string temp_name(std::string_view leaf);

// What is at a name, without following it.
struct EntryState {
    bool exists = false;
    struct stat st {};
    std::string link_target; // for a symlink
    // Something is mounted on the name (a bind mount): changing it would
    // change a file outside this directory.
    bool mount_point = false;
};

// The ACLs an entry carries. Any ACL is a difference from an owner, group
// and mode policy.
struct AclState {
    bool access = false;
    bool default_acl = false; // directories: inherited by new entries
    bool any() const { return access || default_acl; }
};

class SafeDir {
  public:
    // Opens `rel` below the root one component at a time with O_NOFOLLOW,
    // so a symlink anywhere on the way is refused. With `create_mode`,
    // missing components are made by this process with exactly that mode
    // (the umask does not apply); `created` tells whether the last one was.
    static Result<SafeDir> open(const Sysroot& root, std::string_view rel,
                                std::optional<mode_t> create_mode = std::nullopt,
                                bool* created = nullptr);

    int fd() const { return fd_.get(); }
    // The directory's host path, for messages.
    const std::string& path() const { return path_; }
    std::string path_of(std::string_view leaf) const { return path_ + "/" + std::string(leaf); }

    // The directory itself.
    Result<struct stat> stat_self() const;
    Result<AclState> acl_self() const;
    Status remove_acl_self() const;
    Status chown_self(uid_t uid, gid_t gid) const;
    Status chmod_self(mode_t mode) const;

    // A name in it.
    Result<EntryState> inspect(const std::string& leaf) const;
    Result<AclState> acl(const std::string& leaf) const;
    Status remove_acl(const std::string& leaf) const;
    // mknod with mode 0: nobody but root can open it until chmod.
    Status make_char_node(const std::string& leaf, unsigned major, unsigned minor) const;
    Status chown(const std::string& leaf, uid_t uid, gid_t gid) const;
    // chmod that refuses symlinks: fchmodat2 (Linux 6.6), else glibc's
    // /proc-based AT_SYMLINK_NOFOLLOW, else (a rescue shell without /proc on
    // an older kernel) a link-following chmod, only where nobody but root
    // can swap the name: a root-owned directory that group and others
    // cannot write.
    Status chmod(const std::string& leaf, mode_t mode) const;
    Status symlink(const std::string& target, const std::string& leaf) const;
    Status rename(const std::string& from, const std::string& to) const;
    Status unlink(const std::string& leaf) const;
    // Names in the directory, without "." and "..", unsorted.
    Result<std::vector<std::string>> list() const;
    // Writes `data` under a temporary name (O_EXCL, so a planted link or
    // file there is never written through), fsyncs it, then renames it over
    // `name`: a reader, or the file after a crash, has the old text or the
    // new one, never part of either.
    Status write_atomic(const std::string& name, std::string_view data, mode_t mode) const;

  private:
    SafeDir(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
    // Whether a link-following fallback is safe here.
    Status require_root_only_writable(const std::string& what) const;

    UniqueFd fd_;
    std::string path_;
};

} // namespace gpuinit
