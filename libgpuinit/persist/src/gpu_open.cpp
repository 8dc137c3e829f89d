#include "gpuinit/persist/gpu_open.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/host/gpu_information.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/host/privileges.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuinit {

namespace {

std::string node_name(unsigned minor) {
    return format("nvidia%u", minor);
}

// Whether the driver lists a usable GPU (not excluded) with this minor.
Status driver_lists_minor(const Sysroot& root, unsigned minor) {
    Diagnostics ignored;
    auto view = read_driver_gpus(root, ignored);
    if (!view) {
        return view.error();
    }
    for (const Gpu& gpu : view->gpus) {
        if (gpu.minor == minor) {
            return {};
        }
    }
    return error(format("the driver lists no usable GPU with minor %u in %s (not bound, or "
                        "excluded by NVreg_ExcludedGpus)",
                        minor, root.display(kDriverGpusPath).c_str()),
                 ENODEV);
}

bool is_gpu_node(const struct stat& st, unsigned minor) {
    return S_ISCHR(st.st_mode) && major(st.st_rdev) == kClassicNvidiaMajor &&
           ::minor(st.st_rdev) == minor;
}

Diagnostic not_gpu_node(const std::string& shown, unsigned minor) {
    return error(format("%s is not the character device %u:%u: refusing to open it; "
                        "gpu-mknod repairs it",
                        shown.c_str(), kClassicNvidiaMajor, minor),
                 ENODEV);
}

} // namespace

Status check_gpu_fd(int fd, unsigned minor) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        return errno_error("fstat");
    }
    if (!is_gpu_node(st, minor)) {
        return not_gpu_node("/dev/" + node_name(minor), minor);
    }
    return {};
}

Result<UniqueFd> open_gpu_node(const Sysroot& root, unsigned minor) {
    if (minor > kMaxGpuMinor) {
        return error(format("GPU minor %u is out of range 0-%u", minor, kMaxGpuMinor), EINVAL);
    }
    if (auto listed = driver_lists_minor(root, minor); !listed) {
        return listed.error();
    }
    auto dev = SafeDir::open(root, "dev");
    if (!dev) {
        return dev.error();
    }
    std::string leaf = node_name(minor);
    std::string shown = dev->path_of(leaf);
    // Look before opening: opening something else (a tty, a FIFO) can have
    // effects of its own. Checked again on the fd, after the open.
    struct stat st {};
    if (::fstatat(dev->fd(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        int code = errno;
        return os_error(code, code == ENOENT ? shown + " does not exist yet (udev runs gpu-mknod "
                                                       "when the GPU binds; or run gpu-mknod)"
                                             : "cannot stat " + shown);
    }
    if (!is_gpu_node(st, minor)) {
        return not_gpu_node(shown, minor);
    }
    UniqueFd fd(
        ::openat(dev->fd(), leaf.c_str(), O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY));
    if (!fd.valid()) {
        int code = errno;
        return os_error(code, "cannot open " + shown);
    }
    if (auto checked = check_gpu_fd(fd.get(), minor); !checked) {
        return checked.error();
    }
    return fd;
}

Status wait_open_complete(int fd, unsigned minor) {
    NvWaitOpenComplete result{};
    int rc = 0;
    do {
        rc = ::ioctl(fd, kNvWaitOpenComplete, &result);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
        if (errno == ENOTTY || errno == EINVAL) {
            return {}; // a driver before 550.40.07: the open itself blocked until init
        }
        return errno_error(format("waiting for the driver to initialize GPU minor %u", minor));
    }
    if (result.rc != 0) {
        int code = result.rc < 0 ? -result.rc : result.rc;
        return os_error(code, format("the driver failed to initialize GPU minor %u "
                                     "(adapter status 0x%x; see the kernel log)",
                                     minor, result.adapter_status));
    }
    return {};
}

namespace {

// The helper's protocol: the daemon sends a minor (uint32); the helper
// answers with an errno (int32, 0 on success) and, on success, the fd.
[[noreturn]] void helper_main(const Sysroot& root, int socket) {
    sigset_t all;
    sigfillset(&all);
    ::sigprocmask(SIG_UNBLOCK, &all, nullptr);
    // A service manager's stop signals the whole group: the helper ends when
    // the daemon closes its socket (or dies), never before the daemon.
    for (int signal : {SIGTERM, SIGINT, SIGHUP}) {
        ::signal(signal, SIG_IGN);
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == 1) {
        ::_exit(0); // the daemon died before PDEATHSIG was set
    }
    int keep_low = std::min(socket, root.fd());
    int keep_high = std::max(socket, root.fd());
    ::close_range(3, keep_low - 1, 0);
    ::close_range(keep_low + 1, keep_high - 1, 0);
    ::close_range(keep_high + 1, ~0U, 0);
    // It writes nothing, and must not keep the starter's stdout and stderr
    // open: `$(gpu-persist --daemon)` and startpar wait for their EOF, and
    // the daemon itself lets go of them once started.
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd <= 2; ++fd) {
        if (null >= 0 && fd != null && fd != socket && fd != root.fd()) {
            ::dup2(null, fd);
        }
    }
    if (null > 2 && null != socket && null != root.fd()) {
        ::close(null);
    }
    // uid 0 owns root:nvidiaN 0660 nodes; CAP_DAC_OVERRIDE covers a policy
    // that gives a node another owner.
    if (!keep_only_capabilities({CAP_DAC_OVERRIDE})) {
        ::_exit(1);
    }
    while (true) {
        uint32_t minor = 0;
        ssize_t got = ::recv(socket, &minor, sizeof(minor), 0);
        if (got == 0 || (got < 0 && errno != EINTR)) {
            ::_exit(0);
        }
        if (got != static_cast<ssize_t>(sizeof(minor))) {
            continue;
        }
        auto fd = open_gpu_node(root, minor);
        int32_t code = fd ? 0 : (fd.error().code != 0 ? fd.error().code : EIO);
        msghdr message{};
        iovec iov{&code, sizeof(code)};
        message.msg_iov = &iov;
        message.msg_iovlen = 1;
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
        if (fd) {
            message.msg_control = control;
            message.msg_controllen = sizeof(control);
            cmsghdr* header = CMSG_FIRSTHDR(&message);
            header->cmsg_level = SOL_SOCKET;
            header->cmsg_type = SCM_RIGHTS;
            header->cmsg_len = CMSG_LEN(sizeof(int));
            int raw = fd->get();
            std::memcpy(CMSG_DATA(header), &raw, sizeof(raw));
        }
        if (::sendmsg(socket, &message, MSG_NOSIGNAL) < 0 && errno != EINTR) {
            ::_exit(0);
        }
    }
}

} // namespace

Result<std::unique_ptr<HelperOpener>> HelperOpener::start(const Sysroot& root) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
        return errno_error("socketpair for the privileged helper");
    }
    UniqueFd ours(pair[0]);
    UniqueFd theirs(pair[1]);
    pid_t pid = ::fork();
    if (pid < 0) {
        return errno_error("fork of the privileged helper");
    }
    if (pid == 0) {
        ours.reset();
        helper_main(root, theirs.get());
    }
    return std::unique_ptr<HelperOpener>(new HelperOpener(std::move(ours), pid));
}

HelperOpener::~HelperOpener() {
    socket_.reset(); // the helper sees EOF and exits
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
}

Result<UniqueFd> HelperOpener::open(unsigned minor) {
    uint32_t request = minor;
    if (::send(socket_.get(), &request, sizeof(request), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(sizeof(request))) {
        return errno_error("cannot reach gpu-persist's privileged helper");
    }
    int32_t code = 0;
    iovec iov{&code, sizeof(code)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr message{};
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    ssize_t got = 0;
    do {
        got = ::recvmsg(socket_.get(), &message, MSG_CMSG_CLOEXEC);
    } while (got < 0 && errno == EINTR);
    if (got != static_cast<ssize_t>(sizeof(code))) {
        return error("gpu-persist's privileged helper stopped answering (did it die? see the log)",
                     EPIPE);
    }
    UniqueFd fd;
    for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
         header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS &&
            header->cmsg_len == CMSG_LEN(sizeof(int))) {
            int raw = -1;
            std::memcpy(&raw, CMSG_DATA(header), sizeof(raw));
            fd.reset(raw);
        }
    }
    if (code != 0) {
        return os_error(code, format("the privileged helper could not open /dev/nvidia%u", minor));
    }
    if (!fd.valid() || (message.msg_flags & MSG_CTRUNC) != 0) {
        return error("gpu-persist's privileged helper sent no fd", EPROTO);
    }
    if (auto checked = check_gpu_fd(fd.get(), minor); !checked) {
        return checked.error();
    }
    return fd;
}

} // namespace gpuinit
