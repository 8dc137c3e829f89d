#include "gpuinit/base/spawn.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <string_view>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuinit {

namespace {

// Owns posix_spawn's file actions.
class FileActions {
  public:
    FileActions() { posix_spawn_file_actions_init(&actions_); }
    ~FileActions() { posix_spawn_file_actions_destroy(&actions_); }
    FileActions(const FileActions&) = delete;
    FileActions& operator=(const FileActions&) = delete;
    posix_spawn_file_actions_t* get() { return &actions_; }

  private:
    posix_spawn_file_actions_t actions_{};
};

// Owns posix_spawn's attributes.
class SpawnAttributes {
  public:
    SpawnAttributes() { posix_spawnattr_init(&attributes_); }
    ~SpawnAttributes() { posix_spawnattr_destroy(&attributes_); }
    SpawnAttributes(const SpawnAttributes&) = delete;
    SpawnAttributes& operator=(const SpawnAttributes&) = delete;
    posix_spawnattr_t* get() { return &attributes_; }

  private:
    posix_spawnattr_t attributes_{};
};

// A started program that is reaped exactly once: by wait(), or else, on any
// path that returns early (a bound hit, an error), killed with SIGKILL, its
// whole process group when it has one, and reaped here, so no zombie and no
// runaway program is left behind. Until it is reaped, its pid (and so its
// group id) cannot be reused.
class Child {
  public:
    Child(pid_t pid, bool own_group) : pid_(pid), own_group_(own_group) {}
    ~Child() {
        if (pid_ > 0) {
            ::kill(own_group_ ? -pid_ : pid_, SIGKILL);
            (void)wait("");
        }
    }
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;

    Result<int> wait(const std::string& program) {
        int status = 0;
        while (::waitpid(pid_, &status, 0) != pid_) {
            if (errno != EINTR) {
                pid_ = -1; // ECHILD: reaped elsewhere; never signal the number again
                return errno_error("cannot wait for " + program);
            }
        }
        pid_ = -1;
        if (WIFSIGNALED(status)) {
            return 128 + WTERMSIG(status);
        }
        return WEXITSTATUS(status);
    }

  private:
    pid_t pid_;
    bool own_group_;
};

// An fd that polls readable once `pid` has exited (Linux 5.3), or an invalid
// one where the kernel has no pidfd_open.
UniqueFd open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
    return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
#else
    (void)pid;
    return UniqueFd();
#endif
}

} // namespace

Result<int> run_program(const SpawnRequest& request) {
    if (request.argv.empty()) {
        return error("run_program: no program given", EINVAL);
    }
    const std::string& program = request.argv[0];
    std::vector<char*> args;
    args.reserve(request.argv.size() + 1);
    for (const std::string& arg : request.argv) {
        args.push_back(const_cast<char*>(arg.c_str()));
    }
    args.push_back(nullptr);
    // An inherited variable that extra_env sets again is left out: the
    // program sees the value it was given (getenv takes the first one).
    auto overridden = [&](std::string_view entry) {
        std::string_view name = entry.substr(0, entry.find('='));
        return std::any_of(request.extra_env.begin(), request.extra_env.end(),
                           [&](const std::string& extra) {
                               return extra.size() > name.size() && extra[name.size()] == '=' &&
                                      std::string_view(extra).substr(0, name.size()) == name;
                           });
    };
    std::vector<char*> env;
    for (char** e = environ; *e != nullptr; ++e) {
        if (!overridden(*e)) {
            env.push_back(*e);
        }
    }
    for (const std::string& extra : request.extra_env) {
        env.push_back(const_cast<char*>(extra.c_str()));
    }
    env.push_back(nullptr);

    const bool timed = request.timeout.count() > 0;
    const bool bounded = timed || (request.output != nullptr && request.output_limit > 0);
    const auto deadline = std::chrono::steady_clock::now() + request.timeout;
    FileActions actions;
    SpawnAttributes attributes;
    if (bounded) {
        // setpgid(0, 0) in the child, so that killing the group also kills
        // what a script started.
        posix_spawnattr_setflags(attributes.get(), POSIX_SPAWN_SETPGROUP);
        posix_spawnattr_setpgroup(attributes.get(), 0);
    }
    UniqueFd read_end;
    UniqueFd write_end;
    if (request.output != nullptr) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) {
            return errno_error("cannot make a pipe for " + program);
        }
        read_end.reset(fds[0]);
        write_end.reset(fds[1]);
        posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), 1);
        posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), 2);
    }
    // Under a timeout the exit itself must be watched too (the program may
    // close its output and go on, or print nothing to us): poll, not a
    // waitpid loop with sleeps, which would either spin or oversleep. A
    // pidfd is exact and puts nothing into the program. Where the kernel
    // has none, a lifeline pipe whose write end only the program holds
    // (kept across exec: adddup2 onto itself clears FD_CLOEXEC) reads EOF
    // once it exits; only a program that closes that fd and runs on can
    // outlast the timeout then. pidfd_open on this process tells, before the
    // spawn, which of the two it is.
    UniqueFd lifeline_read;
    UniqueFd lifeline_write;
    if (timed && !open_pidfd(::getpid()).valid()) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) {
            return errno_error("cannot make a pipe for " + program);
        }
        lifeline_read.reset(fds[0]);
        lifeline_write.reset(fds[1]);
        posix_spawn_file_actions_adddup2(actions.get(), lifeline_write.get(), lifeline_write.get());
    }
    pid_t pid = 0;
    int spawned =
        posix_spawn(&pid, args[0], actions.get(), attributes.get(), args.data(), env.data());
    write_end.reset();
    lifeline_write.reset();
    if (spawned != 0) {
        return os_error(spawned, "cannot run " + program);
    }
    Child child(pid, bounded);
    UniqueFd exit_watch;
    if (timed) {
        exit_watch = lifeline_read.valid() ? std::move(lifeline_read) : open_pidfd(pid);
        if (!exit_watch.valid()) {
            return errno_error("cannot watch " + program + " for its timeout");
        }
    }

    size_t captured = 0;
    char buffer[4096];
    // Until the output reaches EOF and, under a timeout, the program exits.
    while (read_end.valid() || exit_watch.valid()) {
        int wait_ms = -1;
        if (timed) {
            auto left = std::chrono::ceil<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) { // ~Child kills and reaps
                return error(format("%s did not finish within %lld ms and was killed",
                                    program.c_str(),
                                    static_cast<long long>(request.timeout.count())),
                             ETIMEDOUT);
            }
            wait_ms = static_cast<int>(std::min<long long>(left.count(), INT_MAX));
        }
        // poll skips an fd of -1: one that is done.
        pollfd fds[2] = {{read_end.get(), POLLIN, 0}, {exit_watch.get(), POLLIN, 0}};
        if (::poll(fds, 2, wait_ms) < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno_error("cannot wait for " + program);
        }
        if (fds[1].revents != 0) {
            exit_watch.reset();
        }
        if (fds[0].revents == 0) {
            continue;
        }
        ssize_t n = ::read(read_end.get(), buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            read_end.reset();
            continue;
        }
        size_t got = static_cast<size_t>(n);
        if (request.output_limit > 0 && got > request.output_limit - captured) {
            request.output->append(buffer, request.output_limit - captured);
            return error(format("%s printed more than %zu bytes and was killed", program.c_str(),
                                request.output_limit),
                         EFBIG);
        }
        request.output->append(buffer, got);
        captured += got;
    }
    return child.wait(program);
}

Diagnostic exec_command(char* const argv[]) {
    if (argv == nullptr || argv[0] == nullptr) {
        return os_error(EINVAL, "no command to run");
    }
    std::fflush(stdout);
    std::fflush(stderr);
    ::execvp(argv[0], argv);
    int saved = errno;
    return os_error(saved, "cannot run " + quote(argv[0]));
}

} // namespace gpuinit
