// gpuinit status: one overview of the machine from the tools' own checks,
// one exit code, a table, JSON or node_exporter's textfile. See
// gpuinit-status(8).
#include "common/cli.hpp"
#include "common/command.hpp"
#include "common/exit_codes.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/status/probes.hpp"
#include "render/status_report.hpp"

#include <cstdio>

namespace gpuinit::tools {

namespace {

constexpr const char* kProgram = "gpuinit status";

constexpr const char* kUsage =
    "Usage: gpuinit status [OPTION]...\n"
    "Check the machine as a whole, each part with its own tool's check: the\n"
    "driver's parameters against the policy (gpu-modload --check), the device\n"
    "nodes (gpu-mknod --check), the GPUs gpu-persist holds, the MIG instances\n"
    "with their names and leases (gpu-mig), and the gpu-limit daemon and\n"
    "groups. A part that is not set up here is reported, not a failure.\n"
    "\n"
    "  -r, --root DIR       check the machine tree under DIR (default /)\n"
    "  -p, --prometheus FILE  also write FILE in node_exporter's textfile\n"
    "                       format, atomically\n"
    "  -t, --timeout SECONDS  each probe's deadline (default 10)\n"
    "  -j, --json           print the report as JSON\n"
    "  -v, --verbose        list every row, not only those with a problem\n"
    "  -q, --quiet          print only the reason of a problem\n"
    "  -h, --help           show this help\n"
    "  -V, --version        show the version\n"
    "\n"
    "Exit status: 0 ok, 1 usage, 2 partial, 3 failed, 4 differs, 5 not permitted (gpuinit(8)).\n";

// The first problem's code, on the table of gpuinit(8).
int exit_code_of(const status::Report& report) {
    auto first = report.first_problem();
    if (!first) {
        return kExitOk;
    }
    switch (report.sections[*first].verdict) {
    case status::Verdict::Differs:
        return kExitDiffers;
    case status::Verdict::Partial:
        return kExitPartial;
    case status::Verdict::NotPermitted:
        return kExitNotPermitted;
    default:
        return kExitFailed;
    }
}

int run(int argc, char** argv) {
    Cli cli(kProgram, kUsage, kExitUsage);
    cli.add_options("p:t:", {{"prometheus", required_argument, nullptr, 'p'},
                             {"timeout", required_argument, nullptr, 't'}});
    std::string prometheus;
    status::StatusOptions options;
    for (int opt = cli.next(argc, argv); opt != -1; opt = cli.next(argc, argv)) {
        switch (opt) {
        case 'p':
            prometheus = optarg;
            if (prometheus.empty()) {
                return cli.usage_error("--prometheus needs a file");
            }
            break;
        case 't': {
            auto seconds = parse_decimal(optarg, 3600);
            if (!seconds || *seconds == 0) {
                return cli.usage_error("--timeout takes 1..3600 seconds");
            }
            options.probe_timeout = std::chrono::seconds(*seconds);
            break;
        }
        default:
            return cli.usage_error("unknown option");
        }
    }
    if (cli.must_exit()) {
        return cli.exit_code();
    }
    if (optind < argc) {
        return cli.usage_error("unexpected argument");
    }
    auto root = Sysroot::open(cli.common.root);
    if (!root) {
        return report_failure(kProgram, root.error(), cli.common.json, cli.common.verbosity,
                              kExitFailed);
    }
    status::Report report = status::run_status(*root, options);
    int code = exit_code_of(report);
    if (!prometheus.empty()) {
        auto written = status::write_textfile(prometheus, render_status_prometheus(report, code));
        if (!written) {
            std::string line =
                std::string(kProgram) + ": error: " + printable(written.error().text()) + "\n";
            std::fputs(line.c_str(), stderr);
            code = kExitFailed;
        }
    }
    if (cli.common.json) {
        std::string json = render_status_json(report, code);
        std::fwrite(json.data(), 1, json.size(), stdout);
        Rendered rendered = render_status_text(report, code, -1);
        emit(Rendered{"", rendered.err});
    } else {
        emit(render_status_text(report, code, cli.common.verbosity));
    }
    return code;
}

} // namespace

const Command kStatusCommand = {
    "status",    "gpuinit-status", run, "the whole machine: driver, nodes, persist, MIG, limits",
    kExitFailed, nullptr};

} // namespace gpuinit::tools
