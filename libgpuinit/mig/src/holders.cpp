#include "gpuinit/mig/holders.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <set>
#include <sys/stat.h>
#include <sys/sysmacros.h>

namespace gpuinit {

namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

} // namespace

bool CapHolders::busy(unsigned minor) const {
    auto found = by_minor.find(minor);
    return found != by_minor.end() && !found->second.empty();
}

Result<CapHolders> find_cap_holders(const Sysroot& root, unsigned caps_major,
                                    const std::vector<unsigned>& minors) {
    auto proc = root.open_dir("proc");
    if (!proc) {
        return error("cannot list the processes in " + root.display("proc") + " (" +
                         proc.error().message +
                         "); cannot tell who uses the MIG instances (is /proc mounted?)",
                     proc.error().code);
    }
    std::set<dev_t> wanted;
    for (unsigned minor : minors) {
        wanted.insert(makedev(caps_major, minor));
    }
    auto names = list_names(proc->get(), root.display("proc"));
    if (!names) {
        return names.error();
    }
    CapHolders holders;
    for (const std::string& name : *names) {
        auto pid = parse_decimal(name, INT32_MAX);
        if (!pid || *pid == 0) {
            continue;
        }
        UniqueFd pid_dir(::openat(proc->get(), name.c_str(), kDirFlags));
        if (!pid_dir.valid()) {
            continue; // exited
        }
        UniqueFd fd_dir(::openat(pid_dir.get(), "fd", kDirFlags));
        auto fds = fd_dir.valid() ? list_names(fd_dir.get(), name)
                                  : Result<std::vector<std::string>>(errno_error(name));
        if (!fds) {
            if (fds.error().code == EACCES || fds.error().code == EPERM) {
                ++holders.uninspected; // another user's: needs ptrace access
            }
            continue;
        }
        std::set<dev_t> seen;
        for (const std::string& fd : *fds) {
            struct stat st {};
            // Follows the magic link to the open file itself.
            if (::fstatat(fd_dir.get(), fd.c_str(), &st, 0) == 0 && S_ISCHR(st.st_mode) &&
                wanted.count(st.st_rdev) != 0) {
                seen.insert(st.st_rdev);
            }
        }
        for (dev_t rdev : seen) {
            holders.by_minor[minor(rdev)].push_back(static_cast<pid_t>(*pid));
        }
    }
    for (auto& [minor, list] : holders.by_minor) {
        std::sort(list.begin(), list.end());
    }
    return holders;
}

} // namespace gpuinit
