// Every path the tools touch goes through one root prefix (--root DIR), so a
// test or an admin can point a tool at a copy of a machine.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace gpuinit {

class Sysroot {
  public:
    // `root` must name an existing directory; "" means "/".
    static Result<Sysroot> open(std::string_view root);

    const std::string& root() const { return root_; }
    // True when the tool works on the running machine rather than a copy.
    bool is_host() const { return root_ == "/"; }

    // The host path of `rel` ("proc/devices" -> "<root>/proc/devices").
    std::string path(std::string_view rel) const;
    // How a path should be shown to the admin: "/dev/nvidia0", or the full
    // host path when the root is not "/".
    std::string display(std::string_view rel) const;

    // Reads a small text file (procfs, sysfs, /etc). Follows symlinks, which
    // sysfs needs; never use it for anything under /dev.
    Result<std::string> read_file(std::string_view rel, size_t max_bytes = 4u << 20) const;
    bool exists(std::string_view rel) const;
    // Names in a directory, sorted, without "." and "..".
    Result<std::vector<std::string>> list_dir(std::string_view rel) const;

    // Opens a directory below the root one component at a time with
    // O_NOFOLLOW, so a symlink planted anywhere on the way is refused rather
    // than followed. With `create`, missing components are made with `mode`
    // (root-owned, never wider than asked).
    Result<UniqueFd> open_dir_nofollow(std::string_view rel, bool create = false,
                                       mode_t mode = 0755) const;

  private:
    explicit Sysroot(std::string root) : root_(std::move(root)) {}
    std::string root_;
};

} // namespace gpuinit
