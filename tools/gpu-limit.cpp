// gpu-limit: runs a job with GPU memory caps (libgpulimit.so preloaded and
// the eGPU variables set), and shows each group's caps and usage. See
// gpu-limit(8) and gpulimit(7).
#include "common/cli.hpp"
#include "common/command.hpp"
#include "common/exit_codes.hpp"
#include "common/limit_commands.hpp"
#include "gpuinit/base/spawn.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/limit/launch.hpp"
#include "render/limit_report.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <unistd.h>

#ifndef GPUINIT_LIMIT_LIBRARY
#define GPUINIT_LIMIT_LIBRARY "/usr/lib/gpuinit/libgpulimit.so"
#endif

namespace gpuinit::tools {

namespace {

constexpr const char* kUsage =
    "Usage: gpu-limit run [OPTION]... -- CMD [ARG]...\n"
    "       gpu-limit status [--group NAME] [--state-dir DIR] [--json]\n"
    "       gpu-limit daemon [OPTION]...      (the host daemon; see --help there)\n"
    "       gpu-limit oci-hook precreate|poststop  (podman/CRI-O hook)\n"
    "       gpu-limit runtime [RUNC ARGS]...  (docker's OCI runtime shim)\n"
    "run starts CMD with libgpulimit.so preloaded and the eGPU variables set\n"
    "(AMP_VGPU_ENABLE=1, a memory cap and a compute share, see gpulimit(7)): every process of the\n"
    "group shares the cap on each GPU. status shows every group under the state\n"
    "directory: each GPU's cap, usage, peak and refusals, and each process's usage.\n"
    "\n"
    "run options:\n"
    "  -m, --mem BYTES      cap per GPU: bytes, or K, M, G, T (binary: G = 2^30)\n"
    "                       (GPU_MEM_PER_DEVICE; the reserve is subtracted)\n"
    "      --mem-ratio C/D  cap per GPU: C/D of its memory (ALIYUN_COM_GPU_MEM_CONTAINER\n"
    "                       and _DEV); without either, usage is counted, not capped\n"
    "      --reserved MIB   kept back from the cap, in MiB (default 10)\n"
    "      --util PERCENT   compute share per GPU, 1 to 95 (GPU_UTIL_PER_DEVICE;\n"
    "                       0 or above 95: no compute cap)\n"
    "      --oom-script PATH  run PATH (absolute) when an allocation is refused\n"
    "      --oom-policy P   return (the allocation fails, the default) or kill\n"
    "      --library PATH   the interposer (default: $GPU_LIMIT_LIBRARY, else\n"
    "                       " GPUINIT_LIMIT_LIBRARY ")\n"
    "      --dry-run        print the environment and command instead of running\n"
    "                       (shell lines; with --json a JSON document)\n"
    "run and status options:\n"
    "  -g, --group NAME     the group (default for run: slurm-$SLURM_JOB_ID,\n"
    "                       lsf-$LSB_JOBID, else a new group for this run)\n"
    "      --state-dir DIR  where groups keep their state (default:\n"
    "                       $GPU_LIMIT_STATE_DIR, else /run/gpu-limit for root,\n"
    "                       $XDG_RUNTIME_DIR/gpu-limit, else /tmp/gpu-limit-UID)\n"
    "Common options:\n"
    "  -j, --json           print the result as JSON (run: implies --dry-run)\n"
    "  -v, --verbose        more detail (status: dead processes too)\n"
    "  -q, --quiet          errors only\n"
    "  -h, --help           show this help\n"
    "  -V, --version        show the version\n"
    "\n"
    "Exit status: 0 ok; 1 usage error; 2 status: some group unreadable; 3 cannot\n"
    "run (a value the library would refuse, an untrusted state directory, no\n"
    "library); run: CMD's status (126 not executable, 127 not found).\n";

int fail(const CommonOptions& common, const Diagnostic& failure, int code) {
    return report_failure("gpu-limit", failure, common.json, common.verbosity, code);
}

std::map<std::string, std::string> current_environment() {
    std::map<std::string, std::string> environment;
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
        const char* equals = std::strchr(*entry, '=');
        if (equals != nullptr) {
            environment.emplace(std::string(*entry, static_cast<size_t>(equals - *entry)),
                                std::string(equals + 1));
        }
    }
    return environment;
}

std::optional<std::string> env(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

int run_job(const CommonOptions& common, const limit::RunRequest& request, bool dry_run,
            char** command) {
    limit::RunContext context;
    context.environment = current_environment();
    context.uid = ::getuid();
    context.pid = ::getpid();
    context.now_s = static_cast<uint64_t>(std::time(nullptr));
    context.default_library = GPUINIT_LIMIT_LIBRARY;
    auto plan = limit::plan_run(request, context);
    if (!plan) {
        return fail(common, plan.error(), kLimitCannotRun);
    }
    Diagnostics diagnostics;
    if (plan->rule == limit::MemoryRule::None && plan->compute_percent == 0) {
        diagnostics.warning("no cap given (--mem, --mem-ratio, --util or the eGPU variables): "
                            "the group's usage is counted, not capped");
    }
    std::vector<std::string> words(
        command, command + [&] {
            int count = 0;
            while (command[count] != nullptr) {
                ++count;
            }
            return count;
        }());
    if (common.json) {
        std::string json = render_run_plan_json(*plan, words, diagnostics, kLimitOk);
        std::fwrite(json.data(), 1, json.size(), stdout);
        return kLimitOk;
    }
    if (dry_run) {
        emit(render_run_plan_text(*plan, words, diagnostics, common.verbosity));
        return kLimitOk;
    }
    Rendered rendered;
    render_diagnostics("gpu-limit", diagnostics, common.verbosity, rendered);
    emit(rendered);
    if (auto applied = limit::apply_run_plan(*plan); !applied) {
        return fail(common, applied.error(), kLimitCannotRun);
    }
    Diagnostic failed = exec_command(command);
    return fail(common, failed,
                failed.code == ENOENT ? kLimitCommandNotFound : kLimitCommandCannotRun);
}

int run_status(const CommonOptions& common, const std::optional<std::string>& group,
               const std::optional<std::string>& state_dir) {
    std::optional<std::string> given = state_dir ? state_dir : env("GPU_LIMIT_STATE_DIR");
    auto xdg = env("XDG_RUNTIME_DIR");
    auto dir = limit::effective_state_dir(given, ::getuid(), xdg ? xdg->c_str() : nullptr);
    if (!dir) {
        return fail(common, dir.error(), kLimitCannotRun);
    }
    Diagnostics diagnostics;
    auto report = limit::read_status(*dir, group, ::getuid(), diagnostics);
    if (!report) {
        return fail(common, report.error(), kLimitCannotRun);
    }
    int code = diagnostics.has_errors() ? kLimitPartial : kLimitOk;
    if (common.json) {
        std::string json = render_status_json(*report, diagnostics, code);
        std::fwrite(json.data(), 1, json.size(), stdout);
    } else {
        emit(render_status_text(*report, diagnostics, common.verbosity));
    }
    return code;
}

// The daemon reads the GPUs' processes through NVML.
bool uses_nvml(int argc, char** argv) {
    return argc >= 2 && std::strcmp(argv[1], "daemon") == 0;
}

int run(int argc, char** argv) {
    // The host-side commands have option sets of their own (the runtime
    // shim's are runc's): hand them the rest of the command line untouched.
    if (argc >= 2) {
        std::string_view first = argv[1];
        if (first == "daemon") {
            return limit_daemon_main(argc - 1, argv + 1);
        }
        if (first == "oci-hook") {
            return limit_oci_hook_main(argc - 1, argv + 1);
        }
        if (first == "runtime") {
            return limit_runtime_main(argc - 1, argv + 1);
        }
    }
    enum {
        kOptMemRatio = 256,
        kOptReserved,
        kOptUtil,
        kOptStateDir,
        kOptOomScript,
        kOptOomPolicy,
        kOptLibrary,
        kOptDryRun,
    };
    char** command = split_command(argc, argv);
    Cli cli("gpu-limit", kUsage, kLimitUsage);
    cli.add_options("m:g:", {{"mem", required_argument, nullptr, 'm'},
                             {"mem-ratio", required_argument, nullptr, kOptMemRatio},
                             {"reserved", required_argument, nullptr, kOptReserved},
                             {"util", required_argument, nullptr, kOptUtil},
                             {"group", required_argument, nullptr, 'g'},
                             {"state-dir", required_argument, nullptr, kOptStateDir},
                             {"oom-script", required_argument, nullptr, kOptOomScript},
                             {"oom-policy", required_argument, nullptr, kOptOomPolicy},
                             {"library", required_argument, nullptr, kOptLibrary},
                             {"dry-run", no_argument, nullptr, kOptDryRun}});
    limit::RunRequest request;
    bool dry_run = false;
    bool run_only = false; // an option that only run takes
    for (int opt = cli.next(argc, argv); opt != -1; opt = cli.next(argc, argv)) {
        run_only = run_only || (opt != 'g' && opt != kOptStateDir);
        switch (opt) {
        case 'm':
            request.mem = optarg;
            break;
        case kOptMemRatio:
            request.mem_ratio = optarg;
            break;
        case kOptReserved:
            request.reserved_mib = optarg;
            break;
        case kOptUtil:
            request.util = optarg;
            break;
        case 'g':
            request.group = optarg;
            break;
        case kOptStateDir:
            request.state_dir = optarg;
            break;
        case kOptOomScript:
            request.oom_script = optarg;
            break;
        case kOptOomPolicy:
            request.oom_policy = optarg;
            break;
        case kOptLibrary:
            request.library = optarg;
            break;
        case kOptDryRun:
            dry_run = true;
            break;
        default:
            return cli.usage_error("unknown option");
        }
    }
    if (cli.must_exit()) {
        return cli.exit_code();
    }
    std::vector<std::string_view> words(argv + optind, argv + argc);
    if (words.size() != 1) {
        return cli.usage_error(words.empty() ? "which command: run or status?"
                                             : "one command at a time");
    }
    if (cli.common.root != "/") {
        return cli.usage_error("--root does not apply: the state directory is this machine's");
    }
    std::string_view verb = words[0];
    if (verb == "status") {
        if (run_only || command != nullptr) {
            return cli.usage_error("status takes --group, --state-dir and --json only");
        }
        return run_status(cli.common, request.group, request.state_dir);
    }
    if (verb != "run") {
        return cli.usage_error("unknown command " + quote(verb) + ": run or status");
    }
    if (command == nullptr || *command == nullptr) {
        return cli.usage_error("run needs a command after --");
    }
    if (request.mem && request.mem_ratio) {
        return cli.usage_error("--mem and --mem-ratio do not go together");
    }
    return run_job(cli.common, request, dry_run, command);
}

} // namespace

const Command kLimitCommand = {"limit",
                               "gpu-limit",
                               run,
                               "run a job under GPU memory caps; show groups' caps and usage",
                               kLimitCannotRun,
                               uses_nvml};

} // namespace gpuinit::tools
