#include "gpuinit/devnodes/reconcile.hpp"

#include "gpuinit/base/text.hpp"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <map>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace gpuinit {

namespace {

constexpr unsigned kPermissionBits = 07777;
// The same number on every architecture; Debian 12's headers predate it.
constexpr long kSysFchmodat2 = 452;

struct Observed {
    bool exists = false;
    struct stat st {};
    std::string link_target;
};

// Directory fds below <root>/dev, opened once each without following links.
class DevDirs {
  public:
    DevDirs(const Sysroot& root, bool create) : root_(root), create_(create) {}

    // Splits "char/195:0" into the fd of dev/char and "195:0". In a dry run a
    // missing directory gives fd -1: everything in it is absent. A directory
    // that cannot be opened is reported in full for the first name in it;
    // the others get a short error that points there, not the same message
    // again.
    Result<int> dir_for(const std::string& name, std::string* leaf) {
        size_t slash = name.rfind('/');
        std::string sub = slash == std::string::npos ? "" : name.substr(0, slash);
        *leaf = slash == std::string::npos ? name : name.substr(slash + 1);
        auto it = fds_.find(sub);
        if (it != fds_.end()) {
            return it->second.get();
        }
        std::string rel = sub.empty() ? "dev" : "dev/" + sub;
        if (auto failed = failures_.find(sub); failed != failures_.end()) {
            return Error{failed->second, root_.display("dev/" + name) +
                                             " skipped: " + root_.display(rel) +
                                             " could not be opened (its first error says why)"};
        }
        auto fd = root_.open_dir_nofollow(rel, create_, 0755);
        if (!fd) {
            if (!create_ && fd.error().code == ENOENT) {
                fds_.emplace(sub, UniqueFd());
                return -1;
            }
            failures_.emplace(sub, fd.error().code);
            return fd.error();
        }
        int raw = fd->get();
        fds_.emplace(sub, std::move(*fd));
        return raw;
    }

  private:
    const Sysroot& root_;
    bool create_;
    std::map<std::string, UniqueFd> fds_;
    std::map<std::string, int> failures_; // errno of a directory already reported
};

Result<Observed> observe(int dirfd, const std::string& leaf, const std::string& shown) {
    Observed observed;
    if (dirfd < 0) {
        return observed;
    }
    if (::fstatat(dirfd, leaf.c_str(), &observed.st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) {
            return observed;
        }
        return errno_error("cannot stat " + shown);
    }
    observed.exists = true;
    if (S_ISLNK(observed.st.st_mode)) {
        char target[4096];
        ssize_t n = ::readlinkat(dirfd, leaf.c_str(), target, sizeof target - 1);
        if (n < 0) {
            return errno_error("cannot read link " + shown);
        }
        observed.link_target.assign(target, static_cast<size_t>(n));
    }
    return observed;
}

std::string describe_type(const struct stat& st) {
    if (S_ISCHR(st.st_mode)) {
        return format("c %u:%u", major(st.st_rdev), minor(st.st_rdev));
    }
    if (S_ISBLK(st.st_mode)) {
        return format("b %u:%u", major(st.st_rdev), minor(st.st_rdev));
    }
    if (S_ISLNK(st.st_mode)) {
        return "a symlink";
    }
    if (S_ISDIR(st.st_mode)) {
        return "a directory";
    }
    if (S_ISREG(st.st_mode)) {
        return "a regular file";
    }
    return "a socket or fifo";
}

std::string describe_node(const NodeSpec& node) {
    return format("c %u:%u %s:%s %s", node.major, node.minor, node.owner.c_str(),
                  node.group.c_str(), format_mode(node.mode).c_str());
}

std::string temp_name(const std::string& leaf) {
    return ".gpuinit." + leaf + "." + std::to_string(::getpid());
}

// chmod that refuses symlinks. fchmodat2 (Linux 6.6) does it in one call;
// glibc 2.36 emulates AT_SYMLINK_NOFOLLOW through /proc, and in a rescue
// shell without /proc that fails with EOPNOTSUPP even for a device node. Then
// the name is checked again and chmodded directly, following links: only
// safe when nobody but root can swap the name in between, so the directory
// itself must be root-owned and not writable by group or others.
Status chmod_nofollow(int dirfd, const std::string& leaf, unsigned mode, const std::string& shown) {
    if (::syscall(kSysFchmodat2, dirfd, leaf.c_str(), mode, AT_SYMLINK_NOFOLLOW) == 0) {
        return {};
    }
    // ENOSYS before 6.6; EPERM from seccomp filters that predate the call.
    if (errno != ENOSYS && errno != EPERM) {
        return errno_error("cannot chmod " + shown);
    }
    if (::fchmodat(dirfd, leaf.c_str(), mode, AT_SYMLINK_NOFOLLOW) == 0) {
        return {};
    }
    if (errno != EOPNOTSUPP) {
        return errno_error("cannot chmod " + shown);
    }
    std::string dir_shown = shown.substr(0, shown.rfind('/'));
    struct stat dir_st {};
    if (::fstat(dirfd, &dir_st) != 0) {
        return errno_error("cannot stat " + dir_shown);
    }
    if (dir_st.st_uid != 0 || (dir_st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return Error{EPERM,
                     format("refusing to chmod %s: without fchmodat2 (Linux 6.6) or /proc the"
                            " only way follows symlinks, which is safe only in a root-owned"
                            " directory that group and others cannot write, and %s is uid %u"
                            " mode %s; mount /proc, or chown root and chmod go-w %s, and rerun",
                            shown.c_str(), dir_shown.c_str(), dir_st.st_uid,
                            format_mode(dir_st.st_mode & kPermissionBits).c_str(),
                            dir_shown.c_str())};
    }
    struct stat st {};
    if (::fstatat(dirfd, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return errno_error("cannot stat " + shown);
    }
    if (S_ISLNK(st.st_mode)) {
        return Error{ELOOP, shown + " became a symlink; refusing to chmod through it"};
    }
    if (::fchmodat(dirfd, leaf.c_str(), mode, 0) != 0) {
        return errno_error("cannot chmod " + shown);
    }
    return {};
}

// Creates the node with mode 0 (nobody but root can open it), gives it its
// owner, then its mode. A missing name is created in place; a wrong node is
// replaced by building the new one under a temporary name and renaming it
// over, so the name never shows a node with the wrong rights.
Status install_node(int dirfd, const std::string& leaf, const NodeSpec& node, bool replace,
                    const std::string& shown) {
    std::string temp = replace ? temp_name(leaf) : leaf;
    int made = ::mknodat(dirfd, temp.c_str(), S_IFCHR, makedev(node.major, node.minor));
    if (made != 0 && errno == EEXIST && replace) {
        ::unlinkat(dirfd, temp.c_str(), 0); // a leftover of a crashed run
        made = ::mknodat(dirfd, temp.c_str(), S_IFCHR, makedev(node.major, node.minor));
    }
    if (made != 0) {
        return errno == EPERM ? errno_error("cannot mknod " + shown + " (run as root)")
                              : errno_error("cannot mknod " + shown);
    }
    Status status;
    if (::fchownat(dirfd, temp.c_str(), node.uid, node.gid, AT_SYMLINK_NOFOLLOW) != 0) {
        status = errno_error("cannot chown " + shown);
    } else if (auto chmodded = chmod_nofollow(dirfd, temp, node.mode, shown); !chmodded) {
        status = chmodded;
    } else if (replace && ::renameat(dirfd, temp.c_str(), dirfd, leaf.c_str()) != 0) {
        status = errno_error("cannot rename a new node over " + shown);
    }
    if (!status) {
        // Never leave a half-made node behind, under either name.
        ::unlinkat(dirfd, temp.c_str(), 0);
    }
    return status;
}

// In place, so containers that bind-mounted the node see the fix. Narrow the
// mode to what both old and new allow, change the owner, then set the final
// mode: no step grants anyone more than the old or the new state did.
Status repair_node(int dirfd, const std::string& leaf, const struct stat& st, const NodeSpec& node,
                   const std::string& shown) {
    unsigned old_mode = st.st_mode & kPermissionBits;
    unsigned narrow = old_mode & node.mode;
    bool owner_differs = st.st_uid != node.uid || st.st_gid != node.gid;
    if (owner_differs && narrow != old_mode) {
        if (auto status = chmod_nofollow(dirfd, leaf, narrow, shown); !status) {
            return status;
        }
    }
    if (owner_differs &&
        ::fchownat(dirfd, leaf.c_str(), node.uid, node.gid, AT_SYMLINK_NOFOLLOW) != 0) {
        return errno_error("cannot chown " + shown);
    }
    if (old_mode != node.mode || (owner_differs && narrow != node.mode)) {
        return chmod_nofollow(dirfd, leaf, node.mode, shown);
    }
    return {};
}

// symlinkat() is atomic for a missing name; a wrong entry is replaced by a
// rename over it.
Status install_link(int dirfd, const std::string& leaf, const LinkSpec& link, bool replace,
                    const std::string& shown) {
    std::string temp = replace ? temp_name(leaf) : leaf;
    int made = ::symlinkat(link.target.c_str(), dirfd, temp.c_str());
    if (made != 0 && errno == EEXIST && replace) {
        ::unlinkat(dirfd, temp.c_str(), 0);
        made = ::symlinkat(link.target.c_str(), dirfd, temp.c_str());
    }
    if (made != 0) {
        return errno_error("cannot create link " + shown);
    }
    if (replace && ::renameat(dirfd, temp.c_str(), dirfd, leaf.c_str()) != 0) {
        Error error = errno_error("cannot rename a new link over " + shown);
        ::unlinkat(dirfd, temp.c_str(), 0);
        return error;
    }
    return {};
}

std::string repair_detail(const struct stat& st, const NodeSpec& node) {
    std::string detail;
    auto add = [&detail](const std::string& part) {
        detail += detail.empty() ? part : ", " + part;
    };
    if (st.st_uid != node.uid) {
        add(format("owner %u -> %s(%u)", st.st_uid, node.owner.c_str(), node.uid));
    }
    if (st.st_gid != node.gid) {
        add(format("group %u -> %s(%u)", st.st_gid, node.group.c_str(), node.gid));
    }
    if ((st.st_mode & kPermissionBits) != node.mode) {
        add("mode " + format_mode(st.st_mode & kPermissionBits) + " -> " + format_mode(node.mode));
    }
    return detail;
}

Change reconcile_node(DevDirs& dirs, const Sysroot& root, const NodeSpec& node, bool dry_run) {
    Change change;
    change.name = node.name;
    std::string shown = root.display("dev/" + node.name);
    std::string leaf;
    auto dirfd = dirs.dir_for(node.name, &leaf);
    if (!dirfd) {
        return Change{Change::Kind::Failed, node.name, dirfd.error().message};
    }
    auto observed = observe(*dirfd, leaf, shown);
    if (!observed) {
        return Change{Change::Kind::Failed, node.name, observed.error().message};
    }
    const struct stat& st = observed->st;
    if (!observed->exists) {
        change.kind = Change::Kind::Create;
        change.detail = describe_node(node);
    } else if (S_ISDIR(st.st_mode)) {
        return Change{Change::Kind::Failed, node.name,
                      shown + " is a directory; move it away and rerun"};
    } else if (!S_ISCHR(st.st_mode) || st.st_rdev != makedev(node.major, node.minor)) {
        change.kind = Change::Kind::Replace;
        change.detail = "was " + describe_type(st) + ", now " + describe_node(node);
    } else if (st.st_uid != node.uid || st.st_gid != node.gid ||
               (st.st_mode & kPermissionBits) != node.mode) {
        change.kind = Change::Kind::Repair;
        change.detail = repair_detail(st, node);
    } else {
        change.kind = Change::Kind::Unchanged;
        change.detail = describe_node(node);
        return change;
    }
    if (dry_run) {
        return change;
    }
    bool replace = change.kind == Change::Kind::Replace;
    Status status = change.kind == Change::Kind::Repair
                        ? repair_node(*dirfd, leaf, st, node, shown)
                        : install_node(*dirfd, leaf, node, replace, shown);
    if (!status) {
        return Change{Change::Kind::Failed, node.name, status.error().message};
    }
    return change;
}

Change reconcile_link(DevDirs& dirs, const Sysroot& root, const LinkSpec& link, bool dry_run) {
    Change change;
    change.name = link.name;
    change.is_link = true;
    std::string shown = root.display("dev/" + link.name);
    std::string leaf;
    auto dirfd = dirs.dir_for(link.name, &leaf);
    if (!dirfd) {
        return Change{Change::Kind::Failed, link.name, dirfd.error().message, true};
    }
    auto observed = observe(*dirfd, leaf, shown);
    if (!observed) {
        return Change{Change::Kind::Failed, link.name, observed.error().message, true};
    }
    if (!observed->exists) {
        change.kind = Change::Kind::Create;
        change.detail = "-> " + link.target;
    } else if (S_ISDIR(observed->st.st_mode)) {
        return Change{Change::Kind::Failed, link.name,
                      shown + " is a directory; move it away and rerun", true};
    } else if (!S_ISLNK(observed->st.st_mode) || observed->link_target != link.target) {
        change.kind = Change::Kind::Replace;
        change.detail = "was " +
                        (S_ISLNK(observed->st.st_mode) ? "-> " + observed->link_target
                                                       : describe_type(observed->st)) +
                        ", now -> " + link.target;
    } else {
        change.kind = Change::Kind::Unchanged;
        change.detail = "-> " + link.target;
        return change;
    }
    if (dry_run) {
        return change;
    }
    if (auto status = install_link(*dirfd, leaf, link, change.kind == Change::Kind::Replace, shown);
        !status) {
        return Change{Change::Kind::Failed, link.name, status.error().message, true};
    }
    return change;
}

} // namespace

const char* change_kind_name(Change::Kind kind) {
    switch (kind) {
    case Change::Kind::Create:
        return "create";
    case Change::Kind::Replace:
        return "replace";
    case Change::Kind::Repair:
        return "repair";
    case Change::Kind::Unchanged:
        return "ok";
    case Change::Kind::Remove:
        return "remove";
    case Change::Kind::Failed:
        return "failed";
    }
    return "?";
}

size_t ReconcileResult::count(Change::Kind kind) const {
    size_t n = 0;
    for (const Change& change : changes) {
        n += change.kind == kind ? 1 : 0;
    }
    return n;
}

Result<UniqueFd> lock_run_dir(const Sysroot& root) {
    auto dir = root.open_dir_nofollow("run/gpuinit", true, 0755);
    if (!dir) {
        return dir.error();
    }
    UniqueFd lock(::openat(dir->get(), "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!lock.valid()) {
        return errno_error("cannot open lock " + root.display("run/gpuinit/lock"));
    }
    while (::flock(lock.get(), LOCK_EX) != 0) {
        if (errno != EINTR) {
            return errno_error("cannot lock " + root.display("run/gpuinit/lock"));
        }
    }
    return lock;
}

Result<ReconcileResult> reconcile(const Sysroot& root, const NodePlan& plan, bool dry_run) {
    ReconcileResult result;
    DevDirs dirs(root, !dry_run);
    std::vector<std::string> failed_nodes;
    for (const NodeSpec& node : plan.nodes) {
        result.changes.push_back(reconcile_node(dirs, root, node, dry_run));
        if (result.changes.back().kind == Change::Kind::Failed) {
            failed_nodes.push_back("../" + node.name);
        }
    }
    for (const LinkSpec& link : plan.links) {
        // A link to a node that could not be made would only dangle.
        if (std::find(failed_nodes.begin(), failed_nodes.end(), link.target) !=
            failed_nodes.end()) {
            continue;
        }
        result.changes.push_back(reconcile_link(dirs, root, link, dry_run));
    }
    return result;
}

Result<ReconcileResult> remove_gpu_nodes(const Sysroot& root, unsigned major, unsigned minor,
                                         bool dry_run) {
    ReconcileResult result;
    DevDirs dirs(root, false);
    std::string node_name = "nvidia" + std::to_string(minor);
    std::string link_name = char_link_name(major, minor);
    for (const std::string& name : {node_name, link_name}) {
        bool is_link = name == link_name;
        std::string shown = root.display("dev/" + name);
        std::string leaf;
        auto dirfd = dirs.dir_for(name, &leaf);
        if (!dirfd) {
            return dirfd.error();
        }
        auto observed = observe(*dirfd, leaf, shown);
        if (!observed) {
            return observed.error();
        }
        if (!observed->exists) {
            continue;
        }
        const struct stat& st = observed->st;
        bool ours = is_link ? S_ISLNK(st.st_mode) && observed->link_target == "../" + node_name
                            : S_ISCHR(st.st_mode) && st.st_rdev == makedev(major, minor);
        if (!ours) {
            result.changes.push_back({Change::Kind::Unchanged, name,
                                      "is " + describe_type(st) + ", not ours; left alone",
                                      is_link});
            continue;
        }
        if (!dry_run && ::unlinkat(*dirfd, leaf.c_str(), 0) != 0) {
            result.changes.push_back({Change::Kind::Failed, name,
                                      errno_error("cannot remove " + shown).message, is_link});
            continue;
        }
        result.changes.push_back({Change::Kind::Remove, name,
                                  is_link ? "-> " + observed->link_target : describe_type(st),
                                  is_link});
    }
    return result;
}

} // namespace gpuinit
