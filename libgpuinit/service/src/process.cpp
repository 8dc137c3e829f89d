#include "gpuinit/service/process.hpp"

#include "gpuinit/base/text.hpp"

#include <cerrno>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit::service {

Result<std::optional<unsigned char>> detach(UniqueFd& ready) {
    int pipe[2];
    if (::pipe2(pipe, O_CLOEXEC) != 0) {
        return errno_error("pipe for the readiness of the detached daemon");
    }
    UniqueFd read_end(pipe[0]);
    UniqueFd write_end(pipe[1]);
    pid_t pid = ::fork();
    if (pid < 0) {
        return errno_error("fork");
    }
    if (pid > 0) {
        write_end.reset();
        unsigned char outcome = kNoReadiness;
        ssize_t got = 0;
        do {
            got = ::read(read_end.get(), &outcome, 1);
        } while (got < 0 && errno == EINTR);
        return std::optional<unsigned char>(got == 1 ? outcome : kNoReadiness);
    }
    read_end.reset();
    ready = std::move(write_end);
    ::setsid();
    return std::optional<unsigned char>();
}

void report_ready(UniqueFd& ready, unsigned char outcome) {
    if (!ready.valid()) {
        return;
    }
    while (::write(ready.get(), &outcome, 1) < 0 && errno == EINTR) {
    }
    ready.reset();
}

void close_stdio() {
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0) {
        return;
    }
    for (int fd : {0, 1, 2}) {
        ::dup2(null, fd);
    }
    ::close(null);
}

Result<PidLock> PidLock::acquire(const SafeDir& dir, std::string_view name, uid_t owner,
                                 gid_t group) {
    std::string leaf(name);
    std::string shown = dir.path_of(leaf);
    UniqueFd fd(::openat(dir.fd(), leaf.c_str(),
                         O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0644));
    if (!fd.valid()) {
        return errno_error("cannot open the pid file " + shown + ": remove what is there");
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        return errno_error("fstat " + shown);
    }
    if (!S_ISREG(st.st_mode)) {
        return error("the pid file " + shown + " is not a regular file: remove it", EEXIST);
    }
    // A second name could be anyone's file, linked here by whoever may
    // write the directory: truncating and chowning it would change that file.
    if (st.st_nlink != 1) {
        return error(format("the pid file %s has %ju links: another name shares it; remove it",
                            shown.c_str(), static_cast<uintmax_t>(st.st_nlink)),
                     EMLINK);
    }
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        int code = errno;
        char text[32] = {};
        ssize_t got = ::pread(fd.get(), text, sizeof(text) - 1, 0);
        std::string pid = got > 0
                              ? printable(trim(std::string_view(text, static_cast<size_t>(got))))
                              : std::string("?");
        return error(format("already running (pid %s, %s is locked)", pid.c_str(), shown.c_str()),
                     code == EWOULDBLOCK ? EWOULDBLOCK : code);
    }
    // Checked once the lock is ours: a running daemon that dropped to its
    // --user owns the file, and a second start as root is told it runs.
    if (st.st_uid != ::geteuid() && st.st_uid != owner) {
        return error(format("the pid file %s is owned by uid %u, not by the daemon's user: "
                            "someone else made it; remove it",
                            shown.c_str(), static_cast<unsigned>(st.st_uid)),
                     EPERM);
    }
    std::string pid = format("%d\n", static_cast<int>(::getpid()));
    if (::ftruncate(fd.get(), 0) != 0 ||
        ::pwrite(fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
        return errno_error("cannot write the pid file " + shown);
    }
    if (st.st_uid != owner || st.st_gid != group) {
        if (::fchown(fd.get(), owner, group) != 0) {
            return errno_error("cannot chown the pid file " + shown);
        }
    }
    PidLock lock;
    lock.dir_.reset(::fcntl(dir.fd(), F_DUPFD_CLOEXEC, 3));
    lock.name_ = std::move(leaf);
    lock.fd_ = std::move(fd);
    return lock;
}

void PidLock::remove() {
    if (!dir_.valid() || !fd_.valid()) {
        return;
    }
    struct stat held {};
    struct stat named {};
    if (::fstat(fd_.get(), &held) == 0 &&
        ::fstatat(dir_.get(), name_.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
        held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
        ::unlinkat(dir_.get(), name_.c_str(), 0);
    }
}

} // namespace gpuinit::service
