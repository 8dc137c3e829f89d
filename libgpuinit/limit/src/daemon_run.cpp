// `gpu-limit daemon` as a process (daemon_run.hpp). Tool side.
#include "gpuinit/limit/daemon_run.hpp"

#include "gpuinit/base/spawn.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/limit/daemon_nvml.hpp"
#include "gpuinit/nvml/library.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <syslog.h>
#include <unistd.h>

namespace gpuinit::limit {

namespace {

constexpr std::chrono::milliseconds kOomScriptTimeout{10'000};
// A pass due within this of a tick runs on it (ticks jitter).
constexpr uint64_t kTickSlackNs = 2'000'000;

uint64_t clock_ns(clockid_t clock) {
    timespec now{};
    ::clock_gettime(clock, &now);
    return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(now.tv_nsec);
}

// The daemon's log: stderr (with sd-daemon level prefixes under the
// journal) in the foreground, syslog as a SysV daemon. Every line starts
// with "gpu-limit daemon: ".
class DaemonLog {
  public:
    DaemonLog(bool use_syslog, int verbosity)
        : syslog_(use_syslog), journal_(std::getenv("JOURNAL_STREAM") != nullptr),
          verbosity_(verbosity) {
        if (syslog_) {
            ::openlog("gpu-limit", LOG_PID | LOG_NDELAY, LOG_DAEMON);
        }
    }
    void error(std::string_view message) const { write(LOG_ERR, message); }
    void warning(std::string_view message) const { write(LOG_WARNING, message); }
    void info(std::string_view message) const { write(LOG_INFO, message); }
    void diagnostic(const Diagnostic& diagnostic) const { error(diagnostic.text()); }

  private:
    void write(int priority, std::string_view message) const {
        if (priority == LOG_INFO && verbosity_ < 0) {
            return;
        }
        constexpr std::string_view kPrefix = "gpu-limit daemon: ";
        std::string line = printable(message);
        if (line.compare(0, kPrefix.size(), kPrefix) != 0) {
            line.insert(0, kPrefix);
        }
        if (syslog_) {
            ::syslog(priority, "%s", line.c_str());
            return;
        }
        std::fprintf(stderr, "%s%s\n", journal_ ? format("<%d>", priority).c_str() : "",
                     line.c_str());
    }

    bool syslog_;
    bool journal_;
    int verbosity_;
};

// What the daemon does to this machine.
class HostEffects final : public DaemonEffects {
  public:
    HostEffects(const Sysroot& root, const DaemonLog& log) : root_(root), log_(log) {}

    uint64_t monotonic_ns() override { return clock_ns(CLOCK_MONOTONIC); }
    uint64_t realtime_us() override { return clock_ns(CLOCK_REALTIME) / 1000; }
    void log(std::string_view line) override { log_.info(line); }

    void kill_process(int32_t pid, uint64_t start_time) override {
        // A pidfd pins the process: checked, then signalled, with no window
        // in which the pid could be reused.
        UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
        auto text = root_.read_file("proc/" + std::to_string(pid) + "/stat", 4096);
        auto start = text ? parse_start_time(*text) : std::nullopt;
        if (!start || *start != start_time) {
            log_.info(format("pid %d is gone (or another process): not killed", pid));
        } else if (fd.valid()) {
            if (::syscall(SYS_pidfd_send_signal, fd.get(), SIGKILL, nullptr, 0) != 0) {
                log_.warning(format("SIGKILL pid %d: %s", pid, std::strerror(errno)));
            }
        } else if (::kill(pid, SIGKILL) != 0) {
            log_.warning(format("SIGKILL pid %d: %s", pid, std::strerror(errno)));
        }
    }

    void run_oom_script(const std::string& script,
                        const std::vector<std::string>& variables) override {
        SpawnRequest request;
        request.argv = {script};
        request.extra_env = variables;
        request.timeout = kOomScriptTimeout;
        auto ran = run_program(request);
        if (!ran && ran.error().code == ETIMEDOUT) {
            log_.warning(format("the OOM script %s ran longer than %lld ms and was killed",
                                script.c_str(), static_cast<long long>(kOomScriptTimeout.count())));
        } else if (!ran) {
            log_.warning("cannot run the OOM script " + script + ": " + ran.error().message);
        } else if (*ran != 0) {
            log_.warning(format("the OOM script %s exited with %d", script.c_str(), *ran));
        }
    }

  private:
    const Sysroot& root_;
    const DaemonLog& log_;
};

std::string answer(void* context, const char* data, size_t size, const PeerCredentials& peer,
                   int passed_fd) {
    return static_cast<DaemonCore*>(context)->handle_datagram(data, size, peer, passed_fd);
}

// The pid file <state-dir>/daemon.pid, locked for the daemon's life: a
// second daemon finds it locked and stops (the socket is the first one's).
Result<UniqueFd> take_pid_file(const std::string& state_dir) {
    std::string path = state_dir + "/daemon.pid";
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd.valid()) {
        return errno_error("open " + path);
    }
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = {};
        ssize_t got = ::pread(fd.get(), pid, sizeof pid - 1, 0);
        std::string holder = got > 0 ? std::string(trim(std::string_view(pid, size_t(got)))) : "?";
        return error("another daemon runs (pid " + holder + ", " + path + " is locked)", EEXIST);
    }
    std::string text = format("%d\n", static_cast<int>(::getpid()));
    if (::ftruncate(fd.get(), 0) != 0 ||
        ::pwrite(fd.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
        return errno_error("write " + path);
    }
    return fd;
}

// The state directory: root-owned 0755 (containers reach the socket in it;
// each group's directory is 0700 on its own).
Status make_state_dir(const std::string& path) {
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
        return errno_error("mkdir " + path);
    }
    struct stat status {};
    if (::lstat(path.c_str(), &status) != 0) {
        return errno_error("stat " + path);
    }
    if (!S_ISDIR(status.st_mode) || status.st_uid != ::geteuid() ||
        (status.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return error(path + " must be a directory owned by uid " + std::to_string(::geteuid()) +
                     " and writable by nobody else (mode " + format_mode(status.st_mode & 07777) +
                     ", uid " + std::to_string(status.st_uid) + ")");
    }
    return {};
}

DaemonConfig config_of(const LimitDaemonOptions& options) {
    DaemonConfig config;
    config.state_dir = options.state_dir;
    config.oom_grace_ns = options.oom_grace_s * 1'000'000'000;
    config.oom_script = options.oom_script;
    return config;
}

} // namespace

bool limit_daemon_supported() {
    return nvml::Library::kSupported;
}

Result<LimitDaemonPass> run_limit_daemon_once(const LimitDaemonOptions& options) {
    auto root = Sysroot::open(options.root);
    if (!root) {
        return root.error();
    }
    DaemonLog log(false, options.verbosity);
    LibraryNvml nvml;
    HostEffects effects(*root, log);
    DaemonCore core(*root, config_of(options), nvml, effects);
    LimitDaemonPass pass;
    if (!nvml.problem().empty()) {
        pass.warning = nvml.problem() + "; registrations only";
    }
    pass.report = core.sample();
    return pass;
}

LimitDaemonOutcome run_limit_daemon(const LimitDaemonOptions& options,
                                    const std::function<void(std::string_view)>& notify) {
    if (!limit_daemon_supported()) {
        return LimitDaemonOutcome::NoNvml;
    }
    DaemonLog log(options.daemonize, options.verbosity);
    auto root = Sysroot::open(options.root);
    if (!root) {
        log.diagnostic(root.error());
        return LimitDaemonOutcome::StartFailed;
    }
    if (Status made = make_state_dir(options.state_dir); !made) {
        log.diagnostic(made.error());
        return LimitDaemonOutcome::StartFailed;
    }
    // SysV: the parent returns once the child listens (or failed).
    int ready_pipe[2] = {-1, -1};
    if (options.daemonize) {
        if (::pipe2(ready_pipe, O_CLOEXEC) != 0) {
            log.error(std::string("pipe: ") + std::strerror(errno));
            return LimitDaemonOutcome::StartFailed;
        }
        pid_t pid = ::fork();
        if (pid < 0) {
            log.error(std::string("fork: ") + std::strerror(errno));
            return LimitDaemonOutcome::StartFailed;
        }
        if (pid > 0) {
            ::close(ready_pipe[1]);
            char status = 1;
            ssize_t got = ::read(ready_pipe[0], &status, 1);
            ::close(ready_pipe[0]);
            return got == 1 && status == 0 ? LimitDaemonOutcome::Stopped
                                           : LimitDaemonOutcome::StartFailed;
        }
        ::close(ready_pipe[0]);
        ::setsid();
        if (::chdir("/") != 0) {
            ::_exit(1);
        }
        UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
        if (null.valid()) {
            ::dup2(null.get(), STDIN_FILENO);
            ::dup2(null.get(), STDOUT_FILENO);
            ::dup2(null.get(), STDERR_FILENO);
        }
    }
    auto tell_parent = [&](char status) {
        if (ready_pipe[1] >= 0) {
            (void)!::write(ready_pipe[1], &status, 1);
            ::close(ready_pipe[1]);
            ready_pipe[1] = -1;
        }
    };
    // NVML after the fork: its threads (if any) belong to the daemon.
    LibraryNvml nvml;
    const std::string& nvml_problem = nvml.problem();
    HostEffects effects(*root, log);
    DaemonCore core(*root, config_of(options), nvml, effects);

    auto pid_file = take_pid_file(options.state_dir);
    if (!pid_file) {
        log.diagnostic(pid_file.error());
        tell_parent(1);
        return LimitDaemonOutcome::StartFailed;
    }
    const std::string socket_path =
        options.socket.empty() ? options.state_dir + "/daemon.sock" : options.socket;
    auto server = RegistrationServer::listen(socket_path);
    if (!server) {
        log.diagnostic(server.error());
        tell_parent(1);
        return LimitDaemonOutcome::StartFailed;
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    ::sigprocmask(SIG_BLOCK, &mask, nullptr);
    UniqueFd signals(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
    UniqueFd timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!signals.valid() || !timer.valid()) {
        log.error(std::string("signalfd/timerfd: ") + std::strerror(errno));
        tell_parent(1);
        return LimitDaemonOutcome::StartFailed;
    }
    // The timer ticks every control period (the compute gate moves in these
    // quanta, as under the in-process driver); a full pass (process lists,
    // memory, OOM) runs on the tick at or after each interval.
    itimerspec period{};
    period.it_interval.tv_sec = 0;
    period.it_interval.tv_nsec = static_cast<long>(kControlPeriodNs);
    period.it_value = period.it_interval;
    const uint64_t interval_ns = options.interval_ms * 1'000'000;
    uint64_t next_pass_ns = 0;
    ::timerfd_settime(timer.get(), 0, &period, nullptr);

    if (!nvml_problem.empty()) {
        log.warning(nvml_problem +
                    "; registrations only (no compute caps, no memory reconciliation)");
    } else if (!nvml.has_processes()) {
        log.warning("NVML has no process list (nvmlDeviceGetRunningProcessDetailList, "
                    "nvmlDeviceGetComputeRunningProcesses*); memory beyond the interposer is not "
                    "reconciled");
    }
    if (nvml_problem.empty() && !nvml.has_utilization()) {
        log.warning("NVML has no nvmlDeviceGetProcessUtilization; compute caps are left to "
                    "in-process sampling");
    }
    log.info(format("listening on %s, state in %s, a pass every %llu ms, compute steps every "
                    "25 ms",
                    socket_path.c_str(), options.state_dir.c_str(),
                    static_cast<unsigned long long>(options.interval_ms)));
    tell_parent(0);
    if (notify) {
        notify("READY=1\nSTATUS=listening on " + socket_path);
    }

    bool running = true;
    while (running) {
        pollfd fds[3] = {
            {server->fd(), POLLIN, 0}, {signals.get(), POLLIN, 0}, {timer.get(), POLLIN, 0}};
        // The server's connection timeouts need a look now and then even
        // when nothing arrives: the compute timer provides it.
        if (::poll(fds, 3, -1) < 0 && errno != EINTR) {
            log.error(std::string("poll: ") + std::strerror(errno));
            break;
        }
        if ((fds[1].revents & POLLIN) != 0) {
            signalfd_siginfo info{};
            while (::read(signals.get(), &info, sizeof info) == sizeof info) {
                if (info.ssi_signo != SIGHUP) {
                    running = false;
                }
            }
        }
        if ((fds[0].revents & POLLIN) != 0) {
            server->service(clock_ns(CLOCK_MONOTONIC), answer, &core);
        }
        if ((fds[2].revents & POLLIN) != 0) {
            uint64_t expirations = 0;
            (void)!::read(timer.get(), &expirations, sizeof expirations);
            uint64_t now = clock_ns(CLOCK_MONOTONIC);
            server->service(now, answer, &core);
            if (now >= next_pass_ns) {
                (void)core.sample();
                next_pass_ns = now + interval_ns - std::min(interval_ns, kTickSlackNs);
            } else {
                core.step_compute();
            }
        }
    }
    if (notify) {
        notify("STOPPING=1");
    }
    core.close_all();
    server->unlink_socket();
    std::string pid_path = options.state_dir + "/daemon.pid";
    ::unlink(pid_path.c_str());
    log.info("stopped");
    return LimitDaemonOutcome::Stopped;
}

} // namespace gpuinit::limit
