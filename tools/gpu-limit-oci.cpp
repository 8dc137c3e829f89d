// gpu-limit oci-hook and gpu-limit runtime: put libgpulimit.so into the
// containers that ask for it (AMP_VGPU_ENABLE=1 in their environment), as
// eGPU's users run them: `podman run -e AMP_VGPU_ENABLE=1 ...` with the
// precreate hook installed, `docker run --runtime=gpu-limit -e ...` with the
// runtime shim in daemon.json. What is edited: oci_spec.hpp; the host's
// files: oci_host.hpp. See gpu-limit(8).
#include "common/cli.hpp"
#include "common/command.hpp"
#include "common/exit_codes.hpp"
#include "common/limit_commands.hpp"
#include "common/report.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/limit/egpu.hpp"
#include "gpuinit/limit/oci_host.hpp"
#include "gpuinit/limit/oci_spec.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

constexpr size_t kMaxConfigBytes = 8u << 20;

// Reads all of `fd`, at most kMaxConfigBytes.
Result<std::string> read_all(int fd, const char* what) {
    std::string text;
    char buffer[65536];
    while (true) {
        ssize_t got = ::read(fd, buffer, sizeof buffer);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno_error(std::string("cannot read ") + what);
        }
        if (got == 0) {
            return text;
        }
        text.append(buffer, static_cast<size_t>(got));
        if (text.size() > kMaxConfigBytes) {
            return error(std::string(what) + " is larger than 8 MiB: not an OCI config");
        }
    }
}

Status write_all(int fd, std::string_view data, const std::string& what) {
    while (!data.empty()) {
        ssize_t put = ::write(fd, data.data(), data.size());
        if (put < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno_error("cannot write " + what);
        }
        data.remove_prefix(static_cast<size_t>(put));
    }
    return {};
}

// The library must be there: a container told to preload a missing file
// would start without the limit (ld.so only warns).
Status check_library(const std::string& library) {
    struct stat status {};
    if (library.empty() || library[0] != '/') {
        return error("the library " + quote(library) + " is not an absolute path");
    }
    if (::stat(library.c_str(), &status) != 0) {
        return errno_error("the library " + library +
                           " is missing; install gpuinit's "
                           "libgpulimit.so or give --library PATH");
    }
    if (!S_ISREG(status.st_mode)) {
        return error("the library " + library + " is not a regular file");
    }
    return {};
}

// The host's GPUs in nvidia-smi's numbering, from the driver's own list
// under `root`. A broken entry (unreadable, no minor, a minor or UUID listed
// twice) is an error: left out, it would shift every index after it. An
// excluded GPU is left out, as NVML leaves it out.
Result<oci::HostGpus> read_host_gpus(const std::string& root) {
    auto sysroot = Sysroot::open(root);
    if (!sysroot) {
        return sysroot.error();
    }
    Diagnostics diagnostics;
    auto machine = read_driver_gpus(*sysroot, diagnostics);
    if (!machine) {
        return machine.error();
    }
    for (const UnusableGpu& gpu : machine->unusable) {
        if (gpu.severity == Severity::Error) {
            return error("cannot number the host's GPUs: " + gpu.bdf + ": " + gpu.reason +
                         "; fix the driver's entry or name GPUs the host has");
        }
    }
    oci::HostGpus host;
    host.listed = machine->minors_from_driver;
    for (const Gpu& gpu : machine->gpus) {
        host.gpus.push_back({gpu.bdf, gpu.minor, gpu.uuid});
    }
    auto address = [](const std::string& text) {
        limit::PciAddress parsed;
        limit::parse_pci_address(text.data(), text.size(), parsed);
        return parsed;
    };
    std::sort(host.gpus.begin(), host.gpus.end(),
              [&](const oci::HostGpu& a, const oci::HostGpu& b) {
                  return limit::pci_address_before(address(a.pci), address(b.pci));
              });
    return host;
}

struct Edited {
    bool changed = false;
    std::string text;
};

// The common part of the hook and the shim: the config text in, the text
// out (`changed` false: write the input as it was). `group` empty: learn it
// from the spec (the hook).
Result<Edited> edit_config(std::string_view text, std::string group, const std::string& library,
                           const std::string& state_root, const std::string& root) {
    auto spec = oci::parse_spec(text);
    if (!spec) {
        // A config our strict parser refuses but that cannot ask for the
        // limit is the runtime's business, not ours.
        if (text.find("AMP_VGPU_ENABLE") == std::string_view::npos) {
            return Edited{};
        }
        return spec.error();
    }
    if (!oci::limit_requested(*spec)) {
        return Edited{};
    }
    if (group.empty()) {
        if (auto known = oci::group_from_spec(*spec)) {
            group = *known;
        } else {
            auto made = oci::random_group_name();
            if (!made) {
                return made.error();
            }
            group = *made;
        }
    }
    if (!oci::valid_group_name(group)) {
        return error("the container id " + quote(group) +
                     " is not a group name ([A-Za-z0-9._-], 1 to 64 characters)");
    }
    if (auto found = check_library(library); !found) {
        return found.error();
    }
    auto host = read_host_gpus(root);
    if (!host) {
        return host.error();
    }
    auto devices = oci::container_devices(*spec, *host);
    if (!devices) {
        return devices.error();
    }
    auto owner = oci::state_owner(*spec);
    if (!owner) {
        return owner.error();
    }
    if (auto prepared = oci::prepare_host(state_root, group, *owner); !prepared) {
        return prepared.error();
    }
    oci::EditOptions options;
    options.library = library;
    options.state_root = state_root;
    options.group = group;
    options.daemon_socket = oci::daemon_socket_present(state_root);
    options.devices = *devices;
    if (!oci::edit_spec(*spec, options)) {
        return Edited{};
    }
    return Edited{true, serialize_json(*spec)};
}

void note(const char* program, const std::string& message) {
    std::string line = std::string(program) + ": " + message + "\n";
    (void)!::write(STDERR_FILENO, line.data(), line.size());
}

int hook_precreate(const std::string& library, const std::string& state_root,
                   const std::string& root) {
    auto text = read_all(STDIN_FILENO, "the config on stdin");
    if (!text) {
        return report_failure("gpu-limit oci-hook", text.error(), false, 0, kLimitCannotRun);
    }
    auto edited = edit_config(*text, {}, library, state_root, root);
    if (!edited) {
        return report_failure("gpu-limit oci-hook", edited.error(), false, 0, kLimitCannotRun);
    }
    auto written = write_all(STDOUT_FILENO, edited->changed ? edited->text : *text, "stdout");
    if (!written) {
        return report_failure("gpu-limit oci-hook", written.error(), false, 0, kLimitCannotRun);
    }
    return kLimitOk;
}

// Removes a group's directory, saying why it stays when it does.
int cleanup(const char* program, const std::string& state_root, const std::string& group,
            int verbosity) {
    auto removed = oci::remove_group(state_root, group);
    if (!removed) {
        return report_failure(program, removed.error(), false, 0, kLimitCannotRun);
    }
    if (*removed == oci::Cleanup::InUse && verbosity >= 0) {
        note(program, state_root + "/" + group +
                          " is still held by a live process of the group: left in place");
    }
    return kLimitOk;
}

int hook_poststop(const std::string& state_root, int verbosity) {
    auto text = read_all(STDIN_FILENO, "the state on stdin");
    if (!text) {
        return report_failure("gpu-limit oci-hook", text.error(), false, 0, kLimitCannotRun);
    }
    auto group = oci::group_from_state(*text);
    if (!group) {
        return report_failure("gpu-limit oci-hook", group.error(), false, 0, kLimitCannotRun);
    }
    return cleanup("gpu-limit oci-hook", state_root, *group, verbosity);
}

// --- the runtime shim ---

constexpr const char* kRuntimeDirs[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                                        "/usr/bin",        "/sbin",          "/bin"};
constexpr const char* kRuntimeNames[] = {"nvidia-container-runtime", "runc", "crun"};

bool is_self(const struct stat& candidate) {
    struct stat self {};
    return ::stat("/proc/self/exe", &self) == 0 && self.st_dev == candidate.st_dev &&
           self.st_ino == candidate.st_ino;
}

// The real runtime: --runtime-path, $GPU_LIMIT_RUNTIME (the environment of
// containerd or podman, both root's), else a fixed list: $PATH is whatever
// the daemon was started with, and a runtime runs every container as root.
Result<std::string> find_runtime(const std::optional<std::string>& given) {
    std::optional<std::string> chosen = given;
    const char* from = "--runtime-path";
    if (!chosen) {
        if (const char* value = std::getenv("GPU_LIMIT_RUNTIME"); value != nullptr && *value) {
            chosen = value;
            from = "GPU_LIMIT_RUNTIME";
        }
    }
    if (chosen) {
        if ((*chosen)[0] != '/') {
            return error(std::string(from) + "=" + quote(*chosen) + " is not an absolute path");
        }
        struct stat status {};
        if (::stat(chosen->c_str(), &status) == 0 && is_self(status)) {
            return error(std::string(from) + " names gpu-limit itself; name runc, crun or "
                                             "nvidia-container-runtime");
        }
        return *chosen;
    }
    for (const char* name : kRuntimeNames) {
        for (const char* dir : kRuntimeDirs) {
            std::string path = std::string(dir) + "/" + name;
            struct stat status {};
            if (::stat(path.c_str(), &status) == 0 && S_ISREG(status.st_mode) &&
                (status.st_mode & 0111) != 0 && !is_self(status)) {
                return path;
            }
        }
    }
    return error("no OCI runtime found (nvidia-container-runtime, runc or crun in /usr/sbin, "
                 "/usr/bin, ...); install runc or give --runtime-path PATH in daemon.json's "
                 "runtimeArgs");
}

// The runtime's own options we need: where it logs, in which format.
struct RuntimeLog {
    std::string path;
    bool json = false;
};

RuntimeLog runtime_log(const std::vector<std::string>& forward, const std::string& command) {
    RuntimeLog log;
    for (size_t i = 0; i < forward.size() && forward[i] != command; ++i) {
        const std::string& word = forward[i];
        for (const char* name : {"--log", "-log", "--log-format", "-log-format"}) {
            std::string option = name;
            std::optional<std::string> value;
            if (word == option && i + 1 < forward.size()) {
                value = forward[i + 1];
            } else if (word.rfind(option + "=", 0) == 0) {
                value = word.substr(option.size() + 1);
            }
            if (!value) {
                continue;
            }
            if (option.find("format") != std::string::npos) {
                log.json = *value == "json";
            } else {
                log.path = *value;
            }
        }
    }
    return log;
}

// Says why the container was not created, on stderr and, as runc would,
// in the runtime's log: containerd reports the log's last error to docker,
// which shows it to the user ("OCI runtime create failed: ...").
int runtime_failure(const RuntimeLog& log, const Diagnostic& failure, int code) {
    std::string message = "gpu-limit runtime: " + failure.text();
    if (!log.path.empty() && log.path[0] == '/') {
        UniqueFd fd(
            ::open(log.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
        if (fd.valid()) {
            std::string line;
            if (log.json) {
                JsonValue entry = JsonValue::make_object();
                entry.member("level") = JsonValue::make_string("error");
                entry.member("msg") = JsonValue::make_string(message);
                char stamp[32];
                std::time_t now = std::time(nullptr);
                struct tm utc {};
                ::gmtime_r(&now, &utc);
                std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
                entry.member("time") = JsonValue::make_string(stamp);
                line = serialize_json(entry) + "\n";
            } else {
                line = message + "\n";
            }
            (void)write_all(fd.get(), line, log.path);
        }
    }
    note("gpu-limit runtime", failure.text());
    return code;
}

// Rewrites the bundle's config.json: a temporary file in the bundle with the
// old one's owner and mode, renamed over it, so the runtime reads the old
// config or the new, whole.
Status edit_bundle(const oci::RuntimeCall& call, const std::string& library,
                   const std::string& state_root) {
    if (call.config) {
        return error("crun's --config is not supported by gpu-limit runtime: give the "
                     "bundle's config.json");
    }
    std::string bundle = call.bundle.value_or(".");
    UniqueFd dir(::open(bundle.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid()) {
        return errno_error("cannot open the bundle " + bundle);
    }
    UniqueFd file(::openat(dir.get(), "config.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!file.valid()) {
        return errno_error("cannot open " + bundle + "/config.json");
    }
    struct stat status {};
    if (::fstat(file.get(), &status) != 0 || !S_ISREG(status.st_mode)) {
        return error(bundle + "/config.json is not a regular file");
    }
    auto text = read_all(file.get(), "config.json");
    if (!text) {
        return text.error();
    }
    file.reset();
    auto edited = edit_config(*text, call.id, library, state_root, call.host_root.value_or("/"));
    if (!edited) {
        return edited.error();
    }
    if (!edited->changed) {
        return {};
    }
    std::string temp = temp_name("config.json");
    UniqueFd out(::openat(dir.get(), temp.c_str(),
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          status.st_mode & 07777));
    if (!out.valid()) {
        return errno_error("cannot write " + bundle + "/" + temp);
    }
    Status written = write_all(out.get(), edited->text, bundle + "/" + temp);
    if (written && (::fchown(out.get(), status.st_uid, status.st_gid) != 0 ||
                    ::fchmod(out.get(), status.st_mode & 07777) != 0 || ::fsync(out.get()) != 0)) {
        written = errno_error("cannot finish " + bundle + "/" + temp);
    }
    if (written && ::renameat(dir.get(), temp.c_str(), dir.get(), "config.json") != 0) {
        written = errno_error("cannot replace " + bundle + "/config.json");
    }
    if (!written) {
        ::unlinkat(dir.get(), temp.c_str(), 0);
    }
    return written;
}

std::vector<char*> exec_argv(const std::string& runtime, std::vector<std::string>& forward) {
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(runtime.c_str()));
    for (std::string& word : forward) {
        argv.push_back(word.data());
    }
    argv.push_back(nullptr);
    return argv;
}

} // namespace

int limit_oci_hook_main(int argc, char** argv) {
    enum { kOptLibrary = 256, kOptStateRoot };
    Cli cli("gpu-limit oci-hook", kHookUsage, kLimitUsage);
    cli.add_options("", {{"library", required_argument, nullptr, kOptLibrary},
                         {"state-root", required_argument, nullptr, kOptStateRoot}});
    std::string library = GPUINIT_LIMIT_LIBRARY;
    std::string state_root = oci::kStateRoot;
    for (int opt = cli.next(argc, argv); opt != -1; opt = cli.next(argc, argv)) {
        switch (opt) {
        case kOptLibrary:
            library = optarg;
            break;
        case kOptStateRoot:
            state_root = optarg;
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
        return hook_precreate(library, state_root, cli.common.root);
    }
    if (stage == "poststop") {
        return hook_poststop(state_root, cli.common.verbosity);
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
    RuntimeLog log = runtime_log(call->forward, call->command);
    auto runtime = find_runtime(call->runtime_path);
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
    // By name (containerd's BinaryName, a RuntimeClass) no words of ours
    // come: the same settings from the environment of containerd or dockerd
    // (root's), as GPU_LIMIT_RUNTIME.
    auto setting = [](const std::optional<std::string>& given, const char* variable,
                      const char* fallback) {
        if (given) {
            return *given;
        }
        const char* value = std::getenv(variable);
        return std::string(value != nullptr && *value != '\0' ? value : fallback);
    };
    std::string library = setting(call->library, "GPU_LIMIT_LIBRARY", GPUINIT_LIMIT_LIBRARY);
    std::string state_root = setting(call->state_root, "GPU_LIMIT_STATE_ROOT", oci::kStateRoot);
    call->host_root = setting(call->host_root, "GPU_LIMIT_HOST_ROOT", "/");
    if (call->command == "create" || call->command == "run") {
        if (auto edited = edit_bundle(*call, library, state_root); !edited) {
            return runtime_failure(log, edited.error(), kLimitCannotRun);
        }
    }
    std::vector<char*> exec_args = exec_argv(*runtime, call->forward);
    std::fflush(stdout);
    std::fflush(stderr);
    if (call->command != "delete" || !oci::valid_group_name(call->id)) {
        ::execv(runtime->c_str(), exec_args.data());
        int saved = errno;
        return runtime_failure(log, os_error(saved, "cannot run " + *runtime),
                               saved == ENOENT ? kLimitCommandNotFound : kLimitCommandCannotRun);
    }
    // delete: the group's directory goes once the runtime has removed the
    // container, so the runtime runs as a child this once.
    pid_t child = ::fork();
    if (child < 0) {
        return runtime_failure(log, errno_error("cannot fork"), kLimitCannotRun);
    }
    if (child == 0) {
        ::execv(runtime->c_str(), exec_args.data());
        int saved = errno;
        runtime_failure(log, os_error(saved, "cannot run " + *runtime), 0);
        ::_exit(saved == ENOENT ? kLimitCommandNotFound : kLimitCommandCannotRun);
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) {
            return runtime_failure(log, errno_error("cannot wait for " + *runtime),
                                   kLimitCannotRun);
        }
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == 0) {
        auto removed = oci::remove_group(state_root, call->id);
        if (!removed) {
            note("gpu-limit runtime", removed.error().text());
        } else if (*removed == oci::Cleanup::InUse) {
            note("gpu-limit runtime",
                 state_root + "/" + call->id + " is still held by a live process: left in place");
        }
    }
    return code;
}

const Command kLimitRuntimeCommand = {"limit-runtime", "gpu-limit-runtime", limit_runtime_main,
                                      "gpu-limit runtime by its own name (containerd, Kubernetes)",
                                      kLimitCannotRun};

} // namespace gpuinit::tools
