#include "gpuinit/mig/leases.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/mig/names_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit {

namespace {

constexpr mode_t kDirMode = 0755;
constexpr int kLeaseOpen = O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;

Diagnostic with_reason(Diagnostic diagnostic, LeaseFailure reason) {
    diagnostic.reason = static_cast<int>(reason);
    return diagnostic;
}

// "gpu1-gi7-ci0", and nothing else, is a lease name.
bool is_lease_name(std::string_view name) {
    unsigned gpu = 0;
    unsigned gi = 0;
    unsigned ci = 0;
    int end = 0;
    std::string copy(name);
    return std::sscanf(copy.c_str(), "gpu%u-gi%u-ci%u%n", &gpu, &gi, &ci, &end) == 3 &&
           static_cast<size_t>(end) == copy.size() &&
           copy == format("gpu%u-gi%u-ci%u", gpu, gi, ci);
}

// The directory, as a user must find it before trusting its files.
Status check_dir(const SafeDir& dir, const struct stat& st) {
    bool trusted_owner = st.st_uid == 0 || st.st_uid == ::geteuid();
    if (!trusted_owner || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return with_reason(
            error(format("%s is owned by uid %u with mode %s: whoever can write it can plant "
                         "leases; remove it and run 'gpu-mig sync' as root",
                         dir.path().c_str(), st.st_uid, format_mode(st.st_mode & 07777).c_str()),
                  EPERM),
            LeaseFailure::Untrusted);
    }
    return {};
}

// A lease as sync makes it: only then does its lock mean anything.
bool good_lease(const struct stat& st, uid_t owner) {
    return S_ISFIFO(st.st_mode) && st.st_nlink == 1 && st.st_uid == owner &&
           (st.st_mode & 07111) == 0;
}

// Creates the lease FIFO `name` with mode 0, gives it its group, then its
// mode: never wider, not even for a moment.
Status create_lease(const SafeDir& dir, const std::string& name, gid_t gid, mode_t mode) {
    if (::mkfifoat(dir.fd(), name.c_str(), 0) != 0) {
        return errno_error("cannot create lease " + dir.path_of(name));
    }
    // Opening a FIFO O_RDWR never blocks; mode 0 lets only root (or the
    // owner, in a test) through, which is us.
    UniqueFd fd(::openat(dir.fd(), name.c_str(), kLeaseOpen));
    if (!fd.valid() && errno == EACCES) {
        // Not root (a test): the owner may open it once it has its bits.
        if (::fchmodat(dir.fd(), name.c_str(), 0600, 0) == 0) {
            fd = UniqueFd(::openat(dir.fd(), name.c_str(), kLeaseOpen));
        }
    }
    if (!fd.valid()) {
        return errno_error("cannot open the new lease " + dir.path_of(name));
    }
    if (::fchown(fd.get(), static_cast<uid_t>(-1), gid) != 0) {
        return errno_error(format("cannot give lease %s group %u", dir.path_of(name).c_str(),
                                  static_cast<unsigned>(gid)));
    }
    if (::fchmod(fd.get(), mode) != 0) {
        return errno_error("cannot chmod lease " + dir.path_of(name));
    }
    return {};
}

// Fixes a good lease's group and mode in place, so that leases held on it
// stay valid: first narrowed to what both allow, then the group, then the
// mode.
Status fix_lease(const SafeDir& dir, const std::string& name, const struct stat& st, gid_t gid,
                 mode_t mode) {
    UniqueFd fd(::openat(dir.fd(), name.c_str(), kLeaseOpen));
    if (!fd.valid()) {
        return errno_error("cannot open lease " + dir.path_of(name));
    }
    if (::fchmod(fd.get(), (st.st_mode & 07777) & mode & (st.st_gid == gid ? 0777 : 0707)) != 0 ||
        ::fchown(fd.get(), static_cast<uid_t>(-1), gid) != 0 || ::fchmod(fd.get(), mode) != 0) {
        return errno_error("cannot fix the group or mode of lease " + dir.path_of(name));
    }
    return {};
}

Diagnostic not_yours(const std::string& shown, const MigInstance& instance) {
    return with_reason(error(shown + ": your user and groups may not use " + instance.key() +
                                 " (its CI cap node is another group's: the MIG rules of "
                                 "/etc/gpu-restriction.conf)",
                             EACCES),
                       LeaseFailure::NotYours);
}

} // namespace

mode_t lease_mode(unsigned cap_mode) {
    mode_t mode = 0600;
    if ((cap_mode & 0040) != 0) {
        mode |= 0060;
    }
    if ((cap_mode & 0004) != 0) {
        mode |= 0006;
    }
    return mode;
}

std::string lease_name(const MigInstance& instance) {
    return format("gpu%u-gi%u-ci%u", instance.gpu_minor, instance.gi, instance.ci);
}

Result<LeaseSync> sync_leases(const Sysroot& root, const std::vector<MigInstance>& instances,
                              const std::map<unsigned, LeaseAccess>& access, bool remove_stale,
                              Diagnostics& diagnostics) {
    auto dir = SafeDir::open(root, kMigLeaseDir, kDirMode);
    if (!dir) {
        return dir.error();
    }
    auto st = dir->stat_self();
    if (!st) {
        return st.error();
    }
    if (st->st_uid != ::geteuid()) {
        return error(format("%s is owned by uid %u, not %u: it was not made by gpu-mig sync; "
                            "remove it and rerun",
                            dir->path().c_str(), st->st_uid, ::geteuid()),
                     EPERM);
    }
    // Users must enter it; only its owner may change it.
    if ((st->st_mode & 07777) != kDirMode) {
        if (auto narrowed = dir->chmod_self(kDirMode); !narrowed) {
            return narrowed.error();
        }
    }
    LeaseSync sync;
    std::set<std::string> wanted;
    for (const MigInstance& instance : instances) {
        std::string name = lease_name(instance);
        if (!wanted.insert(name).second) {
            continue;
        }
        gid_t gid = ::getegid();
        mode_t mode = 0600;
        if (auto found = access.find(instance.ci_cap_minor); found != access.end()) {
            gid = found->second.gid;
            mode = lease_mode(found->second.mode);
        }
        auto entry = dir->inspect(name);
        if (!entry) {
            diagnostics.add(entry.error());
            continue;
        }
        if (entry->exists && good_lease(entry->st, ::geteuid()) && !entry->mount_point) {
            if ((entry->st.st_mode & 07777) == mode && entry->st.st_gid == gid) {
                ++sync.kept;
                continue;
            }
            if (auto fixed = fix_lease(*dir, name, entry->st, gid, mode); !fixed) {
                diagnostics.add(fixed.error());
                continue;
            }
            sync.repaired.push_back(name);
            continue;
        }
        bool replacing = entry->exists;
        if (replacing) {
            if (entry->mount_point || S_ISDIR(entry->st.st_mode)) {
                diagnostics.error(dir->path_of(name) +
                                      " is a directory or a mount point, not a lease file; "
                                      "remove it and rerun gpu-mig sync",
                                  Location::in_file(dir->path_of(name)), EEXIST);
                continue;
            }
            if (auto removed = dir->unlink(name); !removed && removed.error().code != ENOENT) {
                diagnostics.add(removed.error());
                continue;
            }
        }
        auto made = create_lease(*dir, name, gid, mode);
        if (!made && made.error().code == EEXIST) {
            continue; // a concurrent sync made it
        }
        if (!made) {
            diagnostics.add(made.error());
            continue;
        }
        (replacing ? sync.repaired : sync.created).push_back(name);
    }
    if (!remove_stale) {
        return sync;
    }
    auto names = dir->list();
    if (!names) {
        return names.error();
    }
    std::sort(names->begin(), names->end());
    for (const std::string& name : *names) {
        // The names file, and a concurrent sync's temporary one, stay.
        if (wanted.count(name) != 0 || name == kMigNamesFile || name.starts_with(kTempPrefix)) {
            continue;
        }
        auto entry = dir->inspect(name);
        if (!entry) {
            diagnostics.add(entry.error());
            continue;
        }
        if (!entry->exists) {
            continue;
        }
        if (S_ISDIR(entry->st.st_mode) || entry->mount_point) {
            diagnostics.warning(dir->path_of(name) +
                                    " is not a lease and not a file; left alone (remove it)",
                                Location::in_file(dir->path_of(name)));
            continue;
        }
        if (auto removed = dir->unlink(name); !removed) {
            if (removed.error().code != ENOENT) {
                diagnostics.add(removed.error());
            }
            continue;
        }
        if (is_lease_name(name)) {
            sync.removed.push_back(name);
        } else {
            diagnostics.warning(dir->path_of(name) + " was not a lease file; removed it",
                                Location::in_file(dir->path_of(name)));
        }
    }
    return sync;
}

Result<LeaseDir> LeaseDir::open(const Sysroot& root) {
    auto dir = SafeDir::open(root, kMigLeaseDir);
    if (!dir) {
        Diagnostic failure = dir.error();
        if (failure.code == ENOENT) {
            failure.message = root.display(kMigLeaseDir) +
                              " does not exist: no leases yet; run 'gpu-mig sync' as root "
                              "(after every MIG change)";
            return with_reason(failure, LeaseFailure::Missing);
        }
        return with_reason(failure, LeaseFailure::Untrusted);
    }
    auto st = dir->stat_self();
    if (!st) {
        return st.error();
    }
    if (auto checked = check_dir(*dir, *st); !checked) {
        return checked.error();
    }
    uid_t owner = st->st_uid;
    return LeaseDir(std::move(*dir), owner);
}

std::string LeaseDir::display(const MigInstance& instance) const {
    return dir_.path_of(lease_name(instance));
}

namespace {

Result<UniqueFd> open_lease(const SafeDir& dir, uid_t owner, const MigInstance& instance) {
    std::string name = lease_name(instance);
    std::string shown = dir.path_of(name);
    UniqueFd fd(::openat(dir.fd(), name.c_str(), kLeaseOpen));
    if (!fd.valid()) {
        if (errno == ENOENT) {
            return with_reason(error(shown + " does not exist: " + instance.key() +
                                         " is newer than the leases; run 'gpu-mig sync' as root",
                                     ENOENT),
                               LeaseFailure::Missing);
        }
        if (errno == ELOOP) {
            return with_reason(
                error(shown + " is a symlink; refusing it (run 'gpu-mig sync' as root)", ELOOP),
                LeaseFailure::Untrusted);
        }
        if (errno == EACCES) {
            return not_yours(shown, instance);
        }
        return errno_error("cannot open lease " + shown);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        return errno_error("cannot stat lease " + shown);
    }
    if (!good_lease(st, owner)) {
        return with_reason(
            error(format("%s is not a lease file as gpu-mig sync makes it (type %o, owner %u, "
                         "mode %s, %u links); refusing it: run 'gpu-mig sync' as root",
                         shown.c_str(), static_cast<unsigned>(st.st_mode & S_IFMT), st.st_uid,
                         format_mode(st.st_mode & 07777).c_str(),
                         static_cast<unsigned>(st.st_nlink)),
                  EPERM),
            LeaseFailure::Untrusted);
    }
    return fd;
}

struct flock whole_file_write_lock() {
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_start = 0;
    lock.l_len = 0;
    return lock;
}

} // namespace

Result<UniqueFd> LeaseDir::take(const MigInstance& instance) const {
    auto fd = open_lease(dir_, owner_, instance);
    if (!fd) {
        return fd;
    }
    struct flock lock = whole_file_write_lock();
    while (::fcntl(fd->get(), F_OFD_SETLK, &lock) != 0) {
        if (errno == EAGAIN || errno == EACCES) {
            return with_reason(error(instance.key() + " is leased by another job", EWOULDBLOCK),
                               LeaseFailure::Held);
        }
        if (errno != EINTR) {
            return errno_error("cannot lock lease " + display(instance));
        }
    }
    return fd;
}

Result<bool> LeaseDir::held(const MigInstance& instance) const {
    auto fd = open_lease(dir_, owner_, instance);
    if (!fd) {
        return fd.error();
    }
    struct flock lock = whole_file_write_lock();
    if (::fcntl(fd->get(), F_OFD_GETLK, &lock) != 0) {
        return errno_error("cannot test the lock of lease " + display(instance));
    }
    return lock.l_type != F_UNLCK;
}

Result<struct stat> LeaseDir::stat_lease(const MigInstance& instance) const {
    auto fd = open_lease(dir_, owner_, instance);
    if (!fd) {
        return fd.error();
    }
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) {
        return errno_error("cannot stat lease " + display(instance));
    }
    return st;
}

Result<struct stat> LeaseDir::replace(const MigInstance& instance) const {
    auto old = stat_lease(instance);
    if (!old) {
        return old;
    }
    std::string name = lease_name(instance);
    std::string temp = temp_name(name);
    if (auto made = create_lease(dir_, temp, old->st_gid, old->st_mode & 07777); !made) {
        ::unlinkat(dir_.fd(), temp.c_str(), 0);
        return made.error();
    }
    if (auto renamed = dir_.rename(temp, name); !renamed) {
        ::unlinkat(dir_.fd(), temp.c_str(), 0);
        return renamed.error();
    }
    return old;
}

Result<std::optional<std::string>> LeaseDir::read_file(std::string_view name, size_t limit) const {
    std::string leaf(name);
    std::string shown = dir_.path_of(leaf);
    UniqueFd fd(::openat(dir_.fd(), leaf.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd.valid()) {
        if (errno == ENOENT) {
            return std::optional<std::string>();
        }
        return errno_error("cannot open " + shown);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        return errno_error("cannot stat " + shown);
    }
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != owner_ ||
        (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return with_reason(
            error(format("%s is not as gpu-mig sync writes it (owner %u, mode %s, "
                         "%u links); refusing it: run 'gpu-mig sync' as root",
                         shown.c_str(), st.st_uid, format_mode(st.st_mode & 07777).c_str(),
                         static_cast<unsigned>(st.st_nlink)),
                  EPERM),
            LeaseFailure::Untrusted);
    }
    auto text = read_all(fd.get(), limit, shown);
    if (!text) {
        return text.error();
    }
    return std::optional<std::string>(std::move(*text));
}

} // namespace gpuinit
