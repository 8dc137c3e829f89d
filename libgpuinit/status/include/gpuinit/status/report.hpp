// `gpuinit status`: the machine as a whole, assembled from the other layers'
// own checks (the driver check, the node plan, gpu-persist's reply, the MIG
// instances and their names and leases, the limiter's groups). This header is
// the report and its pure assembly: library results in, sections out, no I/O.
// The probes that produce those results are in probes.hpp.
#pragma once

#include "gpuinit/base/diag.hpp"
#include "gpuinit/base/result.hpp"
#include "gpuinit/devnodes/mknod.hpp"
#include "gpuinit/limit/launch.hpp"
#include "gpuinit/mig/names.hpp"
#include "gpuinit/mig/pick.hpp"
#include "gpuinit/modules/driver_check.hpp"
#include "gpuinit/persist/control.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuinit::status {

// What one probe found. The order is the tool's exit code's order of
// precedence only through the sections' order (the first problem wins).
enum class Verdict {
    Ok,            // everything it checks is as configured
    NotConfigured, // the part is not set up on this machine: not a problem
    Differs,       // it ran and found something that is not as configured
    Partial,       // it ran, but part of what it judges could not be read
    Failed,        // it could not run (unreadable input, no daemon that should answer)
    NotPermitted,  // it needs root (or an admin group) to see this
    TimedOut,      // it did not finish within its deadline (a wedged GPU?)
};
const char* verdict_name(Verdict verdict);
// Whether the probe itself gave an answer (gpuinit_probe_success): a
// difference is an answer; a failure, a refusal or a timeout is not.
bool probe_succeeded(Verdict verdict);
bool is_problem(Verdict verdict);

// One row of the table: a GPU, a node, an instance, a group.
struct Item {
    std::string what;   // "/dev/nvidia0", "gpu1/gi7/ci0", "GPU 0 (0000:17:00.0)"
    std::string state;  // "ok", "held", "failed", "leased", "differs"...
    std::string detail; // why, or who holds it; "" none
    bool problem = false;
    bool operator==(const Item&) const = default;
};

// One sample of the Prometheus textfile (its family is in kMetricFamilies).
struct Metric {
    std::string name;
    std::vector<std::pair<std::string, std::string>> labels;
    double value = 0;
    bool operator==(const Metric&) const = default;
};

struct Section {
    std::string probe; // "driver", "nodes", "persist", "mig", "limit"
    Verdict verdict = Verdict::Ok;
    std::string reason; // one line: the first problem and its fix, or why not configured
    double seconds = 0; // how long the probe took
    std::vector<Item> items;
    std::vector<Metric> metrics;
    bool operator==(const Section&) const = default;
};

struct MetricFamily {
    const char* name;
    const char* type; // "gauge"
    const char* help;
};
// Every metric a section may carry, in the order the textfile lists them.
extern const std::vector<MetricFamily> kMetricFamilies;

struct Report {
    std::vector<Section> sections; // in the order they were probed
    int64_t timestamp = 0;         // unix seconds, when the run began
    // The first section with a problem; nullopt when none has one.
    std::optional<size_t> first_problem() const;
};

// The pure assembly: each takes what its layer returned.
Section assemble_driver(const Result<DriverCheck>& check, const Diagnostics& diagnostics);
// `outcome`: run_mknod with dry_run (its plan against /dev).
Section assemble_nodes(const MknodOutcome& outcome);

// gpu-persist: the daemon's reply, or why there was none, and whether the
// machine is set up to run it (see persist_configured in probes.hpp).
struct PersistFacts {
    std::optional<ControlReply> reply;
    std::optional<Diagnostic> error; // when there is no reply
    bool configured = false;
    std::string configured_by; // what says it is (the unit's link, the status file)
};
Section assemble_persist(const PersistFacts& facts);

// MIG: the instances with their leases and holders (mig::list), and the
// names file of the last gpu-mig sync (nullopt: none).
struct MigFacts {
    std::optional<InstanceUses> uses;
    std::optional<Diagnostic> error;       // when the instances could not be listed
    std::optional<MigNames> names_file;    // what the last sync wrote
    std::optional<Diagnostic> names_error; // the names file is there but refused
    Diagnostics diagnostics;
};
Section assemble_mig(const MigFacts& facts);

// The limiter: whether its daemon answers on its socket, and every group.
struct LimitFacts {
    bool daemon_up = false;
    std::string daemon_error; // why it does not answer; "" when up
    bool configured = false;  // the daemon's unit is enabled, or its directory is there
    std::optional<limit::StatusReport> groups;
    std::optional<Diagnostic> groups_error;
    Diagnostics diagnostics;
};
Section assemble_limit(const LimitFacts& facts);

// Every sample of the textfile: per probe gpuinit_probe_success,
// _configured, _ok and _duration_seconds, the sections' own, the run's
// gpuinit_status_exit_code (`exit_code`, the tool's) and
// gpuinit_last_run_timestamp_seconds, in kMetricFamilies' order.
std::vector<Metric> report_metrics(const Report& report, int exit_code);

// A section for a probe that did not give one (timed out, died).
Section failed_section(std::string probe, Verdict verdict, std::string reason);

// The sections as the child that probed writes them to its parent, and
// back. The parent bounds what it reads; a record that does not parse is
// an error, never half a section.
std::string encode_section(const Section& section);
Result<Section> decode_section(std::string_view text);

} // namespace gpuinit::status
