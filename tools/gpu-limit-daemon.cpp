// gpu-limit daemon: the host side of gpu-limit (root). Parses options,
// runs libgpuinit/limit's daemon (daemon_run.hpp), renders --once.
#include "common/cli.hpp"
#include "common/exit_codes.hpp"
#include "common/limit_commands.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/limit/daemon_run.hpp"
#include "render/limit_daemon_report.hpp"

#include <cstdio>
#include <optional>
#include <string>

namespace gpuinit::tools {

namespace {

namespace limit = gpuinit::limit;

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
    "Exit status (gpuinit(8)): 0 stopped on SIGTERM/SIGINT (or --once done);\n"
    "1 usage error; 3 could not start (also: no NVML); 5 not permitted (needs root).\n";

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
    limit::LimitDaemonOptions args;
    bool foreground = false;
    bool once = false;
    for (int opt = cli.next(argc, argv); opt != -1; opt = cli.next(argc, argv)) {
        switch (opt) {
        case 'f':
            foreground = true;
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
            once = true;
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
    if (cli.common.json && !once) {
        return cli.usage_error("--json goes with --once");
    }
    if (int refused = cli.refuse_unless_root(cli.common.root == "/",
                                             "run the limiter's daemon (it reads every "
                                             "process's GPU use and writes /run/gpu-limit)",
                                             "try it on a copy with --root DIR");
        refused != 0) {
        return refused;
    }
    if (!limit::limit_daemon_supported()) {
        std::fputs("gpu-limit daemon: no NVML: this static build cannot load it and its NVML "
                   "helper did not run; install the helper (" GPUINIT_NVML_HELPER
                   ") or run the dynamic gpu-limit\n",
                   stderr);
        return kLimitCannotRun;
    }
    args.root = cli.common.root;
    args.verbosity = cli.common.verbosity;
    if (once) {
        auto pass = limit::run_limit_daemon_once(args);
        if (!pass) {
            std::fprintf(stderr, "gpu-limit daemon: %s\n", printable(pass.error().text()).c_str());
            return kLimitCannotRun;
        }
        if (!pass->warning.empty()) {
            std::fprintf(stderr, "gpu-limit daemon: %s\n", printable(pass->warning).c_str());
        }
        std::string text = cli.common.json ? render_daemon_pass_json(pass->report)
                                           : render_daemon_pass_text(pass->report);
        std::fwrite(text.data(), 1, text.size(), stdout);
        return kLimitOk;
    }
    args.daemonize = !foreground;
    switch (limit::run_limit_daemon(args)) {
    case limit::LimitDaemonOutcome::Stopped:
        return kLimitOk;
    case limit::LimitDaemonOutcome::NoNvml:
        return kLimitCannotRun;
    case limit::LimitDaemonOutcome::StartFailed:
        break;
    }
    return kLimitCannotRun;
}

} // namespace gpuinit::tools
