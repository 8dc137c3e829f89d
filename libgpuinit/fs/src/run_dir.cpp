#include "gpuinit/fs/run_dir.hpp"

#include "gpuinit/base/text.hpp"

#include <cerrno>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace gpuinit {

namespace {

bool valid_name(std::string_view name) {
    return !name.empty() && name.find('/') == std::string_view::npos && name != "." &&
           name != ".." && !name.starts_with(kTempPrefix);
}

Diagnostic bad_name(std::string_view name) {
    return error("invalid run/gpuinit name " + quote(name), EINVAL);
}

} // namespace

Result<RunDir> RunDir::open(const Sysroot& root, bool create) {
    auto dir = SafeDir::open(root, kRunDir, create ? std::optional<mode_t>(0755) : std::nullopt);
    if (!dir) {
        return dir.error();
    }
    auto st = dir->stat_self();
    if (!st) {
        return st.error();
    }
    // Root's, or this user's (a test or a copy of a machine); never one that
    // others can write.
    bool trusted_owner = st->st_uid == 0 || st->st_uid == ::geteuid();
    if (!trusted_owner || (st->st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return error(format("%s is owned by uid %u with mode %s: whoever can write it can block"
                            " or fake gpuinit's runs; chown %u and chmod 0755 it (or remove"
                            " it) and rerun",
                            dir->path().c_str(), st->st_uid,
                            format_mode(st->st_mode & 07777).c_str(), ::geteuid()),
                     EPERM);
    }
    return RunDir(std::move(*dir));
}

Result<UniqueFd> RunDir::open_lock_file(std::string_view name) const {
    std::string leaf(name);
    for (int attempt = 0; attempt < 2; ++attempt) {
        int flags = O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
        UniqueFd fd(::openat(dir_.fd(), leaf.c_str(), attempt == 0 ? flags : flags | O_EXCL, 0600));
        if (!fd.valid()) {
            return errno_error("cannot open lock " + display(name));
        }
        struct stat st {};
        if (::fstat(fd.get(), &st) != 0) {
            return errno_error("cannot stat lock " + display(name));
        }
        // Anyone who can open the file can flock it and block every run.
        if (S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 077) == 0 &&
            st.st_nlink == 1) {
            return fd;
        }
        // A fresh inode: fds others opened on the old one lock nothing.
        if (auto removed = dir_.unlink(leaf); !removed) {
            return removed.error();
        }
    }
    return error("cannot make a root-only lock " + display(name), EEXIST);
}

Result<UniqueFd> RunDir::lock(std::string_view name, std::chrono::milliseconds wait) const {
    if (!valid_name(name)) {
        return bad_name(name);
    }
    auto fd = open_lock_file(name);
    if (!fd) {
        return fd;
    }
    // flock() has no timeout: poll with a growing pause, up to `wait`.
    auto deadline = std::chrono::steady_clock::now() + wait;
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
        if (::flock(fd->get(), LOCK_EX | LOCK_NB) == 0) {
            return fd;
        }
        if (errno != EWOULDBLOCK && errno != EINTR) {
            return errno_error("cannot lock " + display(name));
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            return error(format("%s is still held by another run after %lld s; find it with"
                                " 'fuser -v %s' (a hung gpu-mknod?) and rerun",
                                display(name).c_str(), static_cast<long long>(wait.count() / 1000),
                                display(name).c_str()),
                         ETIMEDOUT);
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(100));
    }
}

Result<UniqueFd> RunDir::try_lock(std::string_view name) const {
    if (!valid_name(name)) {
        return bad_name(name);
    }
    auto fd = open_lock_file(name);
    if (!fd) {
        return fd;
    }
    while (::flock(fd->get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            return error(display(name) + " is held by another process", EWOULDBLOCK);
        }
        if (errno != EINTR) {
            return errno_error("cannot lock " + display(name));
        }
    }
    return fd;
}

Result<UniqueFd> RunDir::take_lease(std::string_view name, std::string_view holder) const {
    auto fd = try_lock(name);
    if (!fd) {
        return fd;
    }
    std::string text(holder);
    text += '\n';
    if (::ftruncate(fd->get(), 0) != 0 ||
        ::pwrite(fd->get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
        return errno_error("cannot write lease " + display(name));
    }
    return fd;
}

Result<std::optional<std::string>> RunDir::lease_holder(std::string_view name) const {
    auto probe = try_lock(name);
    if (probe) {
        return std::optional<std::string>(); // nobody holds it; closing releases it
    }
    if (probe.error().code != EWOULDBLOCK) {
        return probe.error();
    }
    auto text = read_record(name, 4096);
    if (!text) {
        return text.error();
    }
    return std::optional<std::string>(text->has_value() ? std::string(trim(**text)) : "");
}

Result<std::optional<std::string>> RunDir::read_record(std::string_view name,
                                                       size_t max_bytes) const {
    if (!valid_name(name)) {
        return bad_name(name);
    }
    std::string leaf(name);
    UniqueFd fd(::openat(dir_.fd(), leaf.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd.valid()) {
        if (errno == ENOENT) {
            return std::optional<std::string>();
        }
        return errno_error("cannot open " + display(name));
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        return errno_error("cannot stat " + display(name));
    }
    if (!S_ISREG(st.st_mode)) {
        return error(display(name) + " is not a regular file; refusing to read it (remove it)",
                     EINVAL);
    }
    auto data = read_all(fd.get(), max_bytes, display(name));
    if (!data) {
        return data.error();
    }
    return std::optional<std::string>(std::move(*data));
}

Status RunDir::write_record(std::string_view name, std::string_view text) const {
    if (!valid_name(name)) {
        return bad_name(name);
    }
    return dir_.write_atomic(std::string(name), text, 0644);
}

} // namespace gpuinit
