// Tool side (see oci_host.hpp): uses the standard library, so it must never
// be reached from libgpulimit.so (tests/limiter/abi checks).
#include "gpuinit/limit/oci_host.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit::limit::oci {

namespace {

// Deeper than anything the library makes (a directory and one file); a
// container that nests more has its leftovers reported, not followed.
constexpr int kMaxRemoveDepth = 16;

Result<SafeDir> open_state_root(const std::string& state_root, bool create) {
    if (state_root.size() < 2 || state_root[0] != '/') {
        return error("the state root " + quote(state_root) + " is not an absolute path");
    }
    auto root = Sysroot::open("/");
    if (!root) {
        return root.error();
    }
    auto dir = SafeDir::open(*root, std::string_view(state_root).substr(1),
                             create ? std::optional<mode_t>(0755) : std::nullopt);
    if (!dir) {
        return dir.error();
    }
    auto status = dir->stat_self();
    if (!status) {
        return status.error();
    }
    if ((status->st_uid != 0 && status->st_uid != ::geteuid()) || (status->st_mode & 022) != 0) {
        return error(state_root + " is owned by uid " + std::to_string(status->st_uid) +
                     " or writable by others (mode " + format_mode(status->st_mode & 07777) +
                     "): refusing to keep containers' state there; make it root's, mode 0755");
    }
    return std::move(dir).value();
}

Result<std::string> read_small(int dir_fd, const char* name) {
    UniqueFd fd(::openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd.valid()) {
        return errno_error(std::string("cannot open ") + name);
    }
    char buffer[4096];
    ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got < 0) {
        return errno_error(std::string("cannot read ") + name);
    }
    return std::string(buffer, static_cast<size_t>(got));
}

// Empties the directory `fd` (depth levels below the group's).
Status remove_contents(int fd, const std::string& path, int depth) {
    if (depth > kMaxRemoveDepth) {
        return error(path + " is nested too deep to remove: left in place");
    }
    int listing = ::dup(fd);
    if (listing < 0) {
        return errno_error("cannot list " + path);
    }
    DIR* dir = ::fdopendir(listing);
    if (dir == nullptr) {
        int saved = errno;
        ::close(listing);
        return os_error(saved, "cannot list " + path);
    }
    std::vector<std::string> names;
    while (dirent* entry = ::readdir(dir)) {
        std::string_view name = entry->d_name;
        if (name != "." && name != "..") {
            names.emplace_back(name);
        }
    }
    ::closedir(dir);
    for (const std::string& name : names) {
        struct stat status {};
        if (::fstatat(fd, name.c_str(), &status, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) {
                continue;
            }
            return errno_error("cannot inspect " + path + "/" + name);
        }
        if (S_ISDIR(status.st_mode)) {
            UniqueFd child(
                ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
            if (!child.valid()) {
                return errno_error("cannot open " + path + "/" + name);
            }
            if (auto emptied = remove_contents(child.get(), path + "/" + name, depth + 1);
                !emptied) {
                return emptied;
            }
            if (::unlinkat(fd, name.c_str(), AT_REMOVEDIR) != 0) {
                return errno_error("cannot remove " + path + "/" + name);
            }
        } else if (::unlinkat(fd, name.c_str(), 0) != 0 && errno != ENOENT) {
            return errno_error("cannot remove " + path + "/" + name);
        }
    }
    return {};
}

} // namespace

Status prepare_host(const std::string& state_root, const std::string& group, HostOwner owner) {
    if (!valid_group_name(group)) {
        return error("the group " + quote(group) +
                     " is not a group name ([A-Za-z0-9._-], 1 to 64 characters)");
    }
    auto root = open_state_root(state_root, true);
    if (!root) {
        return root.error();
    }
    const std::string preload = std::string(kContainerLibrary) + "\n";
    auto current = read_small(root->fd(), kPreloadFile);
    if (!current || *current != preload) {
        if (auto written = root->write_atomic(kPreloadFile, preload, 0644); !written) {
            return written;
        }
    }
    // Made here, for this container, or not at all: an existing directory
    // is another container's (a second config naming its group) or a
    // leftover of this id, and handing it to this container's owner would
    // give it the other's state and processes. Mode 0 until it has its
    // owner: never wider, not even for a moment.
    const std::string path = root->path_of(group);
    if (::mkdirat(root->fd(), group.c_str(), 0) != 0) {
        int saved = errno;
        if (saved == EEXIST) {
            Diagnostic taken = error("the group " + path +
                                         " exists (another container has it, or one of this id "
                                         "left it): not handed over, nothing mounted; if no "
                                         "container of that id runs, remove it",
                                     saved);
            taken.where.group = group;
            return taken;
        }
        return os_error(saved, "cannot make " + path);
    }
    UniqueFd dir(
        ::openat(root->fd(), group.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    Status made;
    if (!dir.valid()) {
        made = errno_error("cannot open " + path + ", just made");
    } else if (::fchown(dir.get(), owner.uid, owner.gid) != 0) {
        made = errno_error("cannot give " + path + " to " + std::to_string(owner.uid) + ":" +
                           std::to_string(owner.gid));
    } else if (::fchmod(dir.get(), 0700) != 0) {
        made = errno_error("cannot chmod " + path);
    }
    if (!made) {
        // Not left behind: it would refuse this container's next try.
        ::unlinkat(root->fd(), group.c_str(), AT_REMOVEDIR);
    }
    return made;
}

bool daemon_socket_present(const std::string& state_root) {
    struct stat status {};
    std::string path = state_root + "/" + kDaemonSocket;
    return ::lstat(path.c_str(), &status) == 0 && S_ISSOCK(status.st_mode);
}

Result<std::string> random_group_name() {
    unsigned char bytes[16];
    size_t have = 0;
    while (have < sizeof bytes) {
        ssize_t got = ::getrandom(bytes + have, sizeof bytes - have, 0);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno_error("getrandom");
        }
        have += static_cast<size_t>(got);
    }
    static constexpr char kHex[] = "0123456789abcdef";
    std::string name = kRandomGroupPrefix;
    for (unsigned char byte : bytes) {
        name += kHex[byte >> 4];
        name += kHex[byte & 0xF];
    }
    return name;
}

Result<Cleanup> remove_group(const std::string& state_root, const std::string& group) {
    if (!valid_group_name(group)) {
        return error("the group " + quote(group) +
                     " is not a group name ([A-Za-z0-9._-], 1 to 64 characters)");
    }
    auto root = open_state_root(state_root, false);
    if (!root) {
        if (root.error().code == ENOENT) {
            return Cleanup::Absent;
        }
        return root.error();
    }
    const std::string path = root->path_of(group);
    UniqueFd dir(
        ::openat(root->fd(), group.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) {
        int saved = errno;
        if (saved == ENOENT) {
            return Cleanup::Absent;
        }
        if (saved == ELOOP || saved == ENOTDIR) {
            return error(path + " is not a directory (a symlink?): left alone; remove it by hand");
        }
        return os_error(saved, "cannot open " + path);
    }
    UniqueFd state(::openat(dir.get(), "state", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (state.valid()) {
        struct stat status {};
        if (::fstat(state.get(), &status) == 0 && S_ISREG(status.st_mode)) {
            struct flock probe {};
            probe.l_type = F_WRLCK;
            probe.l_whence = SEEK_SET;
            probe.l_start = 0;
            probe.l_len = 0; // the whole file: every slot's lock byte
            if (::fcntl(state.get(), F_OFD_GETLK, &probe) != 0) {
                return errno_error("cannot probe the locks of " + path + "/state");
            }
            if (probe.l_type != F_UNLCK) {
                return Cleanup::InUse;
            }
        }
    }
    state.reset();
    if (auto emptied = remove_contents(dir.get(), path, 1); !emptied) {
        return emptied.error();
    }
    if (::unlinkat(root->fd(), group.c_str(), AT_REMOVEDIR) != 0) {
        int saved = errno;
        if (saved == ENOTEMPTY || saved == EEXIST) {
            return Cleanup::InUse; // something of the group wrote there meanwhile
        }
        return os_error(saved, "cannot remove " + path);
    }
    return Cleanup::Removed;
}

} // namespace gpuinit::limit::oci
