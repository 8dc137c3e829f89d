// gpu-limit oci-hook and gpu-limit runtime: put libgpulimit.so into the
// containers that ask for it (AMP_VGPU_ENABLE=1 in their environment), as
// eGPU's users run them: `podman run -e AMP_VGPU_ENABLE=1 ...` with the
// precreate hook installed, `docker run --runtime=gpu-limit -e ...` with the
// runtime shim in daemon.json. The flow: oci_edit.hpp and oci_runtime.hpp;
// the edit: oci_spec.hpp; the host's files: oci_host.hpp. See gpu-limit(8).
#include "common/cli.hpp"
#include "common/command.hpp"
#include "common/exit_codes.hpp"
#include "common/limit_commands.hpp"
#include "common/report.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/numbered_gpus.hpp"
#include "gpuinit/limit/oci_edit.hpp"
#include "gpuinit/limit/oci_runtime.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#ifndef GPUINIT_VERSION
#define GPUINIT_VERSION "unknown"
#endif

#ifndef GPUINIT_LIMIT_LIBRARY
#define GPUINIT_LIMIT_LIBRARY "/usr/lib/gpuinit/libgpulimit.so"
#endif

namespace gpuinit::tools {

namespace {

namespace oci = limit::oci;

constexpr const char* kHookUsage =
    "Usage: gpu-limit oci-hook [--library PATH] [--state-root DIR] precreate|poststop\n"
    "An OCI hook for podman and CRI-O (install the JSON files of\n"
    "/usr/share/containers/oci/hooks.d; see gpu-limit(8)).\n"
    "precreate: reads the container's config.json on stdin and writes it to stdout;\n"
    "when its environment has AMP_VGPU_ENABLE=1, with libgpulimit.so bound read-only\n"
    "into the container and named in its /etc/ld.so.preload, the container's group\n"
    "state directory DIR/<id> and the daemon's socket bound, and GPU_LIMIT_STATE_DIR,\n"
    "GPU_LIMIT_GROUP and GPU_LIMIT_DEVICES (the GPUs the host gives it: injected\n"
    "/dev/nvidiaN nodes, CDI requests, NVIDIA_VISIBLE_DEVICES in the host's numbering)\n"
    "set. Any other config comes out byte for byte.\n"
    "poststop: reads the container's state on stdin and removes DIR/<id> unless a\n"
    "live process still holds the group's state.\n"
    "\n"
    "Options:\n"
    "      --library PATH    the interposer on the host\n"
    "                        (default " GPUINIT_LIMIT_LIBRARY ")\n"
    "      --state-root DIR  where the containers' groups live (default /run/gpu-limit;\n"
    "                        the same path in the container)\n"
    "  -r, --root DIR        read the host's GPUs (/proc/driver/nvidia/gpus) under DIR\n"
    "  -q, --quiet           errors only\n"
    "  -h, --help            show this help\n"
    "  -V, --version         show the version\n"
    "\n"
    "Exit status: 0 ok (also: nothing to do, or a group left in place because it\n"
    "is in use); 1 usage error; 3 cannot run (a config or state that is not valid\n"
    "JSON, a missing library, a state directory that cannot be made or removed).\n";

constexpr const char* kRuntimeUsage =
    "Usage: gpu-limit runtime [--runtime-path PATH] [--library PATH] [--state-root DIR]\n"
    "                         [--host-root DIR] RUNTIME-ARGUMENTS...\n"
    "       gpu-limit-runtime [...the same...]\n"
    "An OCI runtime shim for docker (daemon.json, as \"nvidia\" in front of\n"
    "nvidia-container-runtime or as \"gpu-limit\"), containerd (BinaryName) and\n"
    "Kubernetes (a RuntimeClass): takes runc's command line and runs the real\n"
    "runtime with it unchanged. Before `create`, when the bundle's config.json asks\n"
    "for AMP_VGPU_ENABLE=1, rewrites it as gpu-limit oci-hook precreate does (the\n"
    "container's id is its group); after `delete`, removes the group's state\n"
    "directory. See gpu-limit(8), CONTAINERS.\n"
    "\n"
    "Options (before the runtime's arguments):\n"
    "      --runtime-path PATH  the real runtime (default: $GPU_LIMIT_RUNTIME, else the\n"
    "                           first of nvidia-container-runtime, runc, crun in\n"
    "                           /usr/local/sbin, /usr/local/bin, /usr/sbin, /usr/bin,\n"
    "                           /sbin, /bin; $PATH is not searched)\n"
    "      --library PATH       the interposer on the host\n"
    "                           (default " GPUINIT_LIMIT_LIBRARY ")\n"
    "      --state-root DIR     where the containers' groups live (default /run/gpu-limit)\n"
    "      --host-root DIR      read the host's GPUs (/proc/driver/nvidia/gpus) under DIR\n"
    "Without these options: $GPU_LIMIT_LIBRARY, $GPU_LIMIT_STATE_ROOT and\n"
    "$GPU_LIMIT_HOST_ROOT, else the defaults (containerd's BinaryName and a\n"
    "Kubernetes RuntimeClass give no options).\n"
    "  -h, --help               show this help (as the only argument)\n"
    "  -v, --version            (as the only argument) this shim's version, then the\n"
    "                           real runtime's\n"
    "\n"
    "Exit status: the real runtime's; 3 when a config that asks for the limit\n"
    "cannot be edited (the container is not created); 126 the runtime cannot be\n"
    "run; 127 no runtime found.\n";

// The host layer's numbering, handed to the edit (limit does not read the
// host's driver itself).
oci::HostGpuReader host_gpus(std::string root) {
    return [root = std::move(root)]() -> Result<oci::HostGpus> {
        auto sysroot = Sysroot::open(root);
        if (!sysroot) {
            return sysroot.error();
        }
        auto numbered = read_numbered_gpus(*sysroot);
        if (!numbered) {
            return numbered.error();
        }
        oci::HostGpus host;
        host.listed = numbered->listed;
        for (const Gpu& gpu : numbered->gpus) {
            host.gpus.push_back({gpu.bdf, gpu.minor, gpu.uuid});
        }
        return host;
    };
}

void note(const char* program, const std::string& message) {
    std::string line = std::string(program) + ": " + message + "\n";
    (void)!::write(STDERR_FILENO, line.data(), line.size());
}

// Says why, on stderr and in the runtime's log.
int runtime_failure(const oci::RuntimeLog& log, const Diagnostic& failure, int code) {
    oci::log_runtime_failure(log, "gpu-limit runtime: " + failure.text());
    note("gpu-limit runtime", failure.text());
    return code;
}

// From our option, else the environment of containerd or dockerd (root's):
// by name (containerd's BinaryName, a RuntimeClass) no words of ours come.
std::string setting(const std::optional<std::string>& given, const char* variable,
                    const char* fallback) {
    if (given) {
        return *given;
    }
    const char* value = std::getenv(variable);
    return std::string(value != nullptr && *value != '\0' ? value : fallback);
}

} // namespace

int limit_oci_hook_main(int argc, char** argv) {
    enum { kOptLibrary = 256, kOptStateRoot };
    Cli cli("gpu-limit oci-hook", kHookUsage, kLimitUsage);
    cli.add_options("", {{"library", required_argument, nullptr, kOptLibrary},
                         {"state-root", required_argument, nullptr, kOptStateRoot}});
    oci::Settings settings;
    settings.library = GPUINIT_LIMIT_LIBRARY;
    for (int opt = cli.next(argc, argv); opt != -1; opt = cli.next(argc, argv)) {
        switch (opt) {
        case kOptLibrary:
            settings.library = optarg;
            break;
        case kOptStateRoot:
            settings.state_root = optarg;
            break;
        default:
            return cli.usage_error("unknown option");
        }
    }
    if (cli.must_exit()) {
        return cli.exit_code();
    }
    if (optind + 1 != argc) {
        return cli.usage_error("give the hook's stage: precreate or poststop");
    }
    std::string_view stage = argv[optind];
    if (stage == "precreate") {
        settings.host_gpus = host_gpus(cli.common.root);
        auto done = oci::run_precreate(STDIN_FILENO, STDOUT_FILENO, settings);
        return done ? kLimitOk
                    : report_failure("gpu-limit oci-hook", done.error(), false, 0, kLimitCannotRun);
    }
    if (stage == "poststop") {
        auto removed = oci::run_poststop(STDIN_FILENO, settings.state_root);
        if (!removed) {
            return report_failure("gpu-limit oci-hook", removed.error(), false, 0, kLimitCannotRun);
        }
        if (removed->outcome == oci::Cleanup::InUse && cli.common.verbosity >= 0) {
            note("gpu-limit oci-hook",
                 settings.state_root + "/" + removed->group +
                     " is still held by a live process of the group: left in place");
        }
        return kLimitOk;
    }
    return cli.usage_error("unknown stage " + quote(stage) + "; give precreate or poststop");
}

int limit_runtime_main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    auto call = oci::parse_runtime_args(args);
    if (!call) {
        note("gpu-limit runtime", call.error().message + " (see gpu-limit runtime --help)");
        return kLimitUsage;
    }
    if (call->help) {
        std::fputs(kRuntimeUsage, stdout);
        return kLimitOk;
    }
    oci::RuntimeLog log = oci::runtime_log(call->forward, call->command);
    const char* from_environment = std::getenv("GPU_LIMIT_RUNTIME");
    auto runtime = oci::find_runtime(call->runtime_path, from_environment != nullptr
                                                             ? std::optional(from_environment)
                                                             : std::nullopt);
    if (call->version) {
        // Ours first, in runc's form ("NAME version X"), which docker info
        // parses; then the real runtime's own lines.
        std::fputs("gpu-limit-runtime version " GPUINIT_VERSION "\n", stdout);
        if (!runtime) {
            note("gpu-limit runtime", runtime.error().text());
            return kLimitOk;
        }
    }
    if (!runtime) {
        return runtime_failure(log, runtime.error(), kLimitCommandNotFound);
    }
    oci::Settings settings;
    settings.library = setting(call->library, "GPU_LIMIT_LIBRARY", GPUINIT_LIMIT_LIBRARY);
    settings.state_root = setting(call->state_root, "GPU_LIMIT_STATE_ROOT", oci::kStateRoot);
    settings.host_gpus = host_gpus(setting(call->host_root, "GPU_LIMIT_HOST_ROOT", "/"));
    if (call->command == "create" || call->command == "run") {
        if (auto edited = oci::edit_bundle(*call, settings); !edited) {
            return runtime_failure(log, edited.error(), kLimitCannotRun);
        }
    }
    std::fflush(stdout);
    std::fflush(stderr);
    if (call->command != "delete" || !oci::valid_group_name(call->id)) {
        Diagnostic failed = oci::exec_runtime(*runtime, call->forward);
        return runtime_failure(
            log, failed, failed.code == ENOENT ? kLimitCommandNotFound : kLimitCommandCannotRun);
    }
    // delete: the group's directory goes once the runtime has removed the
    // container, so the runtime runs as a child this once.
    auto code = oci::run_runtime(*runtime, call->forward);
    if (!code) {
        return runtime_failure(log, code.error(),
                               code.error().code == ENOENT ? kLimitCommandNotFound
                                                           : kLimitCommandCannotRun);
    }
    if (*code == 0) {
        auto removed = oci::remove_group(settings.state_root, call->id);
        if (!removed) {
            note("gpu-limit runtime", removed.error().text());
        } else if (*removed == oci::Cleanup::InUse) {
            note("gpu-limit runtime", settings.state_root + "/" + call->id +
                                          " is still held by a live process: left in place");
        }
    }
    return *code;
}

const Command kLimitRuntimeCommand = {
    "limit-runtime",    "gpu-limit-runtime",
    limit_runtime_main, "gpu-limit runtime by its own name (containerd, Kubernetes)",
    kLimitCannotRun,    nullptr};

} // namespace gpuinit::tools
