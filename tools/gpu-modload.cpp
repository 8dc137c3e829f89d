// gpu-modload: load the NVIDIA modules through libkmod with their NVreg
// options, or --check what the loaded driver uses. See gpu-modload(8).
#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/modules/driver_check.hpp"
#include "gpuinit/modules/modules.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <getopt.h>
#include <string>

namespace {

constexpr const char* kUsage =
    "Usage: gpu-modload [OPTION]... [MODULE [PARAM=VALUE]...]...\n"
    "Load kernel modules through libkmod: dependencies first, options merged from\n"
    "modprobe.d, the kernel command line and this command line (last wins).\n"
    "Without MODULE: nvidia, then nvidia_uvm.\n"
    "\n"
    "  -r, --root DIR       use DIR's lib/modules, modprobe.d and /sys (default /)\n"
    "  -k, --release REL    kernel release (default: the running kernel)\n"
    "  -m, --modeset        also load nvidia_modeset and nvidia_drm\n"
    "  -n, --dry-run        print what would be inserted, in order, with options\n"
    "  -f, --force          load blacklisted modules too\n"
    "      --run-install    run modprobe.d 'install' commands (ignored by default)\n"
    "  -c, --check          check the loaded driver's parameters against the policy\n"
    "  -j, --json           print the result as JSON\n"
    "  -v, --verbose        also say which module index and release are used\n"
    "  -q, --quiet          print errors only\n"
    "  -h, --help           show this help\n"
    "  -V, --version        show the version\n"
    "\n"
    "Exit status: 0 ok; 1 usage; 2 module not found; 3 insert failed (unknown\n"
    "symbol, bad parameter, vermagic); 4 signature rejected; 5 permission denied;\n"
    "6 blacklisted; 7 --check found a dangerous setting; 8 other error;\n"
    "9 --check: driver not loaded.\n";

int usage_error(const char* message) {
    std::fprintf(stderr, "gpu-modload: %s\nTry 'gpu-modload --help'.\n", message);
    return gpuinit::kModloadUsage;
}

const char* step_verb(gpuinit::ModuleStep::Kind kind, bool dry_run) {
    switch (kind) {
    case gpuinit::ModuleStep::Kind::Insert:
        return dry_run ? "insmod" : "loaded";
    case gpuinit::ModuleStep::Kind::AlreadyLoaded:
        return "already-loaded";
    case gpuinit::ModuleStep::Kind::Builtin:
        return "builtin";
    case gpuinit::ModuleStep::Kind::RunInstall:
        return dry_run ? "install" : "installed";
    }
    return "?";
}

void print_steps(const std::vector<gpuinit::ModuleStep>& steps, bool dry_run, int verbosity) {
    if (verbosity < 0) {
        return;
    }
    for (const gpuinit::ModuleStep& step : steps) {
        std::string detail;
        if (step.kind == gpuinit::ModuleStep::Kind::RunInstall) {
            detail = step.command;
        } else if (step.kind == gpuinit::ModuleStep::Kind::Insert) {
            detail = step.path + (step.options.empty() ? "" : " " + step.options);
        } else {
            detail = "left alone";
        }
        std::printf("%-15s %-16s %s\n", step_verb(step.kind, dry_run), step.name.c_str(),
                    detail.c_str());
    }
}

std::string steps_json(const std::vector<gpuinit::ModuleStep>& steps, bool dry_run, int exit_code,
                       const std::string& error) {
    gpuinit::JsonWriter json;
    json.begin_object().key("dry_run").value(dry_run).key("exit_code").value(exit_code);
    if (!error.empty()) {
        json.key("error").value(error);
    }
    json.key("steps").begin_array();
    for (const gpuinit::ModuleStep& step : steps) {
        json.begin_object();
        json.key("action").value(step_verb(step.kind, true));
        json.key("module").value(step.name);
        json.key("path").value(step.path);
        json.key("options").value(step.options);
        json.key("command").value(step.command);
        json.end_object();
    }
    json.end_array().end_object();
    return json.str() + "\n";
}

int run_check(const gpuinit::Sysroot& root, bool json_output, int verbosity) {
    auto check = gpuinit::check_driver(root);
    if (!check) {
        std::fprintf(stderr, "gpu-modload: error: %s\n", check.error().message.c_str());
        return gpuinit::kModloadOtherError;
    }
    int code = !check->driver_loaded    ? gpuinit::kModloadDriverNotLoaded
               : check->dangers.empty() ? gpuinit::kModloadOk
                                        : gpuinit::kModloadCheckFailed;
    if (json_output) {
        gpuinit::JsonWriter json;
        json.begin_object().key("driver_loaded").value(check->driver_loaded);
        json.key("exit_code").value(code);
        if (check->driver_loaded) {
            json.key("DeviceFileUID").value(check->uid).key("DeviceFileGID").value(check->gid);
            json.key("DeviceFileMode")
                .value(gpuinit::format_mode(static_cast<unsigned>(check->mode)));
            json.key("ModifyDeviceFiles").value(check->modify_device_files);
            json.key("policy").value(check->policy_source);
            json.key("not_in_params").begin_array();
            for (const std::string& name : check->not_in_params) {
                json.value(name);
            }
            json.end_array();
        }
        json.key("dangers").begin_array();
        for (const std::string& danger : check->dangers) {
            json.value(danger);
        }
        json.end_array().end_object();
        std::printf("%s\n", json.str().c_str());
        return code;
    }
    if (!check->driver_loaded) {
        std::fprintf(stderr, "gpu-modload: the nvidia driver is not loaded (no %s)\n",
                     root.display("proc/driver/nvidia/params").c_str());
        return code;
    }
    if (verbosity >= 0) {
        auto origin = [&](const char* name) {
            const auto& missing = check->not_in_params;
            return std::find(missing.begin(), missing.end(), name) == missing.end()
                       ? ""
                       : "  (not in params: the driver's default)";
        };
        std::printf("DeviceFileUID      %llu%s\n", static_cast<unsigned long long>(check->uid),
                    origin("DeviceFileUID"));
        std::printf("DeviceFileGID      %llu%s\n", static_cast<unsigned long long>(check->gid),
                    origin("DeviceFileGID"));
        std::printf("DeviceFileMode     %s (%llu)%s\n",
                    gpuinit::format_mode(static_cast<unsigned>(check->mode)).c_str(),
                    static_cast<unsigned long long>(check->mode), origin("DeviceFileMode"));
        std::printf("ModifyDeviceFiles  %llu%s\n",
                    static_cast<unsigned long long>(check->modify_device_files),
                    origin("ModifyDeviceFiles"));
        std::printf("policy             %s\n", check->policy_source.c_str());
    }
    for (const std::string& danger : check->dangers) {
        std::fprintf(stderr, "gpu-modload: DANGER: %s\n", danger.c_str());
    }
    if (code == gpuinit::kModloadOk && verbosity >= 0) {
        std::puts("gpu-modload: the driver's parameters cannot undo or widen the policy");
    }
    return code;
}

} // namespace

int main(int argc, char** argv) {
    enum { kOptRunInstall = 256 };
    static const struct option kOptions[] = {
        {"root", required_argument, nullptr, 'r'},
        {"release", required_argument, nullptr, 'k'},
        {"modeset", no_argument, nullptr, 'm'},
        {"dry-run", no_argument, nullptr, 'n'},
        {"force", no_argument, nullptr, 'f'},
        {"run-install", no_argument, nullptr, kOptRunInstall},
        {"check", no_argument, nullptr, 'c'},
        {"json", no_argument, nullptr, 'j'},
        {"verbose", no_argument, nullptr, 'v'},
        {"quiet", no_argument, nullptr, 'q'},
        {"help", no_argument, nullptr, 'h'},
        {"version", no_argument, nullptr, 'V'},
        {nullptr, 0, nullptr, 0},
    };
    std::string root_dir = "/";
    gpuinit::ModloadOptions options;
    bool modeset = false;
    bool dry_run = false;
    bool check = false;
    bool json_output = false;
    int verbosity = 0;
    int opt = 0;
    while ((opt = getopt_long(argc, argv, "+r:k:mnfcjvqhV", kOptions, nullptr)) != -1) {
        switch (opt) {
        case 'r':
            root_dir = optarg;
            break;
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
        case 'c':
            check = true;
            break;
        case 'j':
            json_output = true;
            break;
        case 'v':
            verbosity = 1;
            break;
        case 'q':
            verbosity = -1;
            break;
        case 'h':
            std::fputs(kUsage, stdout);
            return gpuinit::kModloadOk;
        case 'V':
            std::puts("gpu-modload " GPUINIT_VERSION);
            return gpuinit::kModloadOk;
        default:
            return usage_error("unknown option");
        }
    }
    for (int i = optind; i < argc; ++i) {
        if (argv[i][0] == '-') {
            // Options go before the first MODULE: this word would otherwise
            // become a module name or, with '=', a module parameter.
            return usage_error("options must come before the first MODULE");
        }
        if (std::strchr(argv[i], '=') != nullptr) {
            if (options.modules.empty()) {
                return usage_error("a PARAM=VALUE must follow a MODULE");
            }
            options.modules.back().options.emplace_back(argv[i]);
        } else {
            options.modules.push_back({argv[i], {}});
        }
    }
    auto root = gpuinit::Sysroot::open(root_dir);
    if (!root) {
        std::fprintf(stderr, "gpu-modload: error: %s\n", root.error().message.c_str());
        return gpuinit::kModloadUsage;
    }
    if (check) {
        if (!options.modules.empty()) {
            return usage_error("--check takes no modules");
        }
        return run_check(*root, json_output, verbosity);
    }
    if (options.modules.empty()) {
        options.modules = {{"nvidia", {}}, {"nvidia_uvm", {}}};
    }
    if (modeset) {
        options.modules.push_back({"nvidia_modeset", {}});
        options.modules.push_back({"nvidia_drm", {}});
    }

    gpuinit::KernelLoader loader(*root);
    gpuinit::ModloadFailure failure;
    auto plan = gpuinit::plan_modules(*root, options, loader, &failure);
    if (plan && verbosity > 0 && !json_output) {
        std::printf("gpu-modload: module index %s\n", plan->modules_dir.c_str());
    }
    std::vector<gpuinit::ModuleStep> steps;
    if (plan && !dry_run) {
        gpuinit::ModloadReport report = gpuinit::execute_plan(*plan, loader);
        steps = std::move(report.done);
        failure = std::move(report.failure);
    } else if (plan) {
        steps = plan->steps;
    }
    if (json_output) {
        std::fputs(steps_json(steps, dry_run, failure.exit_code, failure.message).c_str(), stdout);
    } else {
        print_steps(steps, dry_run, verbosity);
        if (failure.exit_code != gpuinit::kModloadOk) {
            std::fprintf(stderr, "gpu-modload: error: %s\n", failure.message.c_str());
        }
    }
    return failure.exit_code;
}
