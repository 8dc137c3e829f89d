#include "gpuinit/mig/holders.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <set>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace gpuinit {

namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// Calls visit(pid, name, pid_dir) for each process in the root's /proc, past
// those that exit meanwhile. Fails, saying `purpose` cannot be told, when
// /proc cannot be listed.
template <typename Visit>
Status each_process(const Sysroot& root, std::string_view purpose, Visit&& visit) {
    auto proc = root.open_dir("proc");
    if (!proc) {
        return error("cannot list the processes in " + root.display("proc") + " (" +
                         proc.error().message + "); " + std::string(purpose),
                     proc.error().code);
    }
    auto names = list_names(proc->get(), root.display("proc"));
    if (!names) {
        return names.error();
    }
    for (const std::string& name : *names) {
        auto pid = parse_decimal(name, INT32_MAX);
        if (!pid || *pid == 0) {
            continue;
        }
        UniqueFd pid_dir(::openat(proc->get(), name.c_str(), kDirFlags));
        if (pid_dir.valid()) {
            visit(static_cast<pid_t>(*pid), name, pid_dir);
        }
    }
    return {};
}

} // namespace

bool CapHolders::busy(unsigned minor) const {
    auto found = by_minor.find(minor);
    return found != by_minor.end() && !found->second.empty();
}

Result<CapHolders> find_cap_holders(const Sysroot& root, unsigned caps_major,
                                    const std::vector<unsigned>& minors) {
    std::set<dev_t> wanted;
    for (unsigned minor : minors) {
        wanted.insert(makedev(caps_major, minor));
    }
    CapHolders holders;
    auto walked =
        each_process(root, "cannot tell who uses the MIG instances (is /proc mounted?)",
                     [&](pid_t pid, const std::string& name, const UniqueFd& pid_dir) {
                         UniqueFd fd_dir(::openat(pid_dir.get(), "fd", kDirFlags));
                         auto fds = fd_dir.valid()
                                        ? list_names(fd_dir.get(), name)
                                        : Result<std::vector<std::string>>(errno_error(name));
                         if (!fds) {
                             if (fds.error().code == EACCES || fds.error().code == EPERM) {
                                 ++holders.uninspected; // another user's: needs ptrace access
                             }
                             return;
                         }
                         std::set<dev_t> seen;
                         for (const std::string& fd : *fds) {
                             struct stat st {};
                             // Follows the magic link to the open file itself.
                             if (::fstatat(fd_dir.get(), fd.c_str(), &st, 0) == 0 &&
                                 S_ISCHR(st.st_mode) && wanted.count(st.st_rdev) != 0) {
                                 seen.insert(st.st_rdev);
                             }
                         }
                         for (dev_t rdev : seen) {
                             holders.by_minor[minor(rdev)].push_back(pid);
                         }
                     });
    if (!walked) {
        return walked.error();
    }
    for (auto& [minor, list] : holders.by_minor) {
        std::sort(list.begin(), list.end());
    }
    return holders;
}

namespace {

constexpr size_t kStatusLimit = 64u << 10;
constexpr size_t kEnvironLimit = 1u << 20;
constexpr size_t kCgroupLimit = 64u << 10;
constexpr size_t kFdinfoLimit = 64u << 10;
constexpr size_t kPasswdLimit = 8u << 20;

// Reads a /proc file relative to a /proc/PID directory fd: "" when it
// cannot be read (the process exited, or it is not ours to read).
std::string read_proc(int pid_dir, const char* name, size_t limit) {
    UniqueFd fd(::openat(pid_dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) {
        return {};
    }
    auto text = read_all(fd.get(), limit, name);
    return text ? std::move(*text) : std::string();
}

std::optional<uid_t> real_uid(std::string_view status) {
    for (std::string_view line : split_lines(status)) {
        if (line.starts_with("Uid:")) {
            auto words = split_words(line.substr(4));
            if (!words.empty()) {
                if (auto uid = parse_decimal(words[0], UINT32_MAX - 1)) {
                    return static_cast<uid_t>(*uid);
                }
            }
        }
    }
    return std::nullopt;
}

// Whether this fd's open file holds an OFD lock: fdinfo lists the locks
// held through that open file only (fs/locks.c show_fd_locks).
bool holds_ofd_lock(std::string_view fdinfo) {
    for (std::string_view line : split_lines(fdinfo)) {
        if (line.starts_with("lock:") && line.find("OFDLCK") != std::string_view::npos) {
            return true;
        }
    }
    return false;
}

std::string user_name(const std::string& passwd, uid_t uid) {
    for (std::string_view line : split_lines(passwd)) {
        size_t first = line.find(':');
        size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
        size_t third = second == std::string_view::npos ? second : line.find(':', second + 1);
        if (third == std::string_view::npos) {
            continue;
        }
        auto id = parse_decimal(line.substr(second + 1, third - second - 1), UINT32_MAX - 1);
        if (id && *id == uid) {
            return printable(line.substr(0, first));
        }
    }
    return {};
}

bool all_digits(std::string_view text) {
    return !text.empty() && text.size() <= 20 &&
           std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

} // namespace

std::string job_from_cgroup(std::string_view cgroup) {
    for (std::string_view line : split_lines(cgroup)) {
        size_t start = 0;
        while ((start = line.find("/job_", start)) != std::string_view::npos) {
            start += 5;
            size_t end = line.find('/', start);
            std::string_view id = line.substr(
                start, end == std::string_view::npos ? std::string_view::npos : end - start);
            if (all_digits(id)) {
                return std::string(id);
            }
        }
    }
    return {};
}

std::string job_from_environ(std::string_view environ) {
    std::string lsf;
    size_t start = 0;
    while (start < environ.size()) {
        size_t end = environ.find('\0', start);
        std::string_view entry = environ.substr(
            start, end == std::string_view::npos ? std::string_view::npos : end - start);
        start = end == std::string_view::npos ? environ.size() : end + 1;
        if (entry.starts_with("SLURM_JOB_ID=") && all_digits(entry.substr(13))) {
            return std::string(entry.substr(13));
        }
        if (entry.starts_with("LSB_JOBID=") && all_digits(entry.substr(10)) && lsf.empty()) {
            lsf = std::string(entry.substr(10));
        }
    }
    return lsf;
}

Result<std::vector<std::vector<LeaseHolder>>>
find_lease_holders(const Sysroot& root, const std::vector<LeaseFile>& leases,
                   std::optional<uid_t> only_uid, bool with_jobs) {
    std::string passwd = root.read_file("etc/passwd", kPasswdLimit).value_or("");
    std::vector<std::vector<LeaseHolder>> holders(leases.size());
    auto walked = each_process(
        root, "cannot tell who holds the leases",
        [&](pid_t pid, const std::string& name, const UniqueFd& pid_dir) {
            auto uid = real_uid(read_proc(pid_dir.get(), "status", kStatusLimit));
            if (!uid || (only_uid && *uid != *only_uid)) {
                return;
            }
            UniqueFd fd_dir(::openat(pid_dir.get(), "fd", kDirFlags));
            if (!fd_dir.valid()) {
                return;
            }
            auto fds = list_names(fd_dir.get(), name);
            if (!fds) {
                return;
            }
            std::set<size_t> held;
            for (const std::string& fd : *fds) {
                struct stat st {};
                if (::fstatat(fd_dir.get(), fd.c_str(), &st, 0) != 0 || !S_ISFIFO(st.st_mode)) {
                    continue;
                }
                for (size_t i = 0; i < leases.size(); ++i) {
                    if (held.count(i) != 0 || st.st_dev != leases[i].dev ||
                        st.st_ino != leases[i].ino) {
                        continue;
                    }
                    std::string info = "fdinfo/" + fd;
                    if (holds_ofd_lock(read_proc(pid_dir.get(), info.c_str(), kFdinfoLimit))) {
                        held.insert(i);
                    }
                }
            }
            if (held.empty()) {
                return;
            }
            LeaseHolder holder;
            holder.pid = pid;
            holder.uid = *uid;
            holder.user = user_name(passwd, *uid);
            if (with_jobs) {
                holder.job = job_from_cgroup(read_proc(pid_dir.get(), "cgroup", kCgroupLimit));
                if (!holder.job.empty()) {
                    holder.job_source = "cgroup";
                } else if (::geteuid() == 0) {
                    holder.job =
                        job_from_environ(read_proc(pid_dir.get(), "environ", kEnvironLimit));
                    holder.job_source = holder.job.empty() ? "" : "environ";
                }
            }
            for (size_t i : held) {
                holders[i].push_back(holder);
            }
        });
    if (!walked) {
        return walked.error();
    }
    for (auto& list : holders) {
        std::sort(list.begin(), list.end(),
                  [](const LeaseHolder& a, const LeaseHolder& b) { return a.pid < b.pid; });
    }
    return holders;
}

} // namespace gpuinit
