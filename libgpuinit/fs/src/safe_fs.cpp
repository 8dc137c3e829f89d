#include "gpuinit/fs/safe_fs.hpp"

#include "gpuinit/base/text.hpp"

#include <atomic>
#include <cerrno>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

namespace gpuinit {

namespace {

constexpr unsigned kPermissionBits = 07777;
constexpr const char* kAclAccess = "system.posix_acl_access";
constexpr const char* kAclDefault = "system.posix_acl_default";

// Numbers shared by every architecture (the table is unified from 424 on);
// Debian 12's headers predate them.
constexpr long kSysFchmodat2 = 452;     // Linux 6.6
constexpr long kSysGetxattrat = 464;    // Linux 6.13
constexpr long kSysRemovexattrat = 466; // Linux 6.13

struct XattrArgs {
    uint64_t value = 0;
    uint32_t size = 0;
    uint32_t flags = 0;
};

std::atomic<bool> g_xattrat_missing{false};
std::atomic<unsigned> g_temp_counter{0};

bool missing_syscall(int error) {
    // ENOSYS on older kernels; EPERM from seccomp filters that predate the call.
    return error == ENOSYS || error == EPERM;
}

bool no_acl(int error) {
    return error == ENODATA || error == EOPNOTSUPP;
}

std::string proc_fd_path(int dirfd, const std::string& leaf) {
    return "/proc/self/fd/" + std::to_string(dirfd) + "/" + leaf;
}

bool have_proc_fds() {
    return ::access("/proc/self/fd", X_OK) == 0;
}

} // namespace

std::string temp_name(std::string_view leaf) {
    return format("%.*s%.*s.%d.%d.%u", static_cast<int>(kTempPrefix.size()), kTempPrefix.data(),
                  static_cast<int>(leaf.size()), leaf.data(), static_cast<int>(::getpid()),
                  static_cast<int>(::gettid()), g_temp_counter.fetch_add(1));
}

Result<SafeDir> SafeDir::open(const Sysroot& root, std::string_view rel,
                              std::optional<mode_t> create_mode, bool* created) {
    // The root itself is the admin's choice and trusted; everything below it
    // is walked without following links, the first step from the root's own
    // (O_PATH) fd, which *at() calls take as it is.
    std::string_view rest = strip_slashes(rel);
    UniqueFd dir;
    if (rest.empty()) {
        dir.reset(::openat(root.fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!dir.valid()) {
            return errno_error("cannot open root " + root.root());
        }
    }
    std::string walked;
    while (!rest.empty()) {
        const int at = dir.valid() ? dir.get() : root.fd();
        size_t slash = rest.find('/');
        std::string component(rest.substr(0, slash));
        rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
        walked += walked.empty() ? component : "/" + component;
        if (component.empty() || component == "." || component == "..") {
            return error("refusing path component '" + component + "' in " + walked, EINVAL);
        }
        constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
        int fd = ::openat(at, component.c_str(), kFlags);
        bool made = false;
        if (fd < 0 && errno == ENOENT && create_mode) {
            // Owner bits first, the final mode once it is ours: never wider.
            if (::mkdirat(at, component.c_str(), *create_mode & 0700) != 0) {
                if (errno != EEXIST) {
                    return errno_error("cannot create directory " + root.display(walked));
                }
            } else {
                made = true;
            }
            fd = ::openat(at, component.c_str(), kFlags);
        }
        if (fd < 0) {
            if (errno == ELOOP || errno == ENOTDIR) {
                return error(root.display(walked) +
                                 " is a symlink or not a directory; refusing to follow it"
                                 " (remove it and rerun)",
                             errno);
            }
            return errno_error("cannot open directory " + root.display(walked));
        }
        dir.reset(fd);
        if (made && ::fchmod(fd, *create_mode) != 0) {
            return errno_error("cannot chmod new directory " + root.display(walked));
        }
        if (created != nullptr) {
            *created = made;
        }
    }
    return SafeDir(std::move(dir), root.display(rel));
}

Result<struct stat> SafeDir::stat_self() const {
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) {
        return errno_error("cannot stat " + path_);
    }
    return st;
}

Result<AclState> SafeDir::acl_self() const {
    AclState state;
    for (auto [name, flag] :
         {std::pair{kAclAccess, &state.access}, std::pair{kAclDefault, &state.default_acl}}) {
        if (::fgetxattr(fd_.get(), name, nullptr, 0) >= 0) {
            *flag = true;
        } else if (!no_acl(errno)) {
            return errno_error("cannot read the ACLs of " + path_);
        }
    }
    return state;
}

Status SafeDir::remove_acl_self() const {
    for (const char* name : {kAclAccess, kAclDefault}) {
        if (::fremovexattr(fd_.get(), name) != 0 && !no_acl(errno)) {
            return errno_error("cannot remove the ACL of " + path_);
        }
    }
    return {};
}

Status SafeDir::chown_self(uid_t uid, gid_t gid) const {
    if (::fchown(fd_.get(), uid, gid) != 0) {
        return errno_error("cannot chown " + path_);
    }
    return {};
}

Status SafeDir::chmod_self(mode_t mode) const {
    if (::fchmod(fd_.get(), mode) != 0) {
        return errno_error("cannot chmod " + path_);
    }
    return {};
}

Result<EntryState> SafeDir::inspect(const std::string& leaf) const {
    EntryState state;
    struct statx stx {};
    if (::statx(fd_.get(), leaf.c_str(), AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_BASIC_STATS,
                &stx) != 0) {
        if (errno == ENOENT) {
            return state;
        }
        return errno_error("cannot stat " + path_of(leaf));
    }
    state.exists = true;
    state.st.st_mode = stx.stx_mode;
    state.st.st_uid = stx.stx_uid;
    state.st.st_gid = stx.stx_gid;
    state.st.st_nlink = stx.stx_nlink;
    state.st.st_ino = stx.stx_ino;
    state.st.st_size = static_cast<off_t>(stx.stx_size);
    state.st.st_rdev = makedev(stx.stx_rdev_major, stx.stx_rdev_minor);
    state.st.st_dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
    if ((stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) != 0) {
        state.mount_point = (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
    } else if (auto self = stat_self(); self) {
        // Before Linux 5.8: a bind mount from another filesystem shows here.
        state.mount_point = self->st_dev != state.st.st_dev;
    }
    if (S_ISLNK(state.st.st_mode)) {
        char target[4096];
        ssize_t n = ::readlinkat(fd_.get(), leaf.c_str(), target, sizeof target - 1);
        if (n < 0) {
            return errno_error("cannot read link " + path_of(leaf));
        }
        state.link_target.assign(target, static_cast<size_t>(n));
    }
    return state;
}

Status SafeDir::require_root_only_writable(const std::string& what) const {
    auto self = stat_self();
    if (!self) {
        return self.error();
    }
    if (self->st_uid != 0 || (self->st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return error(format("refusing to %s: without Linux 6.6/6.13's *at() calls or /proc the"
                            " only way follows symlinks, which is safe only in a root-owned"
                            " directory that group and others cannot write, and %s is uid %u"
                            " mode %s; mount /proc, or chown root and chmod go-w %s, and rerun",
                            what.c_str(), path_.c_str(), self->st_uid,
                            format_mode(self->st_mode & kPermissionBits).c_str(), path_.c_str()),
                     EPERM);
    }
    return {};
}

Result<AclState> SafeDir::acl(const std::string& leaf) const {
    AclState state;
    // Only the access ACL: a default ACL exists on directories alone.
    auto present = [&](const char* name) -> Result<bool> {
        if (!g_xattrat_missing.load(std::memory_order_relaxed)) {
            XattrArgs args;
            long got = ::syscall(kSysGetxattrat, fd_.get(), leaf.c_str(), AT_SYMLINK_NOFOLLOW, name,
                                 &args, sizeof args);
            if (got >= 0) {
                return true;
            }
            if (no_acl(errno)) {
                return false;
            }
            if (!missing_syscall(errno)) {
                return errno_error("cannot read the ACL of " + path_of(leaf));
            }
            g_xattrat_missing.store(true, std::memory_order_relaxed);
        }
        if (have_proc_fds()) {
            if (::lgetxattr(proc_fd_path(fd_.get(), leaf).c_str(), name, nullptr, 0) >= 0) {
                return true;
            }
            if (no_acl(errno)) {
                return false;
            }
            return errno_error("cannot read the ACL of " + path_of(leaf));
        }
        if (auto safe = require_root_only_writable("check the ACL of " + path_of(leaf)); !safe) {
            return safe.error();
        }
        if (::lgetxattr(path_of(leaf).c_str(), name, nullptr, 0) >= 0) {
            return true;
        }
        if (no_acl(errno)) {
            return false;
        }
        return errno_error("cannot read the ACL of " + path_of(leaf));
    };
    auto access = present(kAclAccess);
    if (!access) {
        return access.error();
    }
    state.access = *access;
    return state;
}

Status SafeDir::remove_acl(const std::string& leaf) const {
    if (!g_xattrat_missing.load(std::memory_order_relaxed)) {
        if (::syscall(kSysRemovexattrat, fd_.get(), leaf.c_str(), AT_SYMLINK_NOFOLLOW,
                      kAclAccess) == 0 ||
            no_acl(errno)) {
            return {};
        }
        if (!missing_syscall(errno)) {
            return errno_error("cannot remove the ACL of " + path_of(leaf));
        }
        g_xattrat_missing.store(true, std::memory_order_relaxed);
    }
    std::string target;
    if (have_proc_fds()) {
        target = proc_fd_path(fd_.get(), leaf);
    } else if (auto safe = require_root_only_writable("remove the ACL of " + path_of(leaf));
               !safe) {
        return safe;
    } else {
        target = path_of(leaf);
    }
    if (::lremovexattr(target.c_str(), kAclAccess) != 0 && !no_acl(errno)) {
        return errno_error("cannot remove the ACL of " + path_of(leaf));
    }
    return {};
}

Status SafeDir::make_char_node(const std::string& leaf, unsigned major, unsigned minor) const {
    if (::mknodat(fd_.get(), leaf.c_str(), S_IFCHR, makedev(major, minor)) != 0) {
        return errno == EPERM ? errno_error("cannot mknod " + path_of(leaf) + " (run as root)")
                              : errno_error("cannot mknod " + path_of(leaf));
    }
    return {};
}

Status SafeDir::chown(const std::string& leaf, uid_t uid, gid_t gid) const {
    if (::fchownat(fd_.get(), leaf.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
        return errno_error("cannot chown " + path_of(leaf));
    }
    return {};
}

Status SafeDir::chmod(const std::string& leaf, mode_t mode) const {
    if (::syscall(kSysFchmodat2, fd_.get(), leaf.c_str(), mode, AT_SYMLINK_NOFOLLOW) == 0) {
        return {};
    }
    if (!missing_syscall(errno)) {
        return errno_error("cannot chmod " + path_of(leaf));
    }
    // glibc 2.36 emulates AT_SYMLINK_NOFOLLOW through /proc; without /proc
    // that fails with EOPNOTSUPP even for a device node.
    if (::fchmodat(fd_.get(), leaf.c_str(), mode, AT_SYMLINK_NOFOLLOW) == 0) {
        return {};
    }
    if (errno != EOPNOTSUPP) {
        return errno_error("cannot chmod " + path_of(leaf));
    }
    if (auto safe = require_root_only_writable("chmod " + path_of(leaf)); !safe) {
        return safe;
    }
    struct stat st {};
    if (::fstatat(fd_.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return errno_error("cannot stat " + path_of(leaf));
    }
    if (S_ISLNK(st.st_mode)) {
        return error(path_of(leaf) + " became a symlink; refusing to chmod through it", ELOOP);
    }
    if (::fchmodat(fd_.get(), leaf.c_str(), mode, 0) != 0) {
        return errno_error("cannot chmod " + path_of(leaf));
    }
    return {};
}

Status SafeDir::symlink(const std::string& target, const std::string& leaf) const {
    if (::symlinkat(target.c_str(), fd_.get(), leaf.c_str()) != 0) {
        return errno_error("cannot create link " + path_of(leaf));
    }
    return {};
}

Status SafeDir::rename(const std::string& from, const std::string& to) const {
    if (::renameat(fd_.get(), from.c_str(), fd_.get(), to.c_str()) != 0) {
        return errno_error("cannot rename " + path_of(from) + " over " + path_of(to));
    }
    return {};
}

Status SafeDir::unlink(const std::string& leaf) const {
    if (::unlinkat(fd_.get(), leaf.c_str(), 0) != 0) {
        return errno_error("cannot remove " + path_of(leaf));
    }
    return {};
}

Result<std::vector<std::string>> SafeDir::list() const {
    return list_names(fd_.get(), path_);
}

Status SafeDir::write_atomic(const std::string& name, std::string_view data, mode_t mode) const {
    std::string temp = temp_name(name);
    UniqueFd fd(::openat(fd_.get(), temp.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0700));
    if (!fd.valid()) {
        return errno_error("cannot write " + path_of(name) + " (temporary " + temp + ")");
    }
    Status status;
    if (::fchmod(fd.get(), mode) != 0) {
        status = errno_error("cannot chmod " + path_of(temp));
    }
    while (status && !data.empty()) {
        ssize_t n = ::write(fd.get(), data.data(), data.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            status = errno_error("cannot write " + path_of(name));
            break;
        }
        data.remove_prefix(static_cast<size_t>(n));
    }
    // On disk before the name points at it: after a crash the name holds the
    // old text or the new, never an empty file (ext4 and xfs may otherwise
    // order the rename first).
    if (status && ::fsync(fd.get()) != 0) {
        status = errno_error("cannot sync " + path_of(temp));
    }
    if (status && ::renameat(fd_.get(), temp.c_str(), fd_.get(), name.c_str()) != 0) {
        status = errno_error("cannot rename " + path_of(temp) + " over " + path_of(name));
    }
    if (!status) {
        ::unlinkat(fd_.get(), temp.c_str(), 0);
    }
    return status;
}

} // namespace gpuinit
