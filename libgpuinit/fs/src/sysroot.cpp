#include "gpuinit/fs/sysroot.hpp"

#include "gpuinit/base/text.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace gpuinit {

namespace {

// openat2(2) appeared in Linux 5.6; seccomp filters that predate it answer
// EPERM. Once seen, lookups use openat() relative to the root fd, which
// follows an absolute symlink out of the root (documented in
// docs/architecture.md).
std::atomic<bool> g_openat2_missing{false};

int open_in_root(int root_fd, const char* rel, int flags) {
    if (!g_openat2_missing.load(std::memory_order_relaxed)) {
        struct open_how how {};
        how.flags = static_cast<uint64_t>(flags);
        how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
        int fd = static_cast<int>(::syscall(SYS_openat2, root_fd, rel, &how, sizeof how));
        if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) {
            return fd;
        }
        g_openat2_missing.store(true, std::memory_order_relaxed);
    }
    return ::openat(root_fd, rel, flags);
}

} // namespace

std::string_view strip_slashes(std::string_view rel) {
    while (!rel.empty() && rel.front() == '/') {
        rel.remove_prefix(1);
    }
    while (!rel.empty() && rel.back() == '/') {
        rel.remove_suffix(1);
    }
    return rel;
}

Result<Sysroot> Sysroot::open(std::string_view root) {
    if (root.empty()) {
        return error("the root is empty; give a directory (--root /, or the copy of a machine)",
                     EINVAL);
    }
    std::string normalized(root);
    while (normalized.size() > 1 && normalized.back() == '/') {
        normalized.pop_back();
    }
    UniqueFd fd(::open(normalized.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) {
        if (errno == ENOTDIR) {
            return error("root " + normalized + " is not a directory", ENOTDIR);
        }
        return errno_error("root " + normalized);
    }
    struct stat st {};
    struct stat host {};
    if (::fstat(fd.get(), &st) != 0 || ::stat("/", &host) != 0) {
        return errno_error("cannot stat root " + normalized);
    }
    bool is_host = st.st_dev == host.st_dev && st.st_ino == host.st_ino;
    return Sysroot(std::move(fd), is_host ? std::string("/") : std::move(normalized), is_host);
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
    return path(rel);
}

Result<UniqueFd> Sysroot::resolve(std::string_view rel, int flags) const {
    std::string relative(strip_slashes(rel));
    if (relative.empty()) {
        relative = ".";
    }
    // openat2() refuses O_PATH with anything but O_DIRECTORY, O_NOFOLLOW
    // and O_CLOEXEC.
    flags |= O_CLOEXEC | ((flags & O_PATH) != 0 ? 0 : O_NOCTTY);
    UniqueFd fd(open_in_root(fd_.get(), relative.c_str(), flags));
    if (!fd.valid()) {
        return errno_error("cannot open " + display(rel));
    }
    return fd;
}

namespace {

// Why a non-regular file (by open_file()'s fstat) is refused.
Diagnostic not_regular(const struct stat& st, const std::string& shown) {
    return error(shown + " is not a regular file (" +
                     (S_ISFIFO(st.st_mode)   ? "a FIFO"
                      : S_ISDIR(st.st_mode)  ? "a directory"
                      : S_ISSOCK(st.st_mode) ? "a socket"
                                             : "a device") +
                     "); refusing to read it (replace it with the real file)",
                 EINVAL);
}

// Whether `total` bytes read are all of a file of that fstat() size, so the
// read that would return 0 can be left out: a regular file on disk or tmpfs
// has its size; procfs says 0 and sysfs says 4096, the most an attribute
// holds, so those are read to the end as before.
bool have_whole(const struct stat& st, size_t total) {
    return st.st_size > 0 && total >= static_cast<size_t>(st.st_size);
}

} // namespace

Result<UniqueFd> Sysroot::open_regular(std::string_view rel, struct stat& st) const {
    auto fd = resolve(rel, O_RDONLY | O_NONBLOCK);
    if (!fd) {
        return fd;
    }
    if (::fstat(fd->get(), &st) != 0) {
        return errno_error("cannot stat " + display(rel));
    }
    if (!S_ISREG(st.st_mode)) {
        return not_regular(st, display(rel));
    }
    return fd;
}

Result<UniqueFd> Sysroot::open_file_for_write(std::string_view rel) const {
    auto path = resolve(rel, O_PATH);
    if (!path) {
        return path;
    }
    struct stat st {};
    if (::fstat(path->get(), &st) != 0) {
        return errno_error("cannot stat " + display(rel));
    }
    if (!S_ISREG(st.st_mode)) {
        return not_regular(st, display(rel));
    }
    std::string reopen = "/proc/self/fd/" + std::to_string(path->get());
    UniqueFd fd(::open(reopen.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (!fd.valid()) {
        return errno_error("cannot open " + display(rel) + " for writing");
    }
    return fd;
}

Result<UniqueFd> Sysroot::open_file(std::string_view rel) const {
    struct stat st {};
    return open_regular(rel, st);
}

Result<size_t> read_some(int fd, char* buffer, size_t size, const std::string& shown) {
    for (;;) {
        ssize_t n = ::read(fd, buffer, size);
        if (n >= 0) {
            return static_cast<size_t>(n);
        }
        if (errno != EINTR) {
            return errno_error("cannot read " + shown);
        }
    }
}

Result<std::string> read_all(int fd, size_t max_bytes, const std::string& shown) {
    std::string data;
    char buffer[4096]; // one page, as in Sysroot::read_file()
    for (;;) {
        auto n = read_some(fd, buffer, sizeof buffer, shown);
        if (!n) {
            return n.error();
        }
        if (*n == 0) {
            return data;
        }
        data.append(buffer, *n);
        if (data.size() > max_bytes) {
            return error(format("%s is larger than %zu bytes; refusing to parse it", shown.c_str(),
                                max_bytes),
                         EFBIG);
        }
    }
}

Result<std::vector<std::string>> list_names(int dir_fd, const std::string& shown) {
    // getdents64() on the caller's fd itself, from the start: a DIR would
    // need a copy of the fd (readdir closes the one it is given), so an
    // openat, an fstat, two fcntl(), a 32 KiB buffer and a close. Only the
    // fd's offset changes, which the *at() calls do not use.
    if (::lseek(dir_fd, 0, SEEK_SET) != 0) {
        return errno_error("cannot list " + shown);
    }
    std::vector<std::string> names;
    alignas(8) char buffer[4096];
    for (;;) {
        long n = ::syscall(SYS_getdents64, dir_fd, buffer, sizeof buffer);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno_error("cannot list " + shown);
        }
        if (n == 0) {
            return names;
        }
        for (long offset = 0; offset < n;) {
            const auto* entry = reinterpret_cast<const struct dirent64*>(buffer + offset);
            offset += entry->d_reclen;
            std::string_view name(entry->d_name);
            if (name != "." && name != "..") {
                names.emplace_back(name);
            }
        }
    }
}

Result<std::string> Sysroot::read_file(std::string_view rel, size_t max_bytes) const {
    struct stat st {};
    auto fd = open_regular(rel, st);
    if (!fd) {
        return fd.error();
    }
    std::string data;
    // One page: the files read here are a few hundred bytes, and every
    // stack page a deeper buffer reaches is one more page fault per run.
    char buffer[4096];
    while (!have_whole(st, data.size())) {
        auto n = read_some(fd->get(), buffer, sizeof buffer, display(rel));
        if (!n) {
            return n.error();
        }
        if (*n == 0) {
            break;
        }
        data.append(buffer, *n);
        if (data.size() > max_bytes) {
            return error(format("%s is larger than %zu bytes; refusing to parse it",
                                display(rel).c_str(), max_bytes),
                         EFBIG);
        }
    }
    return data;
}

Status Sysroot::for_each_line(std::string_view rel, size_t max_line,
                              const std::function<Status(std::string_view, size_t)>& line) const {
    struct stat st {};
    auto fd = open_regular(rel, st);
    if (!fd) {
        return fd.error();
    }
    std::string pending;
    size_t number = 0;
    size_t total = 0;
    char buffer[4096]; // one page, as in read_file()
    while (!have_whole(st, total)) {
        auto n = read_some(fd->get(), buffer, sizeof buffer, display(rel));
        if (!n) {
            return n.error();
        }
        if (*n == 0) {
            break;
        }
        total += *n;
        pending.append(buffer, *n);
        size_t start = 0;
        for (size_t end = pending.find('\n'); end != std::string::npos;
             end = pending.find('\n', start)) {
            if (end - start > max_line) {
                break; // reported below, with its number
            }
            if (auto status = line(std::string_view(pending).substr(start, end - start), ++number);
                !status) {
                return status;
            }
            start = end + 1;
        }
        pending.erase(0, start);
        if (pending.size() > max_line && pending.find('\n') > max_line) {
            return error(format("%s:%zu: line longer than %zu bytes; refusing to parse it",
                                display(rel).c_str(), number + 1, max_line),
                         EFBIG);
        }
    }
    if (!pending.empty()) {
        return line(pending, ++number);
    }
    return {};
}

Result<bool> Sysroot::exists(std::string_view rel) const {
    auto fd = resolve(rel, O_PATH);
    if (fd) {
        return true;
    }
    if (fd.error().code == ENOENT || fd.error().code == ENOTDIR) {
        return false;
    }
    return fd.error();
}

Result<UniqueFd> Sysroot::open_dir(std::string_view rel) const {
    return resolve(rel, O_RDONLY | O_DIRECTORY);
}

Result<std::vector<std::string>> Sysroot::list_dir(std::string_view rel) const {
    auto fd = open_dir(rel);
    if (!fd) {
        return os_error(fd.error().code, "cannot list " + display(rel));
    }
    auto names = list_names(fd->get(), display(rel));
    if (names) {
        std::sort(names->begin(), names->end());
    }
    return names;
}

} // namespace gpuinit
