// gpu-limit daemon: the host side of gpu-limit (root). The decisions are
// libgpuinit/limit's DaemonCore and RegistrationServer (daemon.hpp); here are
// NVML (dlopened, dynamic build only), the clock, signals and kills, the OOM
// script, the event loop, the pid file and the service manager.
#include "common/cli.hpp"
#include "common/exit_codes.hpp"
#include "common/limit_commands.hpp"
#include "common/report.hpp"
#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/limit/daemon.hpp"
#include "gpuinit/limit/daemon_nvml.hpp"
#include "gpuinit/limit/daemon_protocol.hpp"
#include "gpuinit/persist/service.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>

namespace gpuinit::tools {

namespace {

namespace limit = gpuinit::limit;

constexpr uint32_t kOomScriptTimeoutMs = 10'000;
// A pass due within this of a tick runs on it (ticks jitter).
constexpr uint64_t kTickSlackNs = 2'000'000;

constexpr const char* kUsage =
    "Usage: gpu-limit daemon [OPTION]...\n"
    "The host side of gpu-limit (root): takes registrations of libgpulimit.so on\n"
    "its socket, maps GPU processes to groups (registration, cgroup), drives each\n"
    "group's compute cap from NVML's per-process utilization, charges memory the\n"
    "interposer cannot see (contexts, modules, bypassing processes) to the group,\n"
    "and ends a group that stays over its memory cap.\n"
    "\n"
    "  -f, --foreground     stay in the foreground, log to stderr (systemd);\n"
    "                       without it: fork, pid file, syslog (SysV init)\n"
    "      --state-dir DIR  the groups' state (default /run/gpu-limit)\n"
    "      --socket PATH    registration socket (default <state-dir>/daemon.sock)\n"
    "      --interval MS    period of the full pass: process lists, memory,\n"
    "                       OOM policy (default 100); compute caps are\n"
    "                       stepped every 25 ms regardless\n"
    "      --oom-grace S    seconds over the cap before the OOM policy (default 5)\n"
    "      --oom-script P   program run (bounded to 10 s) before a group's\n"
    "                       processes are killed, with GPU_LIMIT_OOM_* set\n"
    "      --once           one sampling pass, print it, exit (no socket)\n"
    "  -r, --root DIR       read /proc under DIR (default /)\n"
    "  -j, --json           --once: print the pass as JSON\n"
    "  -v, --verbose        more log lines\n"
    "  -q, --quiet          errors only\n"
    "  -h, --help           show this help\n"
    "\n"
    "Exit status: 0 stopped on SIGTERM/SIGINT (or --once done); 1 usage error;\n"
    "3 could not start; 4 this static build cannot load NVML (use the dynamic\n"
    "gpu-limit).\n";

[[maybe_unused]] uint64_t clock_ns(clockid_t clock) {
    timespec now{};
    ::clock_gettime(clock, &now);
    return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(now.tv_nsec);
}

struct DaemonArgs {
    bool foreground = false;
    bool once = false;
    std::string state_dir = limit::kDaemonStateDir;
    std::string socket;
    uint64_t interval_ms = 100;
    uint64_t oom_grace_s = 5;
    std::string oom_script;
};

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

#if GPUINIT_DLOPEN_NVML

// What the daemon does to this machine.
class HostEffects final : public limit::DaemonEffects {
  public:
    HostEffects(const Sysroot& root, const DaemonLog& log) : root_(root), log_(log) {}

    uint64_t monotonic_ns() override { return clock_ns(CLOCK_MONOTONIC); }
    uint64_t realtime_us() override { return clock_ns(CLOCK_REALTIME) / 1000; }
    void log(std::string_view line) override { log_.info(line); }

    void kill_process(int32_t pid, uint64_t start_time) override {
        // A pidfd pins the process: checked, then signalled, with no window
        // in which the pid could be reused.
        int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
        auto text = root_.read_file("proc/" + std::to_string(pid) + "/stat", 4096);
        auto start = text ? limit::parse_start_time(*text) : std::nullopt;
        if (!start || *start != start_time) {
            log_.info(
                format("gpu-limit daemon: pid %d is gone (or another process): not killed", pid));
        } else if (fd >= 0) {
            if (::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0) != 0) {
                log_.warning(
                    format("gpu-limit daemon: SIGKILL pid %d: %s", pid, std::strerror(errno)));
            }
        } else if (::kill(pid, SIGKILL) != 0) {
            log_.warning(format("gpu-limit daemon: SIGKILL pid %d: %s", pid, std::strerror(errno)));
        }
        if (fd >= 0) {
            ::close(fd);
        }
    }

    void run_oom_script(const std::string& script,
                        const std::vector<std::string>& variables) override {
        std::vector<std::string> storage;
        for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
            if (std::strncmp(*entry, "GPU_LIMIT_OOM_", 14) != 0) {
                storage.emplace_back(*entry);
            }
        }
        storage.insert(storage.end(), variables.begin(), variables.end());
        std::vector<char*> envp;
        envp.reserve(storage.size() + 1);
        for (std::string& entry : storage) {
            envp.push_back(entry.data());
        }
        envp.push_back(nullptr);
        std::string program = script;
        char* argv[] = {program.data(), nullptr};
        posix_spawnattr_t attributes;
        posix_spawnattr_init(&attributes);
        sigset_t none;
        sigemptyset(&none);
        posix_spawnattr_setsigmask(&attributes, &none);
        posix_spawnattr_setpgroup(&attributes, 0);
        posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
        pid_t pid = -1;
        int spawned = posix_spawn(&pid, script.c_str(), nullptr, &attributes, argv, envp.data());
        posix_spawnattr_destroy(&attributes);
        if (spawned != 0) {
            log_.warning("gpu-limit daemon: cannot run the OOM script " + script + ": " +
                         std::strerror(spawned));
            return;
        }
        uint64_t deadline = clock_ns(CLOCK_MONOTONIC) + uint64_t{kOomScriptTimeoutMs} * 1'000'000;
        for (;;) {
            pid_t done = ::waitpid(pid, nullptr, WNOHANG);
            if (done == pid || (done < 0 && errno != EINTR)) {
                return;
            }
            if (clock_ns(CLOCK_MONOTONIC) >= deadline) {
                ::kill(-pid, SIGKILL);
                ::kill(pid, SIGKILL);
                ::waitpid(pid, nullptr, 0);
                log_.warning(format("gpu-limit daemon: the OOM script %s ran longer than %u ms "
                                    "and was killed",
                                    script.c_str(), kOomScriptTimeoutMs));
                return;
            }
            timespec pause{0, 5'000'000};
            ::nanosleep(&pause, nullptr);
        }
    }

  private:
    const Sysroot& root_;
    const DaemonLog& log_;
};

std::string render_text(const limit::PassReport& report) {
    std::string out = report.nvml ? "" : "NVML: not available (registration only)\n";
    if (!report.process_lists_problem.empty()) {
        out += "NVML process lists: not used: " + report.process_lists_problem +
               " (memory outside the interposer is not charged)\n";
    }
    for (const limit::PassNvmlDevice& device : report.nvml_devices) {
        out += format("NVML GPU %u %s: %zu processes (%s", device.index, device.uuid.c_str(),
                      device.processes.size(), limit::listing_name(device.listing));
        if (!device.detail.call.empty()) {
            out +=
                format(" by %s, %u-byte entries", device.detail.call.c_str(), device.detail.stride);
        }
        out += device.detail.problem.empty() ? ")\n" : ": " + device.detail.problem + ")\n";
    }
    if (report.groups.empty()) {
        out += "no groups\n";
    }
    for (const limit::PassGroup& group : report.groups) {
        out += format("group %s: %zu registered\n", group.name.c_str(), group.registered);
        for (const limit::PassDevice& device : group.devices) {
            out += format("  %s: counted %llu, measured %llu, external %llu, cap %llu%s\n",
                          device.uuid.c_str(), static_cast<unsigned long long>(device.counted),
                          static_cast<unsigned long long>(device.measured),
                          static_cast<unsigned long long>(device.external),
                          static_cast<unsigned long long>(device.cap),
                          device.over_cap ? " (over the cap)" : "");
            if (device.driven) {
                out += format("    compute cap %u%%: busy %llu ns this step, gate %s\n",
                              device.cap_percent, static_cast<unsigned long long>(device.busy_ns),
                              device.gate_open ? "open" : "closed");
            }
            for (const limit::PassProcess& process : device.processes) {
                out +=
                    format("    pid %d (%s): %llu bytes, sm %u%%\n", process.pid,
                           process.registered ? "registered" : "cgroup",
                           static_cast<unsigned long long>(process.used_bytes), process.sm_percent);
            }
        }
    }
    for (const std::string& action : report.actions) {
        out += action + "\n";
    }
    return out;
}

std::string render_json(const limit::PassReport& report) {
    JsonWriter json;
    json.begin_object();
    json.key("nvml").value(report.nvml);
    json.key("process_lists_problem").value(report.process_lists_problem);
    json.key("nvml_devices").begin_array();
    for (const limit::PassNvmlDevice& device : report.nvml_devices) {
        json.begin_object();
        json.key("index").value(device.index);
        json.key("uuid").value(device.uuid);
        json.key("listing").value(limit::listing_name(device.listing));
        json.key("call").value(device.detail.call);
        json.key("stride").value(device.detail.stride);
        json.key("problem").value(device.detail.problem);
        json.key("processes").begin_array();
        for (const limit::NvmlProcess& process : device.processes) {
            json.begin_object();
            json.key("pid").value(process.pid);
            json.key("used_bytes").value(process.used_bytes);
            json.end_object();
        }
        json.end_array();
        json.end_object();
    }
    json.end_array();
    json.key("groups").begin_array();
    for (const limit::PassGroup& group : report.groups) {
        json.begin_object();
        json.key("name").value(group.name);
        json.key("registered").value(static_cast<uint64_t>(group.registered));
        json.key("devices").begin_array();
        for (const limit::PassDevice& device : group.devices) {
            json.begin_object();
            json.key("uuid").value(device.uuid);
            json.key("cap").value(device.cap);
            json.key("counted").value(device.counted);
            json.key("measured").value(device.measured);
            json.key("external").value(device.external);
            json.key("over_cap").value(device.over_cap);
            json.key("compute_cap_percent").value(device.cap_percent);
            json.key("driven").value(device.driven);
            json.key("gate_open").value(device.gate_open);
            json.key("busy_ns").value(device.busy_ns);
            json.key("processes").begin_array();
            for (const limit::PassProcess& process : device.processes) {
                json.begin_object();
                json.key("pid").value(process.pid);
                json.key("source").value(process.registered ? "registered" : "cgroup");
                json.key("used_bytes").value(process.used_bytes);
                json.key("sm_percent").value(process.sm_percent);
                json.end_object();
            }
            json.end_array();
            json.end_object();
        }
        json.end_array();
        json.end_object();
    }
    json.end_array();
    json.key("actions").begin_array();
    for (const std::string& action : report.actions) {
        json.value(action);
    }
    json.end_array();
    json.end_object();
    return json.str() + "\n";
}

std::string answer(void* context, const char* data, size_t size, const limit::PeerCredentials& peer,
                   int passed_fd) {
    return static_cast<limit::DaemonCore*>(context)->handle_datagram(data, size, peer, passed_fd);
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

int run_daemon(const DaemonArgs& args, const CommonOptions& common) {
    bool daemonize = !args.foreground && !args.once;
    DaemonLog log(daemonize, common.verbosity);
    auto root = Sysroot::open(common.root);
    if (!root) {
        log.diagnostic(root.error());
        return kLimitCannotRun;
    }
    limit::LibraryNvml nvml;
    const std::string& nvml_problem = nvml.problem();
    HostEffects effects(*root, log);
    limit::DaemonConfig config;
    config.state_dir = args.state_dir;
    config.oom_grace_ns = args.oom_grace_s * 1'000'000'000;
    config.oom_script = args.oom_script;
    limit::DaemonCore core(*root, config, nvml, effects);

    if (args.once) {
        if (!nvml_problem.empty()) {
            log.warning("gpu-limit daemon: " + nvml_problem + "; registrations only");
        }
        limit::PassReport report = core.sample();
        std::string text = common.json ? render_json(report) : render_text(report);
        std::fwrite(text.data(), 1, text.size(), stdout);
        return kLimitOk;
    }

    if (Status made = make_state_dir(args.state_dir); !made) {
        log.diagnostic(made.error());
        return kLimitCannotRun;
    }
    // SysV: the parent returns once the child listens (or failed).
    int ready_pipe[2] = {-1, -1};
    if (daemonize) {
        if (::pipe2(ready_pipe, O_CLOEXEC) != 0) {
            log.error(std::string("pipe: ") + std::strerror(errno));
            return kLimitCannotRun;
        }
        pid_t pid = ::fork();
        if (pid < 0) {
            log.error(std::string("fork: ") + std::strerror(errno));
            return kLimitCannotRun;
        }
        if (pid > 0) {
            ::close(ready_pipe[1]);
            char status = 1;
            ssize_t got = ::read(ready_pipe[0], &status, 1);
            return got == 1 && status == 0 ? kLimitOk : kLimitCannotRun;
        }
        ::close(ready_pipe[0]);
        ::setsid();
        if (::chdir("/") != 0) {
            return kLimitCannotRun;
        }
        int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) {
            ::dup2(null, STDIN_FILENO);
            ::dup2(null, STDOUT_FILENO);
            ::dup2(null, STDERR_FILENO);
            ::close(null);
        }
    }
    auto tell_parent = [&](char status) {
        if (ready_pipe[1] >= 0) {
            (void)!::write(ready_pipe[1], &status, 1);
            ::close(ready_pipe[1]);
            ready_pipe[1] = -1;
        }
    };
    auto pid_file = take_pid_file(args.state_dir);
    if (!pid_file) {
        log.diagnostic(pid_file.error());
        tell_parent(1);
        return kLimitCannotRun;
    }
    std::string socket_path = args.socket.empty() ? args.state_dir + "/daemon.sock" : args.socket;
    auto server = limit::RegistrationServer::listen(socket_path);
    if (!server) {
        log.diagnostic(server.error());
        tell_parent(1);
        return kLimitCannotRun;
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
        return kLimitCannotRun;
    }
    // The timer ticks every control period (the compute gate moves in these
    // quanta, as under the in-process driver); a full pass (process lists,
    // memory, OOM) runs on the tick at or after each --interval.
    itimerspec period{};
    period.it_interval.tv_sec = 0;
    period.it_interval.tv_nsec = static_cast<long>(limit::kControlPeriodNs);
    period.it_value = period.it_interval;
    const uint64_t interval_ns = args.interval_ms * 1'000'000;
    uint64_t next_pass_ns = 0;
    ::timerfd_settime(timer.get(), 0, &period, nullptr);

    if (!nvml_problem.empty()) {
        log.warning("gpu-limit daemon: " + nvml_problem +
                    "; registrations only (no compute caps, no memory reconciliation)");
    } else if (!nvml.has_processes()) {
        log.warning(
            "gpu-limit daemon: NVML has no process list (nvmlDeviceGetRunningProcessDetailList, "
            "nvmlDeviceGetComputeRunningProcesses*); memory beyond the interposer is not "
            "reconciled");
    }
    if (nvml_problem.empty() && !nvml.has_utilization()) {
        log.warning("gpu-limit daemon: NVML has no nvmlDeviceGetProcessUtilization; compute caps "
                    "are left to in-process sampling");
    }
    log.info(format("gpu-limit daemon: listening on %s, state in %s, a pass every %llu ms, "
                    "compute steps every 25 ms",
                    socket_path.c_str(), args.state_dir.c_str(),
                    static_cast<unsigned long long>(args.interval_ms)));
    tell_parent(0);
    auto notifier = Notifier::from_environment();
    if (notifier && notifier->active()) {
        (void)notifier->send("READY=1\nSTATUS=listening on " + socket_path);
    }

    bool running = true;
    while (running) {
        pollfd fds[3] = {
            {server->fd(), POLLIN, 0}, {signals.get(), POLLIN, 0}, {timer.get(), POLLIN, 0}};
        // The server's connection timeouts need a look now and then even
        // when nothing arrives: the sampling timer provides it.
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
    if (notifier && notifier->active()) {
        (void)notifier->send("STOPPING=1");
    }
    core.close_all();
    server->unlink_socket();
    std::string pid_path = args.state_dir + "/daemon.pid";
    ::unlink(pid_path.c_str());
    log.info("gpu-limit daemon: stopped");
    return kLimitOk;
}

#endif // GPUINIT_DLOPEN_NVML

std::optional<uint64_t> number_option(const char* text, uint64_t min, uint64_t max) {
    auto value = parse_decimal(text != nullptr ? text : "");
    if (!value || *value < min || *value > max) {
        return std::nullopt;
    }
    return value;
}

} // namespace

int limit_daemon_main(int argc, char** argv) {
    enum { kOptStateDir = 256, kOptSocket, kOptInterval, kOptGrace, kOptScript, kOptOnce };
    Cli cli("gpu-limit daemon", kUsage, kLimitUsage);
    cli.add_options("f", {{"foreground", no_argument, nullptr, 'f'},
                          {"state-dir", required_argument, nullptr, kOptStateDir},
                          {"socket", required_argument, nullptr, kOptSocket},
                          {"interval", required_argument, nullptr, kOptInterval},
                          {"oom-grace", required_argument, nullptr, kOptGrace},
                          {"oom-script", required_argument, nullptr, kOptScript},
                          {"once", no_argument, nullptr, kOptOnce}});
    DaemonArgs args;
    for (int opt = cli.next(argc, argv); opt != -1; opt = cli.next(argc, argv)) {
        switch (opt) {
        case 'f':
            args.foreground = true;
            break;
        case kOptStateDir:
            args.state_dir = optarg;
            break;
        case kOptSocket:
            args.socket = optarg;
            break;
        case kOptInterval:
            if (auto value = number_option(optarg, 10, 60'000)) {
                args.interval_ms = *value;
            } else {
                return cli.usage_error("--interval takes milliseconds from 10 to 60000");
            }
            break;
        case kOptGrace:
            if (auto value = number_option(optarg, 0, 3600)) {
                args.oom_grace_s = *value;
            } else {
                return cli.usage_error("--oom-grace takes seconds from 0 to 3600");
            }
            break;
        case kOptScript:
            args.oom_script = optarg;
            break;
        case kOptOnce:
            args.once = true;
            break;
        default:
            return cli.usage_error("unknown option");
        }
    }
    if (cli.must_exit()) {
        return cli.exit_code();
    }
    if (optind < argc) {
        return cli.usage_error("no arguments expected: " + printable(argv[optind]));
    }
    if (args.state_dir.empty() || args.state_dir[0] != '/') {
        return cli.usage_error("--state-dir takes an absolute path");
    }
    if (!args.oom_script.empty() && args.oom_script[0] != '/') {
        return cli.usage_error("--oom-script takes an absolute path");
    }
    if (cli.common.json && !args.once) {
        return cli.usage_error("--json goes with --once");
    }
#if GPUINIT_DLOPEN_NVML
    return run_daemon(args, cli.common);
#else
    std::fputs("gpu-limit daemon: this static build cannot load NVML; run the dynamic gpu-limit "
               "for the daemon\n",
               stderr);
    return kLimitDaemonNeedsDynamic;
#endif
}

} // namespace gpuinit::tools
