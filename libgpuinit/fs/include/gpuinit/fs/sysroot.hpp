// Every path the tools touch goes through one root (--root DIR), held as a
// directory fd, so a test or an admin can point a tool at a copy of a machine
// and nothing in that copy can reach outside it.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

struct stat;

namespace gpuinit {

// Largest file read_file() takes by default: the driver's procfs and sysfs
// files are a few hundred bytes.
inline constexpr size_t kSmallFileLimit = 64u << 10;

class Sysroot {
  public:
    // `root` must name an existing directory; "" is refused (it is not "/").
    static Result<Sysroot> open(std::string_view root);

    Sysroot(Sysroot&&) = default;
    Sysroot& operator=(Sysroot&&) = default;

    // The directory fd every lookup starts from.
    int fd() const { return fd_.get(); }
    // "/" for the running machine; the root as given otherwise.
    const std::string& root() const { return root_; }
    // True when the root is this machine's "/" (by identity: "/." and a
    // path that resolves to "/" count, as they are the same directory).
    bool is_host() const { return is_host_; }

    // The host path of `rel` ("proc/devices" -> "<root>/proc/devices"), for
    // libraries that take paths (libkmod).
    std::string path(std::string_view rel) const;
    // How a path is shown to the admin: "/dev/nvidia0" on the running
    // machine, the full host path under another root.
    std::string display(std::string_view rel) const;

    // Opens a file below the root for reading. Symlinks are followed, as
    // sysfs needs, but resolved inside the root (an absolute link in a copied
    // tree points into the copy). Opened non-blocking and refused unless it
    // is a regular file: a FIFO or a device at an input path must not hang
    // or be read (procfs and sysfs attributes are regular files).
    Result<UniqueFd> open_file(std::string_view rel) const;
    // Opens an existing regular file below the root for writing (a procfs
    // setting), resolved like open_file(). The type is checked on an O_PATH
    // descriptor first: whatever sits at the path is never opened for
    // writing unless it is a regular file.
    Result<UniqueFd> open_file_for_write(std::string_view rel) const;
    // The whole file; more than `max_bytes` is an error that names the file.
    Result<std::string> read_file(std::string_view rel, size_t max_bytes = kSmallFileLimit) const;
    // Calls `line` for every line (without its '\n'), numbered from 1,
    // reading in blocks: a file of any size costs one block of memory plus
    // its longest line, and a line over `max_line` is an error. A Status
    // error from `line` stops the walk and is returned.
    Status for_each_line(std::string_view rel, size_t max_line,
                         const std::function<Status(std::string_view, size_t)>& line) const;
    // ENOENT and ENOTDIR are "no"; anything else ("cannot tell") is an error.
    Result<bool> exists(std::string_view rel) const;
    // Names in a directory, sorted, without "." and "..".
    Result<std::vector<std::string>> list_dir(std::string_view rel) const;
    // A directory below the root, resolved like open_file().
    Result<UniqueFd> open_dir(std::string_view rel) const;

  private:
    Sysroot(UniqueFd fd, std::string root, bool is_host)
        : fd_(std::move(fd)), root_(std::move(root)), is_host_(is_host) {}

    Result<UniqueFd> resolve(std::string_view rel, int flags) const;
    // open_file(), also giving its fstat() (the readers need the size).
    Result<UniqueFd> open_regular(std::string_view rel, struct stat& st) const;

    UniqueFd fd_;
    std::string root_;
    bool is_host_ = false;
};

// "a/b/" -> "a/b"; "/a" -> "a".
std::string_view strip_slashes(std::string_view rel);

// The helpers under the readers above, for fds opened elsewhere (SafeDir,
// RunDir, the PCI walk; `shown` names the file or directory in messages):
// - read(2) into `buffer`, retrying on EINTR; 0 at the end;
Result<size_t> read_some(int fd, char* buffer, size_t size, const std::string& shown);
// - the whole file; more than `max_bytes` is an error (EFBIG);
Result<std::string> read_all(int fd, size_t max_bytes, const std::string& shown);
// - the names in a directory, unsorted, without "." and ".."; `dir_fd`
//   stays open and the caller's.
Result<std::vector<std::string>> list_names(int dir_fd, const std::string& shown);

} // namespace gpuinit
