// gpu-modload: load the NVIDIA modules through libkmod with their NVreg
// options, or --check what the loaded driver uses. See gpu-modload(8).
#include "common/cli.hpp"
#include "common/command.hpp"
#include "common/exit_codes.hpp"
#include "gpuinit/host/driver_params.hpp"
#include "gpuinit/modules/executor.hpp"
#include "gpuinit/modules/failures.hpp"
#include "gpuinit/modules/planner.hpp"
#include "render/modload_report.hpp"

#include <cstdio>
#include <cstring>
#include <optional>

namespace gpuinit::tools {

namespace {

constexpr const char* kUsage =
    "Usage: gpu-modload [OPTION]... [MODULE [PARAM=VALUE]...]...\n"
    "Load kernel modules through libkmod: dependencies first, options merged from\n"
    "modprobe.d, the kernel command line and this command line (last wins).\n"
    "Without MODULE: nvidia, then nvidia_uvm.\n"
    "\n"
    "  -r, --root DIR       use DIR's lib/modules, modprobe.d and /sys (default /);\n"
    "                       with a DIR, only --dry-run and --check, unless --live\n"
    "      --live           with --root DIR: load DIR's modules into the running\n"
    "                       kernel (judging what is loaded from the live /sys)\n"
    "  -k, --release REL    kernel release (default: the running kernel)\n"
    "  -m, --modeset        also load nvidia_modeset and nvidia_drm\n"
    "  -n, --dry-run        print what would be inserted, in order, with options\n"
    "  -f, --force          load blacklisted modules too, and options the module\n"
    "                       does not declare or refuses (with a warning)\n"
    "      --run-install    run modprobe.d 'install' commands (ignored by default)\n"
    "  -c, --check          check the loaded driver's parameters against the policy\n"
    "  -j, --json           print the result as JSON\n"
    "  -v, --verbose        also say which module index and release are used\n"
    "  -q, --quiet          print errors only\n"
    "  -h, --help           show this help\n"
    "  -V, --version        show the version\n"
    "\n"
    "Exit status: 0 ok, 1 usage, 3 failed, 4 --check: unsafe setting, 5 not permitted"
    " (gpuinit(8)).\n";

void print(const Rendered& rendered, const std::string& json, bool as_json) {
    if (as_json) {
        std::string text = json + "\n";
        std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
        emit(rendered);
    }
}

bool has_reason(const Diagnostics& diagnostics, ModuleFailure reason) {
    for (const Diagnostic& diagnostic : diagnostics.items()) {
        if (diagnostic.severity == Severity::Error &&
            diagnostic.reason == static_cast<int>(reason)) {
            return true;
        }
    }
    return false;
}

int run_check(const Sysroot& root, const std::string& release, const CommonOptions& common) {
    CheckReport report;
    report.params_path = root.display(kDriverParamsPath);
    auto check = check_driver(root, report.diagnostics);
    // What the next load would get: modprobe.d's options against the module.
    auto configured = check_configured_options(root, release, "nvidia", report.diagnostics);
    if (!configured) {
        report.diagnostics.warning("the configured options of nvidia are not checked against the"
                                   " module: " +
                                   configured.error().text());
    } else {
        for (Diagnostic& finding : *configured) {
            report.diagnostics.add(std::move(finding));
        }
    }
    if (!check) {
        report.diagnostics.add(check.error());
        report.exit_code = kModloadOtherError;
    } else {
        report.check = *check;
        report.exit_code =
            !check->driver_loaded                                        ? kModloadDriverNotLoaded
            : has_reason(report.diagnostics, ModuleFailure::CheckDanger) ? kModloadCheckFailed
            : has_reason(report.diagnostics, ModuleFailure::BadOption)   ? kModloadBadOption
            : report.diagnostics.has_errors()                            ? kModloadCheckFailed
                                                                         : kModloadOk;
    }
    print(render_check_text(report, common.verbosity), render_check_json(report), common.json);
    return report.exit_code;
}

int run(int argc, char** argv) {
    enum { kOptRunInstall = 256, kOptLive };
    Cli cli("gpu-modload", kUsage, kModloadUsage);
    cli.add_options("+k:mnfc", {{"release", required_argument, nullptr, 'k'},
                                {"modeset", no_argument, nullptr, 'm'},
                                {"dry-run", no_argument, nullptr, 'n'},
                                {"force", no_argument, nullptr, 'f'},
                                {"run-install", no_argument, nullptr, kOptRunInstall},
                                {"live", no_argument, nullptr, kOptLive},
                                {"check", no_argument, nullptr, 'c'}});
    ModloadOptions options;
    bool modeset = false;
    bool dry_run = false;
    bool check = false;
    bool live = false;
    for (int opt = cli.next(argc, argv); opt != -1; opt = cli.next(argc, argv)) {
        switch (opt) {
        case 'k':
            options.release = optarg;
            break;
        case 'm':
            modeset = true;
            break;
        case 'n':
            dry_run = true;
            break;
        case 'f':
            options.force = true;
            break;
        case kOptRunInstall:
            options.run_install = true;
            break;
        case kOptLive:
            live = true;
            break;
        case 'c':
            check = true;
            break;
        default:
            return cli.usage_error("unknown option");
        }
    }
    if (cli.must_exit()) {
        return cli.exit_code();
    }
    for (int i = optind; i < argc; ++i) {
        if (argv[i][0] == '-') {
            // Options go before the first MODULE: this word would otherwise
            // become a module name or, with '=', a module parameter.
            return cli.usage_error("options must come before the first MODULE");
        }
        if (std::strchr(argv[i], '=') != nullptr) {
            if (options.modules.empty()) {
                return cli.usage_error("a PARAM=VALUE must follow a MODULE");
            }
            options.modules.back().options.emplace_back(argv[i]);
        } else if (std::strncmp(argv[i], "NVreg_", 6) == 0) {
            // NVIDIA's parameters, never a module: "module ... not found"
            // would send the admin looking in the wrong place.
            return cli.usage_error(std::string(argv[i]) + " is a module option: give it as " +
                                   argv[i] + "=VALUE after its module");
        } else {
            options.modules.push_back({argv[i], {}});
        }
    }
    auto root = Sysroot::open(cli.common.root);
    if (!root) {
        return cli.usage_error(root.error().message);
    }
    if (check) {
        if (!options.modules.empty()) {
            return cli.usage_error("--check takes no modules");
        }
        return run_check(*root, options.release, cli.common);
    }
    // --root DIR plans DIR's modules; putting them into the running kernel
    // (and running DIR's install commands with this machine's shell) must
    // be asked for.
    if (!root->is_host() && !dry_run && !live) {
        return cli.usage_error("--root " + cli.common.root +
                               " does not load into the running kernel: add --dry-run to see the"
                               " plan, or --live to load that tree's modules into this kernel");
    }
    if (live && root->is_host()) {
        return cli.usage_error("--live is for --root DIR; without it gpu-modload loads anyway");
    }
    if (int refused =
            cli.refuse_unless_root(!dry_run, "load kernel modules", "see the plan with --dry-run");
        refused != 0) {
        return refused;
    }
    if (options.modules.empty()) {
        for (const char* name : kDefaultModules) {
            options.modules.push_back({name, {}});
        }
    }
    if (modeset) {
        for (const char* name : kModesetModules) {
            options.modules.push_back({name, {}});
        }
    }

    // What is loaded is judged where the modules go: the running kernel's
    // /sys (the host's), or, for a dry run of another root, that root's.
    std::optional<Sysroot> host;
    if (live) {
        auto opened = Sysroot::open("/");
        if (!opened) {
            return cli.usage_error(opened.error().message);
        }
        host = std::move(*opened);
    }
    KernelLoader loader(host ? *host : *root);
    StepsReport report;
    report.dry_run = dry_run;
    auto plan = plan_modules(*root, options, loader, report.diagnostics);
    if (!plan) {
        report.diagnostics.add(plan.error());
        report.exit_code = modload_exit_for(plan.error());
    } else if (!plan->option_errors.empty()) {
        // Nothing loads, and a dry run shows no plan, while an option is wrong.
        report.exit_code = modload_exit_for(plan->option_errors.front());
        for (Diagnostic& problem : plan->option_errors) {
            report.diagnostics.add(std::move(problem));
        }
    } else {
        report.modules_dir = plan->modules_dir;
        if (dry_run) {
            report.steps = plan->steps;
        } else {
            ModloadReport done = execute_plan(*plan, loader);
            report.steps = std::move(done.done);
            if (done.failure) {
                report.exit_code = modload_exit_for(*done.failure);
                report.diagnostics.add(std::move(*done.failure));
            }
        }
    }
    print(render_steps_text(report, cli.common.verbosity), render_steps_json(report),
          cli.common.json);
    return report.exit_code;
}

} // namespace

const Command kModloadCommand = {"modload",
                                 "gpu-modload",
                                 run,
                                 "load the NVIDIA modules with their NVreg options; --check them",
                                 kModloadOtherError,
                                 nullptr};

} // namespace gpuinit::tools
