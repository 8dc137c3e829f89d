// gpu-mknod: create or repair the NVIDIA device nodes with per-GPU owners,
// groups and modes. See gpu-mknod(8).
#include "gpuinit/base/text.hpp"
#include "gpuinit/devnodes/mknod.hpp"
#include "gpuinit/host/pci.hpp"
#include "gpuinit/host/procfs.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <getopt.h>

namespace {

constexpr const char* kUsage =
    "Usage: gpu-mknod [OPTION]...\n"
    "Create or repair /dev/nvidia* with the owner, group and mode that\n"
    "/etc/gpu-restriction.conf gives each GPU (default: /dev/nvidiaN is\n"
    "root:nvidiaN 0660, control nodes root:root 0666).\n"
    "\n"
    "  -r, --root DIR       work on the machine tree under DIR (default /)\n"
    "  -n, --dry-run        print the plan, change nothing\n"
    "  -d, --device GPU     only this GPU (minor or PCI address), for udev\n"
    "  -c, --control        only the control nodes (nvidiactl, nvidia-uvm, ...)\n"
    "      --remove         with --device: delete the nodes of a GPU that went away\n"
    "  -j, --json           print the result as JSON\n"
    "  -v, --verbose        also list nodes that are already correct\n"
    "  -q, --quiet          print errors only\n"
    "  -h, --help           show this help\n"
    "  -V, --version        show the version\n"
    "\n"
    "Exit status: 0 all done; 1 usage error; 2 partial (some GPU could not be\n"
    "set up); 3 nothing could be done (driver not loaded, bad policy file).\n";

int usage_error(const char* message) {
    std::fprintf(stderr, "gpu-mknod: %s\nTry 'gpu-mknod --help'.\n", message);
    return gpuinit::kExitUsage;
}

bool valid_device(const char* text) {
    return gpuinit::parse_decimal(text, gpuinit::kMaxGpuMinor).has_value() ||
           gpuinit::normalize_bdf(text).has_value();
}

} // namespace

int main(int argc, char** argv) {
    enum { kOptRemove = 256 };
    static const struct option kOptions[] = {
        {"root", required_argument, nullptr, 'r'},
        {"dry-run", no_argument, nullptr, 'n'},
        {"device", required_argument, nullptr, 'd'},
        {"control", no_argument, nullptr, 'c'},
        {"remove", no_argument, nullptr, kOptRemove},
        {"json", no_argument, nullptr, 'j'},
        {"verbose", no_argument, nullptr, 'v'},
        {"quiet", no_argument, nullptr, 'q'},
        {"help", no_argument, nullptr, 'h'},
        {"version", no_argument, nullptr, 'V'},
        {nullptr, 0, nullptr, 0},
    };
    gpuinit::MknodOptions options;
    bool json = false;
    int verbosity = 0;
    int opt = 0;
    while ((opt = getopt_long(argc, argv, "r:nd:cjvqhV", kOptions, nullptr)) != -1) {
        switch (opt) {
        case 'r':
            options.root = optarg;
            break;
        case 'n':
            options.dry_run = true;
            break;
        case 'd':
            if (!valid_device(optarg)) {
                return usage_error("--device takes a minor (0-253) or a PCI address such as "
                                   "0000:17:00.0");
            }
            if (options.request.scope != gpuinit::PlanRequest::Scope::All) {
                return usage_error("give one --device, or --control");
            }
            options.request.scope = gpuinit::PlanRequest::Scope::Device;
            options.request.device = optarg;
            break;
        case 'c':
            if (options.request.scope != gpuinit::PlanRequest::Scope::All) {
                return usage_error("--control and --device exclude each other");
            }
            options.request.scope = gpuinit::PlanRequest::Scope::Control;
            break;
        case kOptRemove:
            options.remove = true;
            break;
        case 'j':
            json = true;
            break;
        case 'v':
            verbosity = 1;
            break;
        case 'q':
            verbosity = -1;
            break;
        case 'h':
            std::fputs(kUsage, stdout);
            return gpuinit::kExitOk;
        case 'V':
            std::puts("gpu-mknod " GPUINIT_VERSION);
            return gpuinit::kExitOk;
        default:
            return usage_error("unknown option");
        }
    }
    if (optind < argc) {
        return usage_error("unexpected argument");
    }
    if (options.remove && options.request.scope != gpuinit::PlanRequest::Scope::Device) {
        return usage_error("--remove needs --device");
    }

    gpuinit::MknodOutcome outcome = gpuinit::run_mknod(options);
    if (json) {
        std::fputs(gpuinit::render_json(outcome).c_str(), stdout);
    } else {
        std::string report = gpuinit::render_text(outcome, verbosity);
        // Errors go to stderr so udev and init logs keep them; the plan to stdout.
        for (std::string_view line : gpuinit::split_lines(report)) {
            bool is_error = gpuinit::starts_with(line, "gpu-mknod: error:") ||
                            gpuinit::starts_with(line, "gpu-mknod: warning:");
            std::fwrite(line.data(), 1, line.size(), is_error ? stderr : stdout);
            std::fputc('\n', is_error ? stderr : stdout);
        }
    }
    return outcome.exit_code;
}
