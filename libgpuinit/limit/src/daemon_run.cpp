// `gpu-limit daemon` as a process (daemon_run.hpp). Tool side.
#include "gpuinit/limit/daemon_run.hpp"

#include "gpuinit/base/spawn.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/limit/daemon_nvml.hpp"
#include "gpuinit/nvml/library.hpp"
#include "gpuinit/service/event_loop.hpp"
#include "gpuinit/service/log.hpp"
#include "gpuinit/service/process.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

namespace gpuinit::limit {

namespace {

constexpr std::chrono::milliseconds kOomScriptTimeout{10'000};
// A pass due within this of a tick runs on it (ticks jitter).
constexpr uint64_t kTickSlackNs = 2'000'000;
// With no group at all, a pass (which finds new groups) this often: a
// group's first registration opens it at once anyway.
constexpr uint64_t kIdlePassNs = 1'000'000'000;

// Arms the timer to tick every `period_ns`.
void arm(int timer, uint64_t period_ns) {
    itimerspec period{};
    period.it_interval.tv_sec = static_cast<time_t>(period_ns / 1'000'000'000);
    period.it_interval.tv_nsec = static_cast<long>(period_ns % 1'000'000'000);
    period.it_value = period.it_interval;
    ::timerfd_settime(timer, 0, &period, nullptr);
}

uint64_t clock_ns(clockid_t clock) {
    timespec now{};
    ::clock_gettime(clock, &now);
    return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(now.tv_nsec);
}

// The daemon's log (service's: stderr with sd-daemon prefixes under the
// journal, or syslog). DaemonCore's lines name the daemon already.
constexpr std::string_view kLogIdent = "gpu-limit daemon";

std::string_view unprefixed(std::string_view line) {
    constexpr std::string_view kPrefix = "gpu-limit daemon: ";
    return line.substr(0, kPrefix.size()) == kPrefix ? line.substr(kPrefix.size()) : line;
}

// What the daemon does to this machine.
class HostEffects final : public DaemonEffects {
  public:
    HostEffects(const Sysroot& root, const Log& log) : root_(root), log_(log) {}

    uint64_t monotonic_ns() override { return clock_ns(CLOCK_MONOTONIC); }
    uint64_t realtime_us() override { return clock_ns(CLOCK_REALTIME) / 1000; }
    void log(std::string_view line) override { log_.info(unprefixed(line)); }

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
    const Log& log_;
};

std::string answer(void* context, const char* data, size_t size, const PeerCredentials& peer,
                   int passed_fd) {
    return static_cast<DaemonCore*>(context)->handle_datagram(data, size, peer, passed_fd);
}

// The state directory, a host path: made 0755 if missing (containers reach
// the socket in it; each group's directory is 0700 on its own), opened
// without following a symlink on the way, and it must be this uid's and
// writable by nobody else.
Result<SafeDir> open_state_dir(const Sysroot& host, const std::string& path) {
    auto dir = SafeDir::open(host, std::string_view(path).substr(1), 0755);
    if (!dir) {
        return dir.error();
    }
    auto status = dir->stat_self();
    if (!status) {
        return status.error();
    }
    if (status->st_uid != ::geteuid() || (status->st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return error(path + " must be a directory owned by uid " + std::to_string(::geteuid()) +
                     " and writable by nobody else (mode " + format_mode(status->st_mode & 07777) +
                     ", uid " + std::to_string(status->st_uid) + ")");
    }
    return dir;
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
    Log log(kLogIdent, false, options.verbosity);
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

LimitDaemonOutcome run_limit_daemon(const LimitDaemonOptions& options) {
    if (!limit_daemon_supported()) {
        return LimitDaemonOutcome::NoNvml;
    }
    Log log(kLogIdent, options.daemonize, options.verbosity);
    // A SysV start says why it could not start on the caller's terminal too.
    log.set_also_stderr(options.daemonize);
    auto root = Sysroot::open(options.root);
    auto host = Sysroot::open("/");
    if (!root || !host) {
        log.diagnostic(!root ? root.error() : host.error());
        return LimitDaemonOutcome::StartFailed;
    }
    auto state_dir = open_state_dir(*host, options.state_dir);
    if (!state_dir) {
        log.diagnostic(state_dir.error());
        return LimitDaemonOutcome::StartFailed;
    }
    // SysV: the caller's process returns once the daemon listens (or
    // failed to start).
    UniqueFd ready;
    if (options.daemonize) {
        auto detached = service::detach(ready);
        if (!detached) {
            log.diagnostic(detached.error());
            return LimitDaemonOutcome::StartFailed;
        }
        if (detached->has_value()) {
            return **detached == 0 ? LimitDaemonOutcome::Stopped : LimitDaemonOutcome::StartFailed;
        }
        if (::chdir("/") != 0) {
            service::report_ready(ready, 1);
            return LimitDaemonOutcome::StartFailed;
        }
    }
    auto failed = [&](const Diagnostic& diagnostic) {
        log.diagnostic(diagnostic);
        service::report_ready(ready, 1);
        return LimitDaemonOutcome::StartFailed;
    };
    // A second daemon finds the lock held and stops (the socket is the
    // first one's).
    auto pid_lock = service::PidLock::acquire(*state_dir, "daemon.pid", ::geteuid(), ::getegid());
    if (!pid_lock) {
        return failed(pid_lock.error());
    }
    auto notifier = Notifier::from_environment();
    // NVML after the fork: its threads (if any) belong to the daemon.
    LibraryNvml nvml;
    const std::string& nvml_problem = nvml.problem();
    HostEffects effects(*root, log);
    DaemonCore core(*root, config_of(options), nvml, effects);

    const std::string socket_path =
        options.socket.empty() ? options.state_dir + "/daemon.sock" : options.socket;
    auto server = RegistrationServer::listen(socket_path);
    if (!server) {
        return failed(server.error());
    }
    bool running = true;
    service::EventLoop loop;
    if (auto opened = loop.open({SIGTERM, SIGINT, SIGHUP},
                                [&](const signalfd_siginfo& info) {
                                    if (info.ssi_signo != SIGHUP) {
                                        running = false;
                                    }
                                });
        !opened) {
        return failed(opened.error());
    }
    UniqueFd timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!timer.valid()) {
        return failed(errno_error("timerfd_create"));
    }
    // While the daemon drives a gate, the timer ticks every control period
    // (the compute gate moves in these quanta, as under the in-process
    // driver) and a full pass (process lists, memory, OOM) runs on the tick
    // at or after each interval. Otherwise it ticks only for the passes:
    // every interval while there are groups, every second while there are
    // none, so an idle daemon wakes once a second.
    const uint64_t interval_ns = options.interval_ms * 1'000'000;
    uint64_t next_pass_ns = 0;
    uint64_t tick_ns = kControlPeriodNs;
    arm(timer.get(), tick_ns);

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
    auto tick = [&](uint32_t /*events*/) {
        uint64_t expirations = 0;
        (void)!::read(timer.get(), &expirations, sizeof expirations);
        uint64_t now = clock_ns(CLOCK_MONOTONIC);
        // Also the socket's connection deadlines, looked at every tick.
        server->service(now, answer, &core);
        if (now >= next_pass_ns) {
            (void)core.sample();
            next_pass_ns = now + interval_ns - std::min(interval_ns, kTickSlackNs);
        } else {
            core.step_compute();
        }
        const uint64_t wanted = core.driving()           ? kControlPeriodNs
                                : core.group_count() > 0 ? interval_ns
                                                         : kIdlePassNs;
        if (wanted != tick_ns) {
            tick_ns = wanted;
            arm(timer.get(), tick_ns);
        }
    };
    auto requests = [&](uint32_t /*events*/) {
        server->service(clock_ns(CLOCK_MONOTONIC), answer, &core);
    };
    if (auto watched = loop.watch(timer.get(), EPOLLIN, tick); !watched) {
        return failed(watched.error());
    }
    if (auto watched = loop.watch(server->fd(), EPOLLIN, requests); !watched) {
        return failed(watched.error());
    }
    service::report_ready(ready, 0);
    if (options.daemonize) {
        service::close_stdio();
    }
    if (notifier && notifier->active()) {
        (void)notifier->send("READY=1\nSTATUS=listening on " + socket_path);
    }
    while (running) {
        if (auto ran = loop.run_once(); !ran) {
            log.diagnostic(ran.error());
            break;
        }
    }
    if (notifier && notifier->active()) {
        (void)notifier->send("STOPPING=1");
    }
    core.close_all();
    server->unlink_socket();
    pid_lock->remove();
    log.info("stopped");
    return LimitDaemonOutcome::Stopped;
}

} // namespace gpuinit::limit
