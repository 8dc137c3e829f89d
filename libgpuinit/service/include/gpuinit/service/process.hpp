// A daemon's process: detaching from its caller with a readiness pipe (a
// SysV start returns once the daemon is ready, with its outcome), and the
// pid lock that keeps a second instance out.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/safe_fs.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace gpuinit::service {

// The outcome a detached child reports when it never reported one (it died).
inline constexpr unsigned char kNoReadiness = 255;

// Forks. The parent waits until the child reports (report_ready) or dies,
// and gets the byte reported (kNoReadiness when none came); the child gets
// nullopt, runs in a new session, and keeps `ready` to report through.
Result<std::optional<unsigned char>> detach(UniqueFd& ready);
// Writes `outcome` once and closes: the parent returns it.
void report_ready(UniqueFd& ready, unsigned char outcome);
// stdin, stdout and stderr to /dev/null (a detached child after start).
void close_stdio();

// An exclusive flock on `name` in `dir` (a RunDir's or any SafeDir), which
// holds the pid. The file must be a regular file with one link, owned by
// this process's euid or by `owner` (a daemon that drops root chowns it):
// root opens it in a directory that `owner` may write, so a hard link
// there to another file, or a file someone else made, is refused rather
// than truncated and chowned. Opened without following a symlink, without
// blocking on a FIFO.
class PidLock {
  public:
    // An error with code EWOULDBLOCK (its message names the holder's pid)
    // when another process holds it.
    static Result<PidLock> acquire(const SafeDir& dir, std::string_view name, uid_t owner,
                                   gid_t group);
    // Removes the name while it is still the locked file.
    void remove();
    int fd() const { return fd_.get(); }

  private:
    UniqueFd dir_; // a duplicate of the directory's fd
    std::string name_;
    UniqueFd fd_;
};

} // namespace gpuinit::service
