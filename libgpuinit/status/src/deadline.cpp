// A probe in a child with a deadline. NVML and nvidia-smi block for as long
// as a wedged GPU does, and neither takes a timeout for every call; a
// child can always be killed. The child runs the probe and writes its
// section to a pipe; the parent waits for it at most until the deadline.
#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/status/probes.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace gpuinit::status {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

[[noreturn]] void child_main(int out, const std::function<Section()>& probe) {
    // A group of its own: the parent kills whatever the probe started with it.
    ::setpgid(0, 0);
    std::string record = encode_section(probe());
    std::string_view rest = record;
    while (!rest.empty()) {
        ssize_t n = ::write(out, rest.data(), rest.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            ::_exit(1);
        }
        rest.remove_prefix(static_cast<size_t>(n));
    }
    // No exit handlers or stdio flushes: they are the parent's.
    ::_exit(0);
}

// The process groups of `child`'s descendants (by the parent links of the
// host's /proc). run_program puts what it runs (nvidia-smi) in a group of
// its own, which the kill of the child's group would miss.
std::vector<pid_t> descendant_groups(pid_t child) {
    std::vector<pid_t> groups;
    auto proc = Sysroot::open("/");
    if (!proc) {
        return groups;
    }
    auto entries = proc->list_dir("proc");
    if (!entries) {
        return groups;
    }
    struct Link {
        pid_t pid, parent, group;
    };
    std::vector<Link> links;
    for (const std::string& entry : *entries) {
        auto pid = parse_decimal(entry, 1u << 22);
        if (!pid) {
            continue;
        }
        auto stat = proc->read_file("proc/" + entry + "/stat", 4096);
        if (!stat) {
            continue;
        }
        // "pid (comm) state ppid pgrp ...": comm may hold anything but the
        // last ')' ends it.
        size_t close = stat->rfind(')');
        if (close == std::string::npos) {
            continue;
        }
        int parent = 0;
        int group = 0;
        char state = 0;
        if (std::sscanf(stat->c_str() + close + 1, " %c %d %d", &state, &parent, &group) != 3) {
            continue;
        }
        links.push_back({static_cast<pid_t>(*pid), parent, group});
    }
    std::vector<pid_t> tree = {child};
    for (size_t i = 0; i < tree.size(); ++i) {
        for (const Link& link : links) {
            if (link.parent == tree[i]) {
                tree.push_back(link.pid);
                if (link.group != child && link.group > 1) {
                    groups.push_back(link.group);
                }
            }
        }
    }
    return groups;
}

void kill_and_reap(pid_t child) {
    // Stopped first, so that nothing in the tree starts more while it is read.
    ::kill(-child, SIGSTOP);
    for (pid_t group : descendant_groups(child)) {
        ::kill(-group, SIGKILL);
    }
    ::kill(-child, SIGKILL);
    ::kill(child, SIGKILL);
    while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
}

} // namespace

Section run_with_deadline(std::string_view name, const std::function<Section()>& probe,
                          std::chrono::milliseconds timeout) {
    const auto start = Clock::now();
    const auto deadline = start + timeout;
    auto finish = [&](Section section) {
        section.probe = std::string(name);
        section.seconds = seconds_since(start);
        return section;
    };
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) {
        return finish(failed_section(std::string(name), Verdict::Failed,
                                     errno_error("cannot make a pipe for the probe").text()));
    }
    UniqueFd in(ends[0]);
    UniqueFd out(ends[1]);
    std::fflush(nullptr);
    pid_t child = ::fork();
    if (child < 0) {
        return finish(failed_section(std::string(name), Verdict::Failed,
                                     errno_error("cannot fork the probe").text()));
    }
    if (child == 0) {
        in.reset();
        child_main(out.get(), probe);
    }
    // Also from here, so that the kill below reaches the group even when
    // the child has not run yet (the other setpgid is then an EACCES no-op).
    ::setpgid(child, child);
    out.reset();
    std::string record;
    bool timed_out = false;
    while (true) {
        auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        pollfd waiting{in.get(), POLLIN, 0};
        int ready = ::poll(&waiting, 1, static_cast<int>(left));
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        if (ready == 0) {
            timed_out = true;
            break;
        }
        char buffer[8192];
        ssize_t got = ::read(in.get(), buffer, sizeof(buffer));
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            break;
        }
        record.append(buffer, static_cast<size_t>(got));
        if (record.size() > kMaxSectionBytes) {
            kill_and_reap(child);
            return finish(
                failed_section(std::string(name), Verdict::Failed,
                               "the " + std::string(name) + " probe wrote more than its limit"));
        }
    }
    if (timed_out) {
        kill_and_reap(child);
        return finish(failed_section(
            std::string(name), Verdict::TimedOut,
            format("the %s probe did not finish within %.3g s (a wedged GPU, or nvidia-smi or a "
                   "daemon hanging?): killed; see the GPU's state in dmesg",
                   std::string(name).c_str(), static_cast<double>(timeout.count()) / 1000.0)));
    }
    // Whatever the probe started and left behind goes with its group,
    // while the child (a zombie until reaped) still keeps its id from reuse.
    siginfo_t exited{};
    while (::waitid(P_PID, static_cast<id_t>(child), &exited, WEXITED | WNOWAIT) < 0 &&
           errno == EINTR) {
    }
    ::kill(-child, SIGKILL);
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    auto section = decode_section(record);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !section) {
        std::string why = WIFSIGNALED(status) ? format("was killed by signal %d", WTERMSIG(status))
                          : section           ? format("exited with %d", WEXITSTATUS(status))
                                              : section.error().message;
        return finish(failed_section(std::string(name), Verdict::Failed,
                                     "the " + std::string(name) + " probe " + why));
    }
    return finish(std::move(*section));
}

} // namespace gpuinit::status
