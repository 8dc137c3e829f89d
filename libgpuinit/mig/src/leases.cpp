#include "gpuinit/mig/leases.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/mig/names_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <set>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit {

namespace {

constexpr mode_t kLeaseMode = 0444;
constexpr mode_t kDirMode = 0755;

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

// A lease file as sync makes it: only then does its lock mean anything.
bool good_lease(const struct stat& st, uid_t owner) {
    return S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == owner &&
           (st.st_mode & 07777) == kLeaseMode;
}

// Creates the lease `name` with mode 0, then 0444 on the fd: never wider.
Status create_lease(const SafeDir& dir, const std::string& name) {
    UniqueFd fd(
        ::openat(dir.fd(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0));
    if (!fd.valid()) {
        return errno_error("cannot create lease " + dir.path_of(name));
    }
    if (::fchmod(fd.get(), kLeaseMode) != 0) {
        return errno_error("cannot chmod lease " + dir.path_of(name));
    }
    return {};
}

} // namespace

std::string lease_name(const MigInstance& instance) {
    return format("gpu%u-gi%u-ci%u", instance.gpu_minor, instance.gi, instance.ci);
}

Result<LeaseSync> sync_leases(const Sysroot& root, const std::vector<MigInstance>& instances,
                              bool remove_stale, Diagnostics& diagnostics) {
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
        auto entry = dir->inspect(name);
        if (!entry) {
            diagnostics.add(entry.error());
            continue;
        }
        if (entry->exists && S_ISREG(entry->st.st_mode) && entry->st.st_nlink == 1 &&
            entry->st.st_uid == ::geteuid() && !entry->mount_point) {
            if ((entry->st.st_mode & 07777) == kLeaseMode) {
                ++sync.kept;
                continue;
            }
            // Our own file with other bits: fix it in place, so that leases
            // held on it stay valid.
            if (auto fixed = dir->chmod(name, kLeaseMode); !fixed) {
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
        auto made = create_lease(*dir, name);
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

Result<UniqueFd> LeaseDir::take(const MigInstance& instance) const {
    std::string name = lease_name(instance);
    UniqueFd fd(::openat(dir_.fd(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd.valid()) {
        if (errno == ENOENT) {
            return with_reason(error(display(instance) + " does not exist: " + instance.key() +
                                         " is newer than the leases; run 'gpu-mig sync' as root",
                                     ENOENT),
                               LeaseFailure::Missing);
        }
        if (errno == ELOOP) {
            return with_reason(
                error(display(instance) + " is a symlink; refusing it (run 'gpu-mig sync' as root)",
                      ELOOP),
                LeaseFailure::Untrusted);
        }
        return errno_error("cannot open lease " + display(instance));
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        return errno_error("cannot stat lease " + display(instance));
    }
    if (!good_lease(st, owner_)) {
        return with_reason(
            error(format("%s is not a lease file as gpu-mig sync makes it (type %o, owner %u, "
                         "mode %s, %u links); refusing it: run 'gpu-mig sync' as root",
                         display(instance).c_str(), static_cast<unsigned>(st.st_mode & S_IFMT),
                         st.st_uid, format_mode(st.st_mode & 07777).c_str(),
                         static_cast<unsigned>(st.st_nlink)),
                  EPERM),
            LeaseFailure::Untrusted);
    }
    while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            return with_reason(error(instance.key() + " is leased by another job", EWOULDBLOCK),
                               LeaseFailure::Held);
        }
        if (errno != EINTR) {
            return errno_error("cannot lock lease " + display(instance));
        }
    }
    return fd;
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

Result<bool> LeaseDir::held(const MigInstance& instance) const {
    auto lease = take(instance);
    if (lease) {
        return false; // closing lets go
    }
    if (lease.error().reason == static_cast<int>(LeaseFailure::Held)) {
        return true;
    }
    return lease.error();
}

} // namespace gpuinit
