// gpu-mig: MIG instances for jobs: pick free ones race-free under leases,
// keep the cap nodes, leases and names in step with the instances, list who
// uses what, and give Slurm its gres.conf and jobs their MIG UUIDs. See
// gpu-mig(8).
#include "common/cli.hpp"
#include "common/command.hpp"
#include "common/exit_codes.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/devnodes/mknod.hpp"
#include "gpuinit/mig/apply_run.hpp"
#include "gpuinit/mig/commands.hpp"
#include "gpuinit/persist/client.hpp"
#include "render/mig_report.hpp"
#include "render/mknod_report.hpp"

#include <algorithm>
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
    "       gpu-mig sync [--json]    (root; after every 'nvidia-smi mig' change)\n"
    "       gpu-mig release KEY [--json]    (root: take a lease back)\n"
    "       gpu-mig gres [--node NAME] [--type-style S] [--type-map FILE]\n"
    "                    [--slurm-conf | --check FILE] [--json]\n"
    "       gpu-mig env [--gres-conf FILE] [--json]    (a Slurm TaskProlog)\n"
    "       gpu-mig apply [--dry-run | --check] [--force] [--reset-if-needed] [--json]\n"
    "pick prints the ids of free MIG instances for CUDA_VISIBLE_DEVICES and leases\n"
    "them: with --hold, CMD runs with CUDA_VISIBLE_DEVICES set and holds the lease\n"
    "while it runs; otherwise a keeper process holds it until --until PID (default:\n"
    "the calling process) exits:  export CUDA_VISIBLE_DEVICES=$(gpu-mig pick --until $$)\n"
    "Only instances on GPUs that CUDA_VISIBLE_DEVICES (else NVIDIA_VISIBLE_DEVICES)\n"
    "names count, whose CI cap node you may open, up to mig-leases-per-user (default\n"
    "1, /etc/gpu-restriction.conf) held at once. sync makes the cap nodes (as gpu-mknod --mig), "
    "one lease file per\n"
    "compute instance in /run/gpu-mig, and its names file (profiles, MIG UUIDs).\n"
    "list shows who holds each lease (root: every holder, user and job). release\n"
    "replaces a lease, so its holder's lock no longer counts, and says who held it.\n"
    "apply (root) makes the GPUs match /etc/gpu-mig-layout.conf (MIG mode, GPU and\n"
    "compute instances), through NVML where it loads, else nvidia-smi, then syncs.\n"
    "gres prints gres.conf for this node; env prints export CUDA_VISIBLE_DEVICES=\n"
    "with the MIG UUIDs of the devices in SLURM_STEP_GPUS (else SLURM_JOB_GPUS).\n"
    "\n"
    "pick options:\n"
    "  -p, --profile P      only instances of profile P (e.g. 1g.10gb)\n"
    "  -n, --count N        N instances, all or none (default 1)\n"
    "  -w, --wait SECONDS   when none is free, keep trying this long (default 0)\n"
    "  -f, --format F       print MIG UUIDs (uuid, the default) or keys (key:\n"
    "                       gpu1/gi7/ci0)\n"
    "      --hold           run the command after -- holding the lease\n"
    "      --until PID      hold the lease until PID exits (a shell: $$)\n"
    "gres options:\n"
    "      --node NAME      NodeName=NAME on every line\n"
    "      --type-style S   autodetect (default: the types Slurm's NVML autodetect\n"
    "                       gives, so AutoDetect=nvml can follow without renaming)\n"
    "                       or profile (1g.10gb)\n"
    "      --type-map FILE  lines 'GENERATED-TYPE SITE-TYPE': the site's own names\n"
    "      --slurm-conf     print only slurm.conf's Gres=gpu:TYPE:N,... for the node\n"
    "      --check FILE     compare FILE (an existing gres.conf) with the machine\n"
    "      --if-exists      with --check: a FILE that is not there (or \"\") passes\n"
    "env options:\n"
    "      --gres-conf FILE the gres.conf slurmd read (default: beside $SLURM_CONF,\n"
    "                       else /etc/slurm/gres.conf)\n"
    "apply options:\n"
    "      --dry-run        print the steps, change nothing\n"
    "      --check          change nothing; exit 4 when a GPU differs from the layout\n"
    "      --force          change a GPU even with processes on it (the driver\n"
    "                       still keeps an instance a process uses)\n"
    "      --reset-if-needed  reset an idle GPU whose MIG mode change waits for one\n"
    "      --nvidia-smi PROGRAM  nvidia-smi to use (default: PATH's)\n"
    "Common options:\n"
    "      --nvidia-smi-output DIR  profiles and MIG UUIDs from saved nvidia-smi\n"
    "                       output (DIR/L.txt, q.xml, mig-lgi.txt, mig-lci.txt)\n"
    "  -r, --root DIR       paths under DIR (default /)\n"
    "  -j, --json           list, sync, release, gres, env: print the result as JSON\n"
    "  -v, --verbose        more detail\n"
    "  -q, --quiet          errors only\n"
    "  -h, --help           show this help\n"
    "  -V, --version        show the version\n"
    "\n"
    "Exit status: 0 ok, 1 usage, 2 partial, 3 failed, 4 differs, 5 not permitted, 6 busy, "
    "126 CMD cannot run, 127 CMD not found (gpuinit(8)).\n";

constexpr uint64_t kMaxWaitSeconds = 604800; // a week

struct MigOptions {
    // pick
    std::string profile;
    unsigned count = 1;
    unsigned wait_seconds = 0;
    bool uuid = true;
    bool hold = false;
    std::optional<pid_t> until;
    bool pick_option = false; // any of the above given
    // gres
    std::string node;
    GresTypeStyle type_style = GresTypeStyle::Autodetect;
    std::string type_map;
    std::string check;
    bool slurm_conf = false;
    bool gres_option = false;
    bool check_given = false;
    bool if_exists = false;
    // env
    std::string gres_conf;
    // apply
    mig::ApplyRequest apply;
    bool apply_option = false;
    // every command
    std::string smi_output;
};

int fail(const CommonOptions& common, const Diagnostic& failure, int code) {
    return report_failure("gpu-mig", failure, common.json, common.verbosity, code);
}

std::optional<std::string> env(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

void print_json(const std::string& json) {
    std::fwrite(json.data(), 1, json.size(), stdout);
}

// sync: the cap nodes (gpu-mknod --mig), then the leases, then the names.
int run_sync(const CommonOptions& common, const Sysroot& root, const MigOptions& options) {
    mig::SyncOutcome outcome = mig::sync(root, {options.smi_output});
    MknodReportContext context{root.root(), mig_nodes_exit(outcome.nodes.status), "gpu-mig"};
    int code = mig_sync_exit(outcome);
    if (common.json) {
        if (outcome.status == mig::SyncOutcome::Status::NothingDone) {
            print_json(render_mknod_json(outcome.nodes, context) + "\n");
            return code;
        }
        if (outcome.status == mig::SyncOutcome::Status::Failed) {
            return fail(common, *outcome.failure, kMigCannotRun);
        }
        MigSyncReport report{outcome.leases, outcome.lease_dir, outcome.view.instances,
                             outcome.view.names_source};
        print_json(render_mig_sync_json(report, outcome.nodes, context, outcome.diagnostics, code));
        return code;
    }
    emit(render_sync_outcome_text(outcome, context, common.verbosity));
    return code;
}

// gpu-persist lets a GPU go for apply's reset, and takes it back.
class PersistResetHolder : public mig::ResetHolder {
  public:
    explicit PersistResetHolder(const Sysroot& root) : root_(root) {}
    Result<bool> release(const GpuIdentity& gpu) override {
        return persist_release_for_reset(root_, gpu);
    }
    Status hold(const GpuIdentity& gpu) override { return persist_hold_after_reset(root_, gpu); }

  private:
    const Sysroot& root_;
};

// apply: the declared layout made real, then sync.
int run_apply(const CommonOptions& common, const Sysroot& root, const mig::ApplyRequest& request) {
    PersistResetHolder holder(root);
    auto report = mig::run_apply(root, request, nullptr, &holder);
    if (!report) {
        return fail(common, report.error(), kMigCannotRun);
    }
    MknodReportContext context{
        root.root(), report->sync ? mig_nodes_exit(report->sync->nodes.status) : 0, "gpu-mig"};
    int code = mig_apply_exit(*report, request.mode);
    if (common.json) {
        print_json(render_mig_apply_json(*report, context, code));
    } else {
        emit(render_mig_apply_text(
            *report, context, request.mode == mig::ApplyRequest::Mode::DryRun, common.verbosity));
    }
    return code;
}

// release (root): the lease of one instance taken back.
int run_release(const CommonOptions& common, const Sysroot& root, std::string_view key) {
    Diagnostics diagnostics;
    auto release = mig::release(root, key, diagnostics);
    if (!release) {
        int code = release.error().code == EPERM || release.error().code == EACCES
                       ? kMigNotPermitted
                       : kMigCannotRun;
        return fail(common, release.error(), code);
    }
    if (common.json) {
        print_json(render_mig_release_json(*release, diagnostics, kMigOk));
        return kMigOk;
    }
    Rendered rendered;
    render_diagnostics("gpu-mig", diagnostics, common.verbosity, rendered);
    Rendered released = render_mig_release_text(*release, common.verbosity);
    rendered.out += released.out;
    rendered.err += released.err;
    emit(rendered);
    return kMigOk;
}

int run_list(const CommonOptions& common, const Sysroot& root, const MigOptions& options) {
    Diagnostics diagnostics;
    auto uses = mig::list(root, options.smi_output, diagnostics);
    if (!uses) {
        return fail(common, uses.error(), kMigCannotRun);
    }
    int code = diagnostics.has_errors() ? kMigPartial : kMigOk;
    if (common.json) {
        print_json(render_mig_list_json(*uses, diagnostics, code));
    } else {
        emit(render_mig_list_text(*uses, diagnostics, common.verbosity));
    }
    return code;
}

int run_pick(const CommonOptions& common, const Sysroot& root, const MigOptions& options,
             char** command) {
    Diagnostics diagnostics;
    mig::PickCommand pick_command;
    PickRequest& request = pick_command.request;
    request.profile = options.profile;
    request.count = options.count;
    request.need_uuid = options.uuid;
    request.cuda_visible_devices = env("CUDA_VISIBLE_DEVICES");
    request.nvidia_visible_devices = env("NVIDIA_VISIBLE_DEVICES");
    request.wait = std::chrono::seconds(options.wait_seconds);
    pick_command.smi_output = options.smi_output;
    auto pick = mig::pick(root, pick_command, diagnostics);
    Rendered rendered;
    render_diagnostics("gpu-mig", diagnostics, common.verbosity, rendered);
    emit(rendered);
    if (!pick) {
        bool busy = pick.error().reason == static_cast<int>(PickFailure::NoneFree) ||
                    pick.error().reason == static_cast<int>(PickFailure::OverLimit);
        return fail(common, pick.error(), busy ? kMigNoneFree : kMigCannotRun);
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

int run_gres(const CommonOptions& common, const Sysroot& root, const MigOptions& options) {
    Diagnostics diagnostics;
    if (options.check_given && options.check.empty()) {
        if (common.verbosity >= 0) {
            std::fputs("gpu-mig: no gres.conf named; nothing to check\n", stdout);
        }
        return kMigOk; // only with --if-exists (run checks it)
    }
    auto gres = mig::gres(root,
                          {options.type_style, options.type_map, options.check, options.if_exists,
                           options.node, options.smi_output},
                          diagnostics);
    if (!gres) {
        Rendered rendered;
        render_diagnostics("gpu-mig", diagnostics, common.verbosity, rendered);
        emit(rendered);
        return fail(common, gres.error(), kMigCannotRun);
    }
    if (gres->check_skipped) {
        if (common.verbosity >= 0) {
            std::fputs(("gpu-mig: " + options.check + " is not there; nothing to check\n").c_str(),
                       stdout);
        }
        return kMigOk;
    }
    if (gres->findings) {
        int code = gres->findings->empty() ? kMigOk : kMigDiffers;
        if (common.json) {
            print_json(render_gres_check_json(*gres->findings, options.check, diagnostics, code));
        } else {
            emit(render_gres_check_text(*gres->findings, options.check, diagnostics,
                                        common.verbosity));
        }
        return code;
    }
    Rendered rendered;
    render_diagnostics("gpu-mig", diagnostics, common.verbosity, rendered);
    if (common.json) {
        rendered.out = render_gres_json(gres->plan, options.node, diagnostics, kMigOk);
    } else if (options.slurm_conf) {
        rendered.out = render_slurm_gres(gres->plan) + "\n";
    } else {
        rendered.out = render_gres_conf(gres->plan, options.node) +
                       "# slurm.conf: NodeName=" + (options.node.empty() ? "..." : options.node) +
                       " " + render_slurm_gres(gres->plan) + "\n";
    }
    emit(rendered);
    return kMigOk;
}

int run_env(const CommonOptions& common, const Sysroot& root, const MigOptions& options) {
    Diagnostics diagnostics;
    auto found =
        mig::slurm_env(root,
                       {env("SLURM_STEP_GPUS"), env("SLURM_JOB_GPUS"), env("SLURM_CONF"),
                        env("SLURMD_NODENAME").value_or(""), options.gres_conf, options.smi_output},
                       diagnostics);
    if (!found) {
        Rendered rendered;
        render_diagnostics("gpu-mig", diagnostics, common.verbosity, rendered);
        // slurmstepd shows a TaskProlog's "print" lines in the job's output
        // (and ends the task when the prolog fails): say why there.
        if (!common.json) {
            rendered.out = "print gpu-mig env: " + found.error().text() + "\n";
        }
        emit(rendered);
        return fail(common, found.error(), kMigCannotRun);
    }
    if (common.json) {
        print_json(render_env_json(found->allocation.variable, found->allocation.indices,
                                   found->ids, diagnostics, kMigOk));
        return kMigOk;
    }
    if (found->allocation.variable.empty()) {
        return kMigOk; // a job without GPUs: nothing to change
    }
    Rendered rendered;
    render_diagnostics("gpu-mig", diagnostics, common.verbosity, rendered);
    // slurmstepd reads "export NAME=VALUE" lines from a TaskProlog's stdout.
    rendered.out = "export CUDA_VISIBLE_DEVICES=";
    for (size_t i = 0; i < found->ids.size(); ++i) {
        rendered.out += (i == 0 ? "" : ",") + found->ids[i];
    }
    rendered.out += "\n";
    emit(rendered);
    return kMigOk;
}

// gpu-mig's long options without a letter.
constexpr int kOptHold = 256, kOptUntil = 257, kOptNode = 258, kOptTypeStyle = 259,
              kOptTypeMap = 260, kOptCheck = 261, kOptSlurmConf = 262, kOptGresConf = 263,
              kOptSmiOutput = 264, kOptIfExists = 265, kOptDryRun = 266, kOptForce = 267,
              kOptResetIfNeeded = 268, kOptNvidiaSmi = 269;

void add_mig_options(Cli& cli) {
    cli.add_options("p:n:w:f:", {{"profile", required_argument, nullptr, 'p'},
                                 {"count", required_argument, nullptr, 'n'},
                                 {"wait", required_argument, nullptr, 'w'},
                                 {"format", required_argument, nullptr, 'f'},
                                 {"hold", no_argument, nullptr, kOptHold},
                                 {"until", required_argument, nullptr, kOptUntil},
                                 {"node", required_argument, nullptr, kOptNode},
                                 {"type-style", required_argument, nullptr, kOptTypeStyle},
                                 {"type-map", required_argument, nullptr, kOptTypeMap},
                                 // gres --check FILE, apply --check
                                 {"check", optional_argument, nullptr, kOptCheck},
                                 {"if-exists", no_argument, nullptr, kOptIfExists},
                                 {"dry-run", no_argument, nullptr, kOptDryRun},
                                 {"force", no_argument, nullptr, kOptForce},
                                 {"reset-if-needed", no_argument, nullptr, kOptResetIfNeeded},
                                 {"nvidia-smi", required_argument, nullptr, kOptNvidiaSmi},
                                 {"slurm-conf", no_argument, nullptr, kOptSlurmConf},
                                 {"gres-conf", required_argument, nullptr, kOptGresConf},
                                 {"nvidia-smi-output", required_argument, nullptr, kOptSmiOutput}});
}

// apply and sync use NVML (else nvidia-smi); pick and env read sync's files.
bool uses_nvml(int argc, char** argv) {
    Cli cli("gpu-mig", kUsage, kMigUsage);
    add_mig_options(cli);
    return cli.subcommand_is(argc, argv, {"apply", "sync"});
}

int run(int argc, char** argv) {
    char** command = split_command(argc, argv);
    Cli cli("gpu-mig", kUsage, kMigUsage);
    add_mig_options(cli);
    MigOptions options;
    bool env_option = false;
    for (int opt = cli.next(argc, argv); opt != -1; opt = cli.next(argc, argv)) {
        bool gres = opt == kOptNode || opt == kOptTypeStyle || opt == kOptTypeMap ||
                    opt == kOptSlurmConf || opt == kOptIfExists;
        bool apply = opt == kOptDryRun || opt == kOptForce || opt == kOptResetIfNeeded ||
                     opt == kOptNvidiaSmi;
        options.gres_option = options.gres_option || gres;
        options.apply_option = options.apply_option || apply;
        env_option = env_option || opt == kOptGresConf;
        options.pick_option = options.pick_option || (!gres && !apply && opt != kOptCheck &&
                                                      opt != kOptGresConf && opt != kOptSmiOutput);
        switch (opt) {
        case kOptNode:
            if (*optarg == '\0' || std::strpbrk(optarg, " \t=#") != nullptr) {
                return cli.usage_error("--node takes a host name");
            }
            options.node = optarg;
            break;
        case kOptTypeStyle:
            if (std::strcmp(optarg, "autodetect") != 0 && std::strcmp(optarg, "profile") != 0) {
                return cli.usage_error("--type-style takes autodetect or profile");
            }
            options.type_style = std::strcmp(optarg, "profile") == 0 ? GresTypeStyle::Profile
                                                                     : GresTypeStyle::Autodetect;
            break;
        case kOptTypeMap:
            options.type_map = optarg;
            break;
        case kOptCheck:
            // gres --check FILE as well as --check=FILE; apply's takes none.
            if (optarg == nullptr && optind < argc && argv[optind][0] != '-') {
                optarg = argv[optind++];
            }
            options.check_given = true;
            options.check = optarg != nullptr ? optarg : "";
            break;
        case kOptIfExists:
            options.if_exists = true;
            break;
        case kOptDryRun:
            options.apply.mode = mig::ApplyRequest::Mode::DryRun;
            break;
        case kOptForce:
            options.apply.options.force = true;
            break;
        case kOptResetIfNeeded:
            options.apply.options.reset_if_needed = true;
            break;
        case kOptNvidiaSmi:
            options.apply.nvidia_smi = optarg;
            break;
        case kOptSlurmConf:
            options.slurm_conf = true;
            break;
        case kOptGresConf:
            options.gres_conf = optarg;
            break;
        case kOptSmiOutput:
            options.smi_output = optarg;
            break;
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
    if (words.empty()) {
        return cli.usage_error("which command: pick, list, sync, release, gres, env or apply?");
    }
    std::string_view verb = words[0];
    if (words.size() != (verb == "release" ? 2U : 1U)) {
        return cli.usage_error(verb == "release" ? "release takes one instance key (gpu1/gi7/ci0)"
                                                 : "one command at a time");
    }
    if (verb != "pick" && (options.pick_option || command != nullptr)) {
        return cli.usage_error("pick's options and -- CMD go with pick only");
    }
    if (verb != "gres" && options.gres_option) {
        return cli.usage_error("--node, --type-style, --type-map, --if-exists and --slurm-conf "
                               "go with gres only");
    }
    if (verb != "apply" && options.apply_option) {
        return cli.usage_error("--dry-run, --force, --reset-if-needed and --nvidia-smi go with "
                               "apply only");
    }
    if (verb == "gres" && options.check_given && options.check.empty() && !options.if_exists) {
        return cli.usage_error("gres --check takes a FILE");
    }
    if (verb == "gres" && options.if_exists && !options.check_given) {
        return cli.usage_error("--if-exists goes with --check FILE");
    }
    if (verb == "apply" && options.check_given) {
        if (!options.check.empty()) {
            return cli.usage_error("apply --check takes no FILE");
        }
        if (options.apply.mode == mig::ApplyRequest::Mode::DryRun) {
            return cli.usage_error("--dry-run and --check do not go together");
        }
        options.apply.mode = mig::ApplyRequest::Mode::Check;
    }
    if (verb != "gres" && verb != "apply" && options.check_given) {
        return cli.usage_error("--check goes with gres or apply");
    }
    if (verb != "env" && env_option) {
        return cli.usage_error("--gres-conf goes with env only");
    }
    if (verb == "gres" && options.slurm_conf && (!options.check.empty() || cli.common.json)) {
        return cli.usage_error(
            "--slurm-conf prints the fragment alone: not with --check or --json");
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
    } else if (verb != "list" && verb != "sync" && verb != "release" && verb != "gres" &&
               verb != "env" && verb != "apply") {
        return cli.usage_error("unknown command " + quote(verb) +
                               ": pick, list, sync, release, gres, env or apply");
    }
    bool changes = verb == "sync" || verb == "release" ||
                   (verb == "apply" && options.apply.mode == mig::ApplyRequest::Mode::Apply);
    if (int refused = cli.refuse_unless_root(changes && cli.common.root == "/",
                                             "change MIG nodes, leases or layout", "");
        refused != 0) {
        return refused;
    }
    auto root = Sysroot::open(cli.common.root);
    if (!root) {
        return fail(cli.common, root.error(), kMigCannotRun);
    }
    if (verb == "sync") {
        return run_sync(cli.common, *root, options);
    }
    if (verb == "list") {
        return run_list(cli.common, *root, options);
    }
    if (verb == "release") {
        return run_release(cli.common, *root, words[1]);
    }
    if (verb == "gres") {
        return run_gres(cli.common, *root, options);
    }
    if (verb == "env") {
        return run_env(cli.common, *root, options);
    }
    if (verb == "apply") {
        options.apply.smi_output = options.smi_output;
        return run_apply(cli.common, *root, options.apply);
    }
    return run_pick(cli.common, *root, options, command);
}

} // namespace

const Command kMigCommand = {
    "mig",         "gpu-mig", run, "MIG cap nodes, leases, free-instance picks, gres.conf, job env",
    kMigCannotRun, uses_nvml};

} // namespace gpuinit::tools
