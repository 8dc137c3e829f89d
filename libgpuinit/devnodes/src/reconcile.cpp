#include "gpuinit/devnodes/reconcile.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/fs/safe_fs.hpp"

#include <algorithm>
#include <cerrno>
#include <map>
#include <optional>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace gpuinit {

namespace {

constexpr unsigned kPermissionBits = 07777;

// The directories below <root>/dev, each opened once without following
// links. A directory that cannot be opened is reported in full to the first
// caller; every later one gets a short error that points there.
class DevDirs {
  public:
    DevDirs(const Sysroot& root, bool create) : root_(root), create_(create) {}

    struct Opened {
        const SafeDir* dir = nullptr; // nullptr: a dry run on a missing directory
        bool created = false;
    };

    Result<Opened> get(const std::string& sub) {
        if (auto it = dirs_.find(sub); it != dirs_.end()) {
            return Opened{it->second ? &*it->second : nullptr, false};
        }
        if (auto failed = failures_.find(sub); failed != failures_.end()) {
            return failed->second;
        }
        std::string rel = sub.empty() ? "dev" : "dev/" + sub;
        bool created = false;
        auto dir = SafeDir::open(root_, rel, create_ ? std::optional<mode_t>(0755) : std::nullopt,
                                 &created);
        if (!dir) {
            if (!create_ && dir.error().code == ENOENT) {
                dirs_.emplace(sub, std::nullopt);
                return Opened{};
            }
            failures_.emplace(sub, error(root_.display(rel) + " could not be opened (its first"
                                                              " error says why)",
                                         dir.error().code));
            return dir.error();
        }
        return Opened{&*dirs_.emplace(sub, std::move(*dir)).first->second, created};
    }

    // Splits "char/195:0" into the directory dev/char and "195:0".
    Result<const SafeDir*> dir_for(const std::string& name, std::string* leaf) {
        size_t slash = name.rfind('/');
        *leaf = slash == std::string::npos ? name : name.substr(slash + 1);
        auto opened = get(slash == std::string::npos ? "" : name.substr(0, slash));
        if (!opened) {
            return opened.error();
        }
        return opened->dir;
    }

  private:
    const Sysroot& root_;
    bool create_;
    std::map<std::string, std::optional<SafeDir>> dirs_;
    std::map<std::string, Diagnostic> failures_;
};

class Reconciler {
  public:
    Reconciler(const Sysroot& root, bool dry_run, bool create_dirs, Diagnostics& diagnostics)
        : root_(root), dry_run_(dry_run), diagnostics_(diagnostics),
          dirs_(root, create_dirs && !dry_run) {}

    void directory(const DirSpec& spec);
    void leftovers(const std::string& sub);
    // False when the node failed (its link would only dangle).
    bool node(const NodeSpec& spec);
    void link(const LinkSpec& spec);
    void remove_if_ours(const std::string& name, bool is_link, const std::string& node_name,
                        dev_t rdev);
    void prune(const PruneSpec& spec, const NodePlan& plan);

    ReconcileResult result;

  private:
    std::string shown(const std::string& name) const {
        return root_.display(name.empty() ? "dev" : "dev/" + name);
    }
    void record(Change::Kind kind, Change::Target target, const std::string& name,
                std::string detail) {
        result.changes.push_back({kind, target, name, std::move(detail)});
    }
    void fail(Change::Target target, const std::string& name, Diagnostic problem) {
        record(Change::Kind::Failed, target, name, problem.message);
        problem.severity = Severity::Error;
        if (problem.where.device.empty()) {
            problem.where.device = shown(name);
        }
        diagnostics_.add(std::move(problem));
    }
    // The directory of `name`, or a failure already recorded (nullopt).
    std::optional<const SafeDir*> dir_of(Change::Target target, const std::string& name,
                                         std::string* leaf) {
        auto dir = dirs_.dir_for(name, leaf);
        if (!dir) {
            Diagnostic problem = dir.error();
            if (problem.message.ends_with("(its first error says why)")) {
                problem.message = shown(name) + " skipped: " + problem.message;
            }
            fail(target, name, std::move(problem));
            return std::nullopt;
        }
        return *dir;
    }

    const Sysroot& root_;
    bool dry_run_;
    Diagnostics& diagnostics_;
    DevDirs dirs_;
};

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

// format_mode() without vsnprintf: four octal digits.
void append_mode(std::string& out, unsigned mode) {
    for (int shift = 9; shift >= 0; shift -= 3) {
        out += static_cast<char>('0' + ((mode >> shift) & 7));
    }
}

// "c 195:0 root:nvidia0 0660", as format("c %u:%u %s:%s %s") with
// format_mode() wrote it; built by hand, as it is made for every node of
// every run.
std::string describe_node(const NodeSpec& node) {
    std::string out = "c ";
    out += std::to_string(node.major);
    out += ':';
    out += std::to_string(node.minor);
    out += ' ';
    out += node.owner;
    out += ':';
    out += node.group;
    out += ' ';
    append_mode(out, node.mode & kPermissionBits);
    return out;
}

// "owner 1000 -> root(0), mode 0666 -> 0660, ACL removed"
std::string repair_detail(const struct stat& st, bool acl, uid_t uid, const std::string& owner,
                          gid_t gid, const std::string& group, unsigned mode) {
    std::string detail;
    auto add = [&detail](const std::string& part) {
        detail += detail.empty() ? part : ", " + part;
    };
    if (st.st_uid != uid) {
        add(format("owner %u -> %s(%u)", st.st_uid, owner.c_str(), uid));
    }
    if (st.st_gid != gid) {
        add(format("group %u -> %s(%u)", st.st_gid, group.c_str(), gid));
    }
    if ((st.st_mode & kPermissionBits) != mode) {
        add("mode " + format_mode(st.st_mode & kPermissionBits) + " -> " + format_mode(mode));
    }
    if (acl) {
        add("ACL removed");
    }
    return detail;
}

// The steps that change an owner, mode and ACL in place without granting
// anyone more than the old or the new state did at any moment: narrow the
// mode (with an ACL, to no group-class bits, which zeroes the ACL's mask),
// remove the ACL, change the owner, set the final mode.
template <typename Chmod, typename RemoveAcl, typename Chown>
Status change_in_place(unsigned current, bool acl, bool owner_differs, unsigned target, Chmod chmod,
                       RemoveAcl remove_acl, Chown chown) {
    unsigned narrow = current & target & (acl ? ~070u : ~0u);
    if ((acl || owner_differs) && narrow != current) {
        if (auto status = chmod(narrow); !status) {
            return status;
        }
        current = narrow;
    }
    if (acl) {
        if (auto status = remove_acl(); !status) {
            return status;
        }
    }
    if (owner_differs) {
        if (auto status = chown(); !status) {
            return status;
        }
    }
    if (current != target) {
        return chmod(target);
    }
    return {};
}

void Reconciler::directory(const DirSpec& spec) {
    auto opened = dirs_.get(spec.name);
    if (!opened) {
        fail(Change::Target::Directory, spec.name, opened.error());
        return;
    }
    std::string wanted =
        "directory " + std::to_string(spec.uid) + ":" + std::to_string(spec.gid) + " ";
    append_mode(wanted, spec.mode & kPermissionBits);
    if (opened->dir == nullptr) { // a dry run, and it is not there yet
        record(Change::Kind::Create, Change::Target::Directory, spec.name, wanted);
        return;
    }
    const SafeDir& dir = *opened->dir;
    auto st = dir.stat_self();
    auto acl = st ? dir.acl_self() : Result<AclState>(st.error());
    if (!st || !acl) {
        fail(Change::Target::Directory, spec.name, st ? acl.error() : st.error());
        return;
    }
    bool owner_differs = st->st_uid != spec.uid || st->st_gid != spec.gid;
    unsigned current = st->st_mode & kPermissionBits;
    bool differs = owner_differs || current != spec.mode || acl->any();
    if (differs && !dry_run_) {
        Status status = change_in_place(
            current, acl->any(), owner_differs, spec.mode,
            [&](unsigned mode) { return dir.chmod_self(mode); },
            [&] { return dir.remove_acl_self(); },
            [&] { return dir.chown_self(spec.uid, spec.gid); });
        if (!status) {
            fail(Change::Target::Directory, spec.name, status.error());
            return;
        }
    }
    if (opened->created) {
        record(Change::Kind::Create, Change::Target::Directory, spec.name, wanted);
    } else if (differs) {
        record(Change::Kind::Repair, Change::Target::Directory, spec.name,
               repair_detail(*st, acl->any(), spec.uid, "root", spec.gid, "root", spec.mode));
    } else {
        record(Change::Kind::Unchanged, Change::Target::Directory, spec.name, wanted);
    }
}

// A run killed between making a node under its temporary name and the
// rename leaves that node behind, with the rights of its day; later runs
// would never look at it. Under the run lock, nothing else is in flight.
void Reconciler::leftovers(const std::string& sub) {
    auto opened = dirs_.get(sub);
    if (!opened || opened->dir == nullptr) {
        return; // reported by directory()
    }
    const SafeDir& dir = *opened->dir;
    auto names = dir.list();
    if (!names) {
        fail(Change::Target::Directory, sub, names.error());
        return;
    }
    std::sort(names->begin(), names->end());
    for (const std::string& leaf : *names) {
        if (!leaf.starts_with(kTempPrefix)) {
            continue;
        }
        std::string name = sub.empty() ? leaf : sub + "/" + leaf;
        auto state = dir.inspect(leaf);
        if (!state) {
            fail(Change::Target::Leftover, name, state.error());
            continue;
        }
        if (!state->exists) {
            continue;
        }
        if (S_ISDIR(state->st.st_mode)) {
            fail(Change::Target::Leftover, name,
                 error(shown(name) + " is a directory at one of gpuinit's temporary names;"
                                     " remove it and rerun",
                       EISDIR));
            continue;
        }
        if (!dry_run_) {
            if (auto removed = dir.unlink(leaf); !removed) {
                fail(Change::Target::Leftover, name, removed.error());
                continue;
            }
        }
        record(Change::Kind::Remove, Change::Target::Leftover, name,
               format("left by an interrupted run: %s %u:%u %s", describe_type(state->st).c_str(),
                      state->st.st_uid, state->st.st_gid,
                      format_mode(state->st.st_mode & kPermissionBits).c_str()));
    }
}

bool Reconciler::node(const NodeSpec& spec) {
    std::string leaf;
    auto dir = dir_of(Change::Target::Node, spec.name, &leaf);
    if (!dir) {
        return false;
    }
    EntryState state;
    if (*dir != nullptr) {
        auto inspected = (*dir)->inspect(leaf);
        if (!inspected) {
            fail(Change::Target::Node, spec.name, inspected.error());
            return false;
        }
        state = std::move(*inspected);
    }
    const struct stat& st = state.st;
    Change::Kind kind = Change::Kind::Unchanged;
    std::string detail = describe_node(spec);
    AclState acl;
    if (!state.exists) {
        kind = Change::Kind::Create;
    } else if (S_ISDIR(st.st_mode)) {
        fail(Change::Target::Node, spec.name,
             error(shown(spec.name) + " is a directory; move it away and rerun", EISDIR));
        return false;
    } else if (!S_ISCHR(st.st_mode) || st.st_rdev != makedev(spec.major, spec.minor)) {
        kind = Change::Kind::Replace;
        detail = "was " + describe_type(st) + ", now " + describe_node(spec);
    } else {
        auto read_acl = (*dir)->acl(leaf);
        if (!read_acl) {
            fail(Change::Target::Node, spec.name, read_acl.error());
            return false;
        }
        acl = *read_acl;
        bool differs = st.st_uid != spec.uid || st.st_gid != spec.gid ||
                       (st.st_mode & kPermissionBits) != spec.mode || acl.any();
        if (!differs) {
            record(kind, Change::Target::Node, spec.name, detail);
            return true;
        }
        detail =
            repair_detail(st, acl.any(), spec.uid, spec.owner, spec.gid, spec.group, spec.mode);
        // With other hard links, an in-place change would reach names
        // outside /dev: a new inode takes the name instead.
        if (st.st_nlink > 1) {
            kind = Change::Kind::Replace;
            detail +=
                format(" (it had %u hard links: replaced, not changed in place, so the"
                       " other names keep inode %lu and its old access; find them with"
                       " find / -xdev -inum %lu)",
                       static_cast<unsigned>(st.st_nlink), static_cast<unsigned long>(st.st_ino),
                       static_cast<unsigned long>(st.st_ino));
        } else {
            kind = Change::Kind::Repair;
        }
    }
    if (state.mount_point) {
        fail(Change::Target::Node, spec.name,
             error(shown(spec.name) +
                       " has something mounted on it (a bind mount); changing it"
                       " would change the file mounted there: umount " +
                       shown(spec.name) + " and rerun",
                   EBUSY));
        return false;
    }
    if (!dry_run_) {
        const SafeDir& d = **dir;
        Status status;
        if (kind == Change::Kind::Repair) {
            status = change_in_place(
                st.st_mode & kPermissionBits, acl.access,
                st.st_uid != spec.uid || st.st_gid != spec.gid, spec.mode,
                [&](unsigned mode) { return d.chmod(leaf, mode); },
                [&] { return d.remove_acl(leaf); },
                [&] { return d.chown(leaf, spec.uid, spec.gid); });
        } else {
            // Made with mode 0 and without the ACL a default ACL of the
            // directory would give it, then owned, then opened up; a wrong
            // node is replaced by a rename, so the name never shows a node
            // with the wrong rights.
            bool replace = kind == Change::Kind::Replace;
            std::string temp = replace ? temp_name(leaf) : leaf;
            status = d.make_char_node(temp, spec.major, spec.minor);
            if (status) {
                if (!(status = d.remove_acl(temp)) ||
                    !(status = d.chown(temp, spec.uid, spec.gid)) ||
                    !(status = d.chmod(temp, spec.mode)) ||
                    (replace && !(status = d.rename(temp, leaf)))) {
                    ::unlinkat(d.fd(), temp.c_str(), 0); // never leave a half-made node
                }
            }
        }
        if (!status) {
            fail(Change::Target::Node, spec.name, status.error());
            return false;
        }
    }
    record(kind, Change::Target::Node, spec.name, detail);
    return true;
}

void Reconciler::link(const LinkSpec& spec) {
    std::string leaf;
    auto dir = dir_of(Change::Target::Link, spec.name, &leaf);
    if (!dir) {
        return;
    }
    EntryState state;
    bool inspect = *dir != nullptr;
    if (inspect) {
        // The common cases in one call: the right link (nothing to do) or
        // none at all; anything else is looked at in full.
        char target[4096];
        ssize_t n = ::readlinkat((*dir)->fd(), leaf.c_str(), target, sizeof target - 1);
        if (n >= 0 && std::string_view(target, static_cast<size_t>(n)) == spec.target) {
            record(Change::Kind::Unchanged, Change::Target::Link, spec.name, "-> " + spec.target);
            return;
        }
        inspect = n >= 0 || errno != ENOENT;
    }
    if (inspect) {
        auto inspected = (*dir)->inspect(leaf);
        if (!inspected) {
            fail(Change::Target::Link, spec.name, inspected.error());
            return;
        }
        state = std::move(*inspected);
    }
    Change::Kind kind = Change::Kind::Unchanged;
    std::string detail = "-> " + spec.target;
    if (!state.exists) {
        kind = Change::Kind::Create;
    } else if (S_ISDIR(state.st.st_mode)) {
        fail(Change::Target::Link, spec.name,
             error(shown(spec.name) + " is a directory; move it away and rerun", EISDIR));
        return;
    } else if (!S_ISLNK(state.st.st_mode) || state.link_target != spec.target) {
        kind = Change::Kind::Replace;
        detail = "was " +
                 (S_ISLNK(state.st.st_mode) ? "-> " + state.link_target : describe_type(state.st)) +
                 ", now -> " + spec.target;
    } else {
        record(kind, Change::Target::Link, spec.name, detail);
        return;
    }
    if (!dry_run_) {
        // symlinkat() is atomic for a missing name; a wrong entry is
        // replaced by a rename over it.
        const SafeDir& d = **dir;
        bool replace = kind == Change::Kind::Replace;
        std::string temp = replace ? temp_name(leaf) : leaf;
        Status status = d.symlink(spec.target, temp);
        if (status && replace && !(status = d.rename(temp, leaf))) {
            ::unlinkat(d.fd(), temp.c_str(), 0);
        }
        if (!status) {
            fail(Change::Target::Link, spec.name, status.error());
            return;
        }
    }
    record(kind, Change::Target::Link, spec.name, detail);
}

void Reconciler::remove_if_ours(const std::string& name, bool is_link, const std::string& node_name,
                                dev_t rdev) {
    Change::Target target = is_link ? Change::Target::Link : Change::Target::Node;
    std::string leaf;
    auto dir = dir_of(target, name, &leaf);
    if (!dir || *dir == nullptr) {
        return;
    }
    auto state = (*dir)->inspect(leaf);
    if (!state) {
        fail(target, name, state.error());
        return;
    }
    if (!state->exists) {
        return;
    }
    const struct stat& st = state->st;
    bool ours = is_link ? S_ISLNK(st.st_mode) && state->link_target == "../" + node_name
                        : S_ISCHR(st.st_mode) && st.st_rdev == rdev;
    if (!ours) {
        record(Change::Kind::Unchanged, target, name,
               "is " + describe_type(st) + ", not ours; left alone");
        return;
    }
    if (!dry_run_) {
        if (auto removed = (*dir)->unlink(leaf); !removed) {
            fail(target, name, removed.error());
            return;
        }
    }
    record(Change::Kind::Remove, target, name,
           is_link ? "-> " + state->link_target : describe_type(st));
}

void Reconciler::prune(const PruneSpec& spec, const NodePlan& plan) {
    auto opened = dirs_.get(spec.dir);
    if (!opened || opened->dir == nullptr) {
        return; // reported by directory(), or a dry run on a missing one
    }
    auto names = opened->dir->list();
    if (!names) {
        fail(Change::Target::Directory, spec.dir, names.error());
        return;
    }
    for (const std::string& leaf : *names) {
        if (leaf.size() <= spec.prefix.size() || !leaf.starts_with(spec.prefix)) {
            continue;
        }
        std::string_view digits = std::string_view(leaf).substr(spec.prefix.size());
        auto minor = parse_decimal(digits, (1u << 20) - 1);
        std::string name = spec.dir + "/" + leaf;
        if (!minor || std::to_string(*minor) != digits) {
            continue;
        }
        bool planned = std::any_of(plan.nodes.begin(), plan.nodes.end(),
                                   [&](const NodeSpec& node) { return node.name == name; });
        if (planned) {
            continue;
        }
        auto unsigned_minor = static_cast<unsigned>(*minor);
        remove_if_ours(name, false, name, makedev(spec.major, unsigned_minor));
        remove_if_ours(char_link_name(spec.major, unsigned_minor), true, name, 0);
    }
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
    return static_cast<size_t>(std::count_if(changes.begin(), changes.end(),
                                             [&](const Change& c) { return c.kind == kind; }));
}

ReconcileResult reconcile(const Sysroot& root, const NodePlan& plan, bool dry_run,
                          Diagnostics& diagnostics) {
    Reconciler reconciler(root, dry_run, true, diagnostics);
    // One change per entry, sized once (as in plan_nodes); leftovers add more.
    reconciler.result.changes.reserve(plan.dirs.size() + plan.nodes.size() + plan.links.size());
    for (const DirSpec& dir : plan.dirs) {
        reconciler.directory(dir);
    }
    for (const DirSpec& dir : plan.dirs) {
        reconciler.leftovers(dir.name);
    }
    std::vector<std::string> failed_nodes;
    for (const NodeSpec& node : plan.nodes) {
        if (!reconciler.node(node)) {
            failed_nodes.push_back("../" + node.name);
        }
    }
    for (const LinkSpec& link : plan.links) {
        // A link to a node that could not be made would only dangle.
        if (std::find(failed_nodes.begin(), failed_nodes.end(), link.target) ==
            failed_nodes.end()) {
            reconciler.link(link);
        }
    }
    for (const PruneSpec& spec : plan.prune) {
        reconciler.prune(spec, plan);
    }
    return std::move(reconciler.result);
}

ReconcileResult remove_gpu_nodes(const Sysroot& root, unsigned major, unsigned minor, bool dry_run,
                                 Diagnostics& diagnostics) {
    Reconciler reconciler(root, dry_run, false, diagnostics);
    std::string node_name = gpu_node_name(minor);
    reconciler.remove_if_ours(node_name, false, node_name, makedev(major, minor));
    reconciler.remove_if_ours(char_link_name(major, minor), true, node_name, 0);
    return std::move(reconciler.result);
}

} // namespace gpuinit
