#include "gpuinit/fs/sysroot.hpp"

#include "gpuinit/base/text.hpp"

#include <algorithm>
#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit {

namespace {

std::string_view strip_slashes(std::string_view rel) {
    while (!rel.empty() && rel.front() == '/') {
        rel.remove_prefix(1);
    }
    while (!rel.empty() && rel.back() == '/') {
        rel.remove_suffix(1);
    }
    return rel;
}

// Closes a DIR* exactly once, on every return path.
struct DirCloser {
    void operator()(DIR* dir) const { ::closedir(dir); }
};

} // namespace

Result<Sysroot> Sysroot::open(std::string_view root) {
    std::string normalized(root.empty() ? "/" : root);
    while (normalized.size() > 1 && normalized.back() == '/') {
        normalized.pop_back();
    }
    struct stat st {};
    if (::stat(normalized.c_str(), &st) != 0) {
        return errno_error("root " + normalized);
    }
    if (!S_ISDIR(st.st_mode)) {
        return Error{ENOTDIR, "root " + normalized + " is not a directory"};
    }
    return Sysroot(std::move(normalized));
}

std::string Sysroot::path(std::string_view rel) const {
    rel = strip_slashes(rel);
    std::string out = root_;
    if (out != "/") {
        out += '/';
    }
    out += rel;
    return out;
}

std::string Sysroot::display(std::string_view rel) const {
    if (is_host()) {
        return "/" + std::string(strip_slashes(rel));
    }
    return path(rel);
}

Result<std::string> Sysroot::read_file(std::string_view rel, size_t max_bytes) const {
    std::string full = path(rel);
    UniqueFd fd(::open(full.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
    if (!fd.valid()) {
        return errno_error("cannot open " + display(rel));
    }
    std::string data;
    char buffer[8192];
    for (;;) {
        ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno_error("cannot read " + display(rel));
        }
        if (n == 0) {
            break;
        }
        data.append(buffer, static_cast<size_t>(n));
        if (data.size() > max_bytes) {
            return Error{EFBIG, format("%s is larger than %zu bytes; refusing to parse it",
                                       display(rel).c_str(), max_bytes)};
        }
    }
    return data;
}

bool Sysroot::exists(std::string_view rel) const {
    return ::access(path(rel).c_str(), F_OK) == 0;
}

Result<std::vector<std::string>> Sysroot::list_dir(std::string_view rel) const {
    std::string full = path(rel);
    std::unique_ptr<DIR, DirCloser> dir(::opendir(full.c_str()));
    if (!dir) {
        return errno_error("cannot list " + display(rel));
    }
    std::vector<std::string> names;
    for (;;) {
        errno = 0;
        struct dirent* entry = ::readdir(dir.get());
        if (entry == nullptr) {
            if (errno != 0) {
                return errno_error("cannot list " + display(rel));
            }
            break;
        }
        std::string_view name(entry->d_name);
        if (name == "." || name == "..") {
            continue;
        }
        names.emplace_back(name);
    }
    std::sort(names.begin(), names.end());
    return names;
}

Result<UniqueFd> Sysroot::open_dir_nofollow(std::string_view rel, bool create, mode_t mode) const {
    // The root itself is the admin's choice and trusted; everything below it
    // is walked without following links.
    UniqueFd dir(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid()) {
        return errno_error("cannot open root " + root_);
    }
    rel = strip_slashes(rel);
    std::string walked;
    while (!rel.empty()) {
        size_t slash = rel.find('/');
        std::string component(rel.substr(0, slash));
        rel = slash == std::string_view::npos ? std::string_view() : rel.substr(slash + 1);
        walked += '/';
        walked += component;
        if (component.empty() || component == "." || component == "..") {
            return Error{EINVAL, "refusing path component '" + component + "' in " + walked};
        }
        int fd =
            ::openat(dir.get(), component.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && create) {
            if (::mkdirat(dir.get(), component.c_str(), mode) != 0 && errno != EEXIST) {
                return errno_error("cannot create directory " + display(walked));
            }
            fd = ::openat(dir.get(), component.c_str(),
                          O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (fd < 0) {
            if (errno == ELOOP || errno == ENOTDIR) {
                return Error{errno, display(walked) +
                                        " is a symlink or not a directory; refusing to follow it"
                                        " (remove it and rerun)"};
            }
            return errno_error("cannot open directory " + display(walked));
        }
        dir.reset(fd);
    }
    return dir;
}

} // namespace gpuinit
