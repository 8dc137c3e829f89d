// Opening /dev/nvidiaN to hold a GPU, as root on a /dev others may have
// touched, and waiting for the driver's initialization of it.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <memory>
#include <sys/types.h>

namespace gpuinit {

// NV_ESC_WAIT_OPEN_COMPLETE: _IOWR('F', 200 + 18, struct { int rc; uint32_t adapterStatus; }).
struct NvWaitOpenComplete {
    int rc;
    unsigned adapter_status;
};
inline constexpr unsigned long kNvWaitOpenComplete =
    (3UL << 30) | (sizeof(NvWaitOpenComplete) << 16) | ('F' << 8) | 218;

// Opens /dev/nvidia<minor> (under `root`) read-write, non-blocking, without
// following a symlink, and only when it is the character device 195:<minor>
// of a minor the driver lists in /proc/driver/nvidia/gpus. With a driver that
// has non-blocking open (550.40.07+), the driver initializes the GPU in the
// background and this returns at once; older drivers initialize it here.
Result<UniqueFd> open_gpu_node(const Sysroot& root, unsigned minor);

// Checks that `fd` is /dev/nvidia<minor>: a character device 195:<minor>.
Status check_gpu_fd(int fd, unsigned minor);

// Blocks until the driver finished initializing the GPU behind `fd` (the
// open-complete ioctl). A driver without the ioctl (ENOTTY, EINVAL) opened
// it blocking, so it is complete. The error carries the driver's errno.
Status wait_open_complete(int fd, unsigned minor);

// Where gpu-persist gets its GPU fds: itself (running as root), or a
// privileged helper process (running as --user).
class GpuOpener {
  public:
    virtual ~GpuOpener() = default;
    virtual Result<UniqueFd> open(unsigned minor) = 0;
};

class DirectOpener : public GpuOpener {
  public:
    explicit DirectOpener(const Sysroot& root) : root_(root) {}
    Result<UniqueFd> open(unsigned minor) override { return open_gpu_node(root_, minor); }

  private:
    const Sysroot& root_;
};

// The helper: forked (same binary, no exec) before the daemon drops root. It
// keeps uid 0 and CAP_DAC_OVERRIDE only, and does one thing: for a minor
// received on its socket, open_gpu_node() and pass the fd back (SCM_RIGHTS).
// It exits when the daemon closes the socket or dies.
class HelperOpener : public GpuOpener {
  public:
    // Forks the helper, which closes every fd but its socket and the
    // sysroot's. Call before any thread starts.
    static Result<std::unique_ptr<HelperOpener>> start(const Sysroot& root);
    ~HelperOpener() override;
    Result<UniqueFd> open(unsigned minor) override;
    pid_t pid() const { return pid_; }

  private:
    HelperOpener(UniqueFd socket, pid_t pid) : socket_(std::move(socket)), pid_(pid) {}
    UniqueFd socket_;
    pid_t pid_;
};

} // namespace gpuinit
