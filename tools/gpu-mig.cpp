// gpu-mig: MIG instances for jobs: pick free ones race-free under leases,
// keep the leases in step with the instances, list who uses what. See
// gpu-mig(8).
#include "common/cli.hpp"
#include "common/command.hpp"
#include "common/exit_codes.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/mig/leases.hpp"
#include "gpuinit/mig/pick.hpp"
#include "render/mig_report.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace gpuinit::tools {

namespace {

constexpr const char* kUsage =
    "Usage: gpu-mig pick [OPTION]... [--hold -- CMD [ARG]...]\n"
    "       gpu-mig list [--json]\n"
    "       gpu-mig sync [--json]           (root; after every 'nvidia-smi mig' change)\n"
    "pick prints the ids of free MIG instances for CUDA_VISIBLE_DEVICES and leases\n"
    "them: with --hold, CMD runs with CUDA_VISIBLE_DEVICES set and holds the lease\n"
    "while it runs; otherwise a keeper process holds it until --until PID (default:\n"
    "the calling process) exits:  export CUDA_VISIBLE_DEVICES=$(gpu-mig pick --until $$)\n"
    "Only instances on GPUs that CUDA_VISIBLE_DEVICES (else NVIDIA_VISIBLE_DEVICES)\n"
    "names count. sync makes /run/gpu-mig: one lease file per compute instance.\n"
    "\n"
    "pick options:\n"
    "  -p, --profile P      only instances of profile P (e.g. 1g.10gb)\n"
    "  -n, --count N        N instances, all or none (default 1)\n"
    "  -w, --wait SECONDS   when none is free, keep trying this long (default 0)\n"
    "  -f, --format F       print MIG UUIDs (uuid, the default) or keys (key:\n"
    "                       gpu1/gi7/ci0)\n"
    "      --hold           run the command after -- holding the lease\n"
    "      --until PID      hold the lease until PID exits (a shell: $$)\n"
    "Common options:\n"
    "  -r, --root DIR       paths under DIR (default /)\n"
    "  -j, --json           list, sync: print the result as JSON\n"
    "  -v, --verbose        more detail\n"
    "  -q, --quiet          errors only\n"
    "  -h, --help           show this help\n"
    "  -V, --version        show the version\n"
    "\n"
    "Exit status: 0 ok; 1 usage error; 2 sync or list partly failed; 3 cannot\n"
    "run (no leases: run sync; unknown MIG UUIDs or profiles; bad\n"
    "CUDA_VISIBLE_DEVICES; no /proc); 4 pick: no free instance; with --hold,\n"
    "CMD's status (126 not executable, 127 not found).\n";

constexpr uint64_t kMaxWaitSeconds = 604800; // a week

struct MigOptions {
    std::string profile;
    unsigned count = 1;
    unsigned wait_seconds = 0;
    bool uuid = true;
    bool hold = false;
    std::optional<pid_t> until;
    bool pick_option = false; // any of the above given
};

int fail(const CommonOptions& common, const Diagnostic& failure, int code) {
    Diagnostics diagnostics;
    diagnostics.add(failure);
    if (common.json) {
        JsonWriter json;
        json.begin_object();
        json.key("exit_code").value(code);
        json.key("diagnostics");
        write_diagnostics_json(json, diagnostics);
        json.end_object();
        emit_json(json);
        return code;
    }
    Rendered rendered;
    render_diagnostics("gpu-mig", diagnostics, common.verbosity, rendered);
    emit(rendered);
    return code;
}

std::optional<std::string> env(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

// The machine, its MIG topology and instances. Problems with single
// instances go to `diagnostics`; nullopt (after printing) when nothing can
// be read.
struct MigView {
    Machine machine;
    std::vector<MigInstance> instances;
};

Result<MigView> read_view(const Sysroot& root, Diagnostics& diagnostics) {
    auto machine = discover_machine(root, diagnostics, PciNeed{PciNeed::Scope::None, {}});
    if (!machine) {
        return machine.error();
    }
    auto topology = read_mig_topology(root, diagnostics);
    if (!topology) {
        return topology.error();
    }
    MigView view{std::move(*machine), {}};
    view.instances = join_mig_instances(view.machine, *topology, diagnostics);
    // Profile names and MIG UUIDs (NVML or nvidia-smi output) are filled in
    // here once the names API lands; until then they stay empty: unknown.
    return view;
}

int run_sync(const CommonOptions& common, const Sysroot& root) {
    Diagnostics diagnostics;
    auto view = read_view(root, diagnostics);
    if (!view) {
        return fail(common, view.error(), kMigCannotRun);
    }
    // TODO(issue 11, item 2): make the cap nodes here, through gpu-mknod's
    // MIG step in the devnodes layer, before the leases; not done yet: sync
    // does the lease bookkeeping only.
    //
    // An incomplete instance list must not cost a live instance its lease.
    bool complete = !diagnostics.has_errors();
    auto sync = sync_leases(root, view->instances, complete, diagnostics);
    if (!sync) {
        return fail(common, sync.error(), kMigCannotRun);
    }
    if (!complete) {
        diagnostics.warning("some instances could not be read: leases of instances that seem "
                            "gone were kept; fix the errors above and rerun gpu-mig sync");
    }
    int code = diagnostics.has_errors() ? kMigPartial : kMigOk;
    std::string dir = root.display(kMigLeaseDir);
    if (common.json) {
        std::string json = render_mig_sync_json(*sync, dir, diagnostics, code);
        std::fwrite(json.data(), 1, json.size(), stdout);
    } else {
        emit(render_mig_sync_text(*sync, dir, diagnostics, common.verbosity));
    }
    return code;
}

int run_list(const CommonOptions& common, const Sysroot& root) {
    Diagnostics diagnostics;
    auto view = read_view(root, diagnostics);
    if (!view) {
        return fail(common, view.error(), kMigCannotRun);
    }
    auto uses = instance_uses(root, view->machine, view->instances, diagnostics);
    if (!uses) {
        return fail(common, uses.error(), kMigCannotRun);
    }
    int code = diagnostics.has_errors() ? kMigPartial : kMigOk;
    if (common.json) {
        std::string json = render_mig_list_json(*uses, diagnostics, code);
        std::fwrite(json.data(), 1, json.size(), stdout);
    } else {
        emit(render_mig_list_text(*uses, diagnostics, common.verbosity));
    }
    return code;
}

int run_pick(const CommonOptions& common, const Sysroot& root, const MigOptions& options,
             char** command) {
    Diagnostics diagnostics;
    auto view = read_view(root, diagnostics);
    if (!view) {
        return fail(common, view.error(), kMigCannotRun);
    }
    PickRequest request;
    request.profile = options.profile;
    request.count = options.count;
    request.need_uuid = options.uuid;
    request.cuda_visible_devices = env("CUDA_VISIBLE_DEVICES");
    request.nvidia_visible_devices = env("NVIDIA_VISIBLE_DEVICES");
    request.wait = std::chrono::seconds(options.wait_seconds);
    auto pick = pick_instances(root, view->machine, view->instances, request, diagnostics);
    Rendered rendered;
    render_diagnostics("gpu-mig", diagnostics, common.verbosity, rendered);
    emit(rendered);
    if (!pick) {
        return fail(common, pick.error(),
                    pick.error().reason == static_cast<int>(PickFailure::NoneFree) ? kMigNoneFree
                                                                                   : kMigCannotRun);
    }
    std::string ids = mig_ids(pick->instances, options.uuid);
    if (options.hold) {
        std::fflush(stdout);
        auto ran = exec_holding(*pick, ids, command);
        return fail(common, ran.error(),
                    ran.error().code == ENOENT ? kMigCommandNotFound : kMigCommandCannotRun);
    }
    auto keeper = keep_leases(*pick, options.until);
    if (!keeper) {
        return fail(common, keeper.error(), kMigCannotRun);
    }
    Rendered out;
    out.out = ids + "\n";
    if (common.verbosity > 0) {
        out.err = format("gpu-mig: keeper PID %d holds the lease until PID %d exits\n",
                         static_cast<int>(*keeper),
                         static_cast<int>(options.until.value_or(::getppid())));
    }
    emit(out);
    return kMigOk;
}

int run(int argc, char** argv) {
    enum { kOptHold = 256, kOptUntil };
    // CMD starts after the first "--"; getopt would mix it with the words.
    char** command = nullptr;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--") == 0) {
            command = argv + i + 1;
            argc = i;
            break;
        }
    }
    Cli cli("gpu-mig", kUsage, kMigUsage);
    cli.add_options("p:n:w:f:", {{"profile", required_argument, nullptr, 'p'},
                                 {"count", required_argument, nullptr, 'n'},
                                 {"wait", required_argument, nullptr, 'w'},
                                 {"format", required_argument, nullptr, 'f'},
                                 {"hold", no_argument, nullptr, kOptHold},
                                 {"until", required_argument, nullptr, kOptUntil}});
    MigOptions options;
    for (int opt = cli.next(argc, argv); opt != -1; opt = cli.next(argc, argv)) {
        options.pick_option = true;
        switch (opt) {
        case 'p':
            options.profile = optarg;
            break;
        case 'n': {
            auto count = parse_decimal(optarg, 64);
            if (!count || *count == 0) {
                return cli.usage_error("--count takes a number from 1 to 64");
            }
            options.count = static_cast<unsigned>(*count);
            break;
        }
        case 'w': {
            auto wait = parse_decimal(optarg, kMaxWaitSeconds);
            if (!wait) {
                return cli.usage_error("--wait takes whole seconds (at most a week)");
            }
            options.wait_seconds = static_cast<unsigned>(*wait);
            break;
        }
        case 'f':
            if (std::strcmp(optarg, "uuid") != 0 && std::strcmp(optarg, "key") != 0) {
                return cli.usage_error("--format takes uuid or key");
            }
            options.uuid = std::strcmp(optarg, "uuid") == 0;
            break;
        case kOptHold:
            options.hold = true;
            break;
        case kOptUntil: {
            auto pid = parse_decimal(optarg, INT32_MAX);
            if (!pid || *pid == 0) {
                return cli.usage_error("--until takes a process id");
            }
            options.until = static_cast<pid_t>(*pid);
            break;
        }
        default:
            return cli.usage_error("unknown option");
        }
    }
    if (cli.must_exit()) {
        return cli.exit_code();
    }
    std::vector<std::string_view> words(argv + optind, argv + argc);
    if (words.size() != 1) {
        return cli.usage_error(words.empty() ? "which command: pick, list or sync?"
                                             : "one command at a time: pick, list or sync");
    }
    std::string_view verb = words[0];
    if (verb != "pick" && (options.pick_option || command != nullptr)) {
        return cli.usage_error("pick's options and -- CMD go with pick only");
    }
    if (verb == "pick") {
        if (options.hold != (command != nullptr && *command != nullptr)) {
            return cli.usage_error("--hold needs a command after --, and a command needs --hold");
        }
        if (options.hold && options.until) {
            return cli.usage_error("--hold and --until do not go together");
        }
        if (cli.common.json) {
            return cli.usage_error("--json is for list and sync; pick prints ids");
        }
    } else if (verb != "list" && verb != "sync") {
        return cli.usage_error("unknown command " + quote(verb) + ": pick, list or sync");
    }
    auto root = Sysroot::open(cli.common.root);
    if (!root) {
        return fail(cli.common, root.error(), kMigCannotRun);
    }
    if (verb == "sync") {
        return run_sync(cli.common, *root);
    }
    if (verb == "list") {
        return run_list(cli.common, *root);
    }
    return run_pick(cli.common, *root, options, command);
}

} // namespace

const Command kMigCommand = {"mig", "gpu-mig", run,
                             "pick free MIG instances under leases; list and sync them",
                             kMigCannotRun};

} // namespace gpuinit::tools
