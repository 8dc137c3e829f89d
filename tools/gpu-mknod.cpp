// gpu-mknod: create or repair the NVIDIA device nodes with per-GPU owners,
// groups and modes. See gpu-mknod(8).
#include "common/cli.hpp"
#include "common/command.hpp"
#include "common/exit_codes.hpp"
#include "gpuinit/devnodes/explain.hpp"
#include "gpuinit/devnodes/mknod.hpp"
#include "render/mknod_report.hpp"

#include <cstdio>

namespace gpuinit::tools {

namespace {

constexpr const char* kUsage =
    "Usage: gpu-mknod [OPTION]...\n"
    "       gpu-mknod --explain [GPU] [--policy FILE] [--json]\n"
    "Create or repair /dev/nvidia* with the owner, group and mode that\n"
    "/etc/gpu-restriction.conf gives each GPU (default: /dev/nvidiaN is\n"
    "root:nvidiaN 0660, control nodes root:root 0666).\n"
    "\n"
    "  -r, --root DIR       work on the machine tree under DIR (default /)\n"
    "      --policy FILE    with --check, --dry-run or --explain: use the candidate\n"
    "                       FILE instead of /etc/gpu-restriction.conf\n"
    "      --explain [GPU]  who can open each node, and which policy line says so\n"
    "  -n, --dry-run        print the plan, change nothing\n"
    "      --check          as --dry-run, and exit 4 if anything would change\n"
    "  -d, --device GPU     only this GPU (minor, PCI address or UUID), for udev\n"
    "  -c, --control        only the control nodes (nvidiactl, nvidia-uvm, ...)\n"
    "      --mig            only the MIG capability nodes (/dev/nvidia-caps)\n"
    "      --remove         with --device: delete the nodes of a GPU that went away\n"
    "  -j, --json           print the result as JSON\n"
    "  -v, --verbose        also list entries that are already correct\n"
    "  -q, --quiet          print errors only\n"
    "  -h, --help           show this help\n"
    "  -V, --version        show the version\n"
    "\n"
    "Exit status: 0 ok, 1 usage, 2 partial, 3 nothing could be done, 4 --check found differences, "
    "5 not permitted, 6 busy (gpuinit(8)).\n";

int exit_code_of(const MknodOutcome& outcome, bool check) {
    if (outcome.status == MknodStatus::NothingDone) {
        switch (outcome.cause) {
        case MknodCause::NotPermitted:
            return kMknodNotPermitted;
        case MknodCause::Busy:
            return kMknodBusy;
        case MknodCause::Other:
            return kMknodNothingDone;
        }
        return kMknodNothingDone;
    }
    // A difference is what --check exists to find, so it outranks a partial read.
    if (check && mknod_differs(outcome)) {
        return kMknodCheckDiffers;
    }
    return outcome.status == MknodStatus::Partial ? kMknodPartial : kMknodOk;
}

int run(int argc, char** argv) {
    enum { kOptRemove = 256, kOptCheck, kOptMig, kOptPolicy, kOptExplain };
    Cli cli("gpu-mknod", kUsage, kMknodUsage);
    cli.add_options("nd:c", {{"dry-run", no_argument, nullptr, 'n'},
                             {"device", required_argument, nullptr, 'd'},
                             {"control", no_argument, nullptr, 'c'},
                             {"remove", no_argument, nullptr, kOptRemove},
                             {"check", no_argument, nullptr, kOptCheck},
                             {"mig", no_argument, nullptr, kOptMig},
                             {"policy", required_argument, nullptr, kOptPolicy},
                             {"explain", no_argument, nullptr, kOptExplain}});
    MknodOptions options;
    bool check = false;
    bool explain = false;
    for (int opt = cli.next(argc, argv); opt != -1; opt = cli.next(argc, argv)) {
        switch (opt) {
        case 'n':
            options.dry_run = true;
            break;
        case 'd': {
            if (options.request.scope != PlanRequest::Scope::All) {
                return cli.usage_error("give one of --device, --control and --mig");
            }
            auto selector = GpuSelector::parse(optarg);
            if (!selector) {
                return cli.usage_error("--device: " + selector.error().message);
            }
            options.request.scope = PlanRequest::Scope::Device;
            options.request.device = std::move(*selector);
            break;
        }
        case 'c':
            if (options.request.scope != PlanRequest::Scope::All) {
                return cli.usage_error("give one of --device, --control and --mig");
            }
            options.request.scope = PlanRequest::Scope::Control;
            break;
        case kOptRemove:
            options.remove = true;
            break;
        case kOptMig:
            if (options.request.scope != PlanRequest::Scope::All) {
                return cli.usage_error("give one of --device, --control and --mig");
            }
            options.request.scope = PlanRequest::Scope::Mig;
            break;
        case kOptCheck:
            check = true;
            options.dry_run = true;
            break;
        case kOptPolicy:
            if (*optarg == '\0') {
                return cli.usage_error("--policy needs a file name");
            }
            options.policy_file = optarg;
            break;
        case kOptExplain:
            explain = true;
            break;
        default:
            return cli.usage_error("unknown option");
        }
    }
    if (cli.must_exit()) {
        return cli.exit_code();
    }
    std::optional<GpuSelector> explained;
    if (explain && optind < argc) {
        auto selector = GpuSelector::parse(argv[optind++]);
        if (!selector) {
            return cli.usage_error("--explain: " + selector.error().message);
        }
        explained = std::move(*selector);
    }
    if (optind < argc) {
        return cli.usage_error("unexpected argument");
    }
    if (explain && (check || options.remove || options.request.scope != PlanRequest::Scope::All)) {
        return cli.usage_error("--explain takes a GPU of its own, and no --check, --device, "
                               "--control, --mig or --remove");
    }
    if (!options.policy_file.empty() && !options.dry_run && !explain) {
        return cli.usage_error("--policy only tries a candidate: add --check or --dry-run (to "
                               "apply it, install it as /etc/gpu-restriction.conf)");
    }
    options.dry_run = options.dry_run || explain;
    if (options.remove && options.request.scope != PlanRequest::Scope::Device) {
        return cli.usage_error("--remove needs --device");
    }

    if (int refused = cli.refuse_unless_root(!options.dry_run && cli.common.root == "/",
                                             "make or change /dev/nvidia*",
                                             "see what it would do with --dry-run");
        refused != 0) {
        return refused;
    }
    options.names = cli.common.json || cli.common.verbosity >= 1;
    MknodReportContext context{cli.common.root, kMknodNothingDone};
    MknodOutcome outcome;
    std::optional<unsigned> explained_minor;
    if (auto root = Sysroot::open(cli.common.root)) {
        context.root_display = root->root();
        outcome = run_mknod(*root, options);
        if (explained && outcome.status != MknodStatus::NothingDone) {
            explained_minor = explain_gpu(outcome, *explained);
        }
    } else {
        outcome.status = MknodStatus::NothingDone;
        outcome.dry_run = options.dry_run;
        outcome.diagnostics.add(root.error());
    }
    context.exit_code = exit_code_of(outcome, check);
    if (explain) {
        auto nodes = explain_nodes(outcome, explained_minor);
        if (cli.common.json) {
            std::string json = render_explain_json(outcome, nodes, context) + "\n";
            std::fwrite(json.data(), 1, json.size(), stdout);
        } else {
            emit(render_explain_text(outcome, nodes, context, cli.common.verbosity));
        }
    } else if (cli.common.json) {
        std::string json = render_mknod_json(outcome, context) + "\n";
        std::fwrite(json.data(), 1, json.size(), stdout);
    } else {
        emit(render_mknod_text(outcome, context, cli.common.verbosity));
    }
    return context.exit_code;
}

} // namespace

const Command kMknodCommand = {
    "mknod",           "gpu-mknod", run, "create or repair /dev/nvidia* with per-GPU groups",
    kMknodNothingDone, nullptr};

} // namespace gpuinit::tools
