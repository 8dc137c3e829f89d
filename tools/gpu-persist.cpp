// gpu-persist: keep GPUs initialized between jobs by holding /dev/nvidiaN
// open, with per-GPU groups, hotplug and nvidia-smi's persistence RPC; and
// its client. See gpu-persist(8).
#include "common/cli.hpp"
#include "common/command.hpp"
#include "common/exit_codes.hpp"
#include "gpuinit/persist/client.hpp"
#include "gpuinit/persist/daemon.hpp"
#include "render/persist_report.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace gpuinit::tools {

namespace {

constexpr const char* kUsage =
    "Usage: gpu-persist [OPTION]...                 run the daemon (foreground)\n"
    "       gpu-persist status [--json]             what the daemon holds\n"
    "       gpu-persist enable|disable GPU|all      hold or release a GPU\n"
    "       gpu-persist nvidia-smi-query PCI        ask the nvidia-smi compat socket\n"
    "       gpu-persist nvidia-smi-set PCI on|off   set through it, as nvidia-smi -pm does\n"
    "GPU is a minor, a PCI address or a GPU UUID. The daemon holds /dev/nvidiaN open\n"
    "for every GPU bound to the driver, so the driver keeps it initialized between\n"
    "jobs. Release a GPU (disable, or stop the daemon) before unbinding, resetting\n"
    "or removing it, changing its MIG mode, or unloading the driver.\n"
    "\n"
    "Daemon options:\n"
    "  -u, --user USER      run as USER, without groups or capabilities; a small\n"
    "                       privileged helper opens the GPUs (default: stay root)\n"
    "  -g, --group GROUP    with --user: this primary group (default: USER's)\n"
    "  -a, --admin-group G  members of G may enable and disable (root always may)\n"
    "  -d, --daemon         SysV style: fork, pidfile, log to syslog; returns once\n"
    "                       the GPUs are held\n"
    "  -s, --syslog         log to syslog instead of stderr\n"
    "      --no-nvidia-smi-compat  do not answer nvidia-smi's persistence RPC\n"
    "      --no-hotplug     do not take GPUs bound later (SIGHUP rescans)\n"
    "Common options:\n"
    "  -r, --root DIR       paths under DIR (default /)\n"
    "  -j, --json           client: print the result as JSON\n"
    "  -v, --verbose        more log lines\n"
    "  -q, --quiet          errors only\n"
    "  -h, --help           show this help\n"
    "  -V, --version        show the version\n"
    "\n"
    "Exit status (gpuinit(8)): 0 ok; 1 usage error; 2 --daemon started but some\n"
    "GPU could not be held, or status: a GPU it should hold is not held; 3 the\n"
    "daemon could not start, no daemon answers, or it refused the request;\n"
    "5 not permitted (a change needs root or the admin group).\n";

int client_exit(const Diagnostic& failure) {
    switch (failure.code) {
    case ENOENT:
    case ECONNREFUSED:
        return kPersistNotRunning;
    case EACCES:
    case EPERM:
        return kPersistDenied;
    default:
        return kPersistRefused;
    }
}

int print_failure(const CommonOptions& common, const Diagnostic& failure, int code) {
    if (common.json) {
        JsonWriter json;
        json.begin_object();
        json.key("exit_code").value(code);
        json.key("error").value(failure.text());
        json.key("errno").value(failure.code != 0 ? strerrorname_np(failure.code) : "");
        json.end_object();
        emit_json(json);
    } else {
        Rendered rendered;
        rendered.err = "gpu-persist: error: " + failure.text() + "\n";
        emit(rendered);
    }
    return code;
}

int run_client(const CommonOptions& common, const ControlRequest& request) {
    auto root = Sysroot::open(common.root);
    if (!root) {
        return print_failure(common, root.error(), kPersistNotRunning);
    }
    auto reply = persist_request(*root, request, 150'000);
    if (!reply) {
        return print_failure(common, reply.error(), client_exit(reply.error()));
    }
    int code = reply->reply.code == 0       ? kPersistOk
               : reply->reply.code == EPERM ? kPersistDenied
                                            : kPersistRefused;
    // A status that shows a GPU it should hold not held is not "ok": init
    // scripts and monitoring read the exit status only.
    if (code == kPersistOk && !request.changes() && count_not_held(reply->reply.gpus) > 0) {
        code = kPersistPartial;
    }
    if (common.json) {
        std::string json = render_persist_json(*reply, code);
        std::fwrite(json.data(), 1, json.size(), stdout);
    } else if (common.verbosity >= 0 || code != kPersistOk) {
        emit(render_persist_text(*reply));
    }
    return code;
}

int run_rpc(const CommonOptions& common, std::string_view bdf, std::optional<bool> set) {
    auto device = parse_nv_pci_device(bdf);
    if (!device) {
        return print_failure(common, device.error(), kPersistUsage);
    }
    auto root = Sysroot::open(common.root);
    if (!root) {
        return print_failure(common, root.error(), kPersistNotRunning);
    }
    auto reply =
        set ? persistence_rpc_set(*root, *device, *set) : persistence_rpc_get(*root, *device);
    if (!reply) {
        return print_failure(common, reply.error(), client_exit(reply.error()));
    }
    if (!reply->rpc_error.empty()) {
        return print_failure(common, error("RPC: " + reply->rpc_error, EPROTO), kPersistRefused);
    }
    int code = reply->status == NvPdStatus::Success       ? kPersistOk
               : reply->status == NvPdStatus::Permissions ? kPersistDenied
                                                          : kPersistRefused;
    std::string mode = reply->enabled ? (*reply->enabled ? "on" : "off") : "";
    if (common.json) {
        JsonWriter json;
        json.begin_object();
        json.key("exit_code").value(code);
        json.key("status").value(nvpd_status_name(reply->status));
        json.key("persistence_mode").value(mode);
        json.end_object();
        emit_json(json);
    } else {
        Rendered rendered;
        (code == kPersistOk ? rendered.out : rendered.err) +=
            std::string(bdf) + ": " + nvpd_status_name(reply->status) +
            (mode.empty() ? "" : ", persistence mode " + mode) + "\n";
        emit(rendered);
    }
    return code;
}

int run(int argc, char** argv) {
    enum { kOptNoCompat = 256, kOptNoHotplug };
    Cli cli("gpu-persist", kUsage, kPersistUsage);
    cli.add_options("u:g:a:ds", {{"user", required_argument, nullptr, 'u'},
                                 {"group", required_argument, nullptr, 'g'},
                                 {"admin-group", required_argument, nullptr, 'a'},
                                 {"daemon", no_argument, nullptr, 'd'},
                                 {"syslog", no_argument, nullptr, 's'},
                                 {"no-nvidia-smi-compat", no_argument, nullptr, kOptNoCompat},
                                 {"no-hotplug", no_argument, nullptr, kOptNoHotplug}});
    PersistOptions options;
    bool daemon_option = false;
    for (int opt = cli.next(argc, argv); opt != -1; opt = cli.next(argc, argv)) {
        daemon_option = true;
        switch (opt) {
        case 'u':
            options.user = optarg;
            break;
        case 'g':
            options.group = optarg;
            break;
        case 'a':
            options.admin_group = optarg;
            break;
        case 'd':
            options.daemonize = true;
            break;
        case 's':
            options.use_syslog = true;
            break;
        case kOptNoCompat:
            options.nvidia_smi_compat = false;
            break;
        case kOptNoHotplug:
            options.hotplug = false;
            break;
        default:
            return cli.usage_error("unknown option");
        }
    }
    if (cli.must_exit()) {
        return cli.exit_code();
    }
    std::vector<std::string_view> words(argv + optind, argv + argc);
    if (!words.empty()) {
        if (daemon_option) {
            return cli.usage_error("daemon options do not go with a client command");
        }
        std::string_view verb = words[0];
        if (verb == "status" && words.size() == 1) {
            return run_client(cli.common, ControlRequest{});
        }
        if ((verb == "enable" || verb == "disable") && words.size() == 2) {
            std::string line = std::string(verb) + " " + std::string(words[1]);
            auto request = parse_control_request(line);
            if (!request) {
                return cli.usage_error(request.error().message);
            }
            return run_client(cli.common, *request);
        }
        if (verb == "nvidia-smi-query" && words.size() == 2) {
            return run_rpc(cli.common, words[1], std::nullopt);
        }
        if (verb == "nvidia-smi-set" && words.size() == 3 &&
            (words[2] == "on" || words[2] == "off")) {
            return run_rpc(cli.common, words[1], words[2] == "on");
        }
        return cli.usage_error("unknown command or wrong arguments: " + std::string(verb));
    }
    if (!options.group.empty() && options.user.empty()) {
        return cli.usage_error("--group needs --user");
    }
    if (cli.common.json) {
        return cli.usage_error("--json is for the client commands");
    }
    if (int refused = cli.refuse_unless_root(cli.common.root == "/",
                                             "hold GPUs (it opens /dev/nvidia* and writes "
                                             "/run/gpu-persist)",
                                             "try it on a copy with --root DIR");
        refused != 0) {
        return refused;
    }
    options.root = cli.common.root;
    options.verbosity = cli.common.verbosity;
    switch (run_persist_daemon(options)) {
    case DaemonOutcome::Stopped:
        return kPersistOk;
    case DaemonOutcome::Partial:
        return kPersistPartial;
    case DaemonOutcome::StartFailed:
        return kPersistCannotStart;
    }
    return kPersistCannotStart;
}

} // namespace

const Command kPersistCommand = {
    "persist",           "gpu-persist", run, "hold GPUs open so the driver keeps them initialized",
    kPersistCannotStart, nullptr};

} // namespace gpuinit::tools
