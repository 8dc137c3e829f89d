#include "gpuinit/devnodes/mknod.hpp"

#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/devnodes/gpu_records.hpp"
#include "gpuinit/host/accounts.hpp"
#include "gpuinit/host/pci.hpp"
#include "gpuinit/host/policy.hpp"
#include "gpuinit/host/procfs.hpp"

#include <algorithm>

namespace gpuinit {

namespace {

MknodOutcome nothing_done(MknodOutcome outcome, std::string why) {
    outcome.exit_code = kExitNothingDone;
    outcome.fatal = std::move(why);
    return outcome;
}

void finish(MknodOutcome& outcome) {
    size_t failed = outcome.result.count(Change::Kind::Failed);
    size_t attempted = failed + outcome.result.count(Change::Kind::Create) +
                       outcome.result.count(Change::Kind::Replace) +
                       outcome.result.count(Change::Kind::Repair) +
                       outcome.result.count(Change::Kind::Remove);
    if (failed > 0 && failed == attempted && outcome.result.count(Change::Kind::Unchanged) == 0) {
        outcome.exit_code = kExitNothingDone;
    } else if (failed > 0 || outcome.plan.has_errors()) {
        outcome.exit_code = kExitPartial;
    }
}

// Returns the minor whose nodes were removed (or found already gone), so its
// record can be forgotten; nullopt when nothing was removed.
std::optional<unsigned> run_remove(const Sysroot& root, const MknodOptions& options,
                                   MknodOutcome& outcome) {
    const std::string& device = options.request.device;
    std::optional<unsigned> minor;
    if (auto number = parse_decimal(device, kMaxGpuMinor)) {
        minor = static_cast<unsigned>(*number);
    } else if (auto bdf = normalize_bdf(device)) {
        minor = recorded_minor(root, *bdf);
        if (!minor) {
            outcome.plan.problems.push_back(
                {Problem::Severity::Error,
                 "no record of GPU " + *bdf + " in " + root.display("run/gpuinit/gpus") +
                     "; pass its minor instead (gpu-mknod --remove --device N)"});
            return std::nullopt;
        }
    }
    if (!minor) {
        outcome.plan.problems.push_back(
            {Problem::Severity::Error, "'" + device + "' is neither a minor nor a PCI address"});
        return std::nullopt;
    }
    for (const Gpu& gpu : outcome.machine.gpus) {
        if (gpu.minor == *minor) {
            outcome.plan.problems.push_back(
                {Problem::Severity::Error,
                 format("GPU %u (%s) is still bound to the driver; refusing to remove its node",
                        gpu.minor, gpu.bdf.c_str())});
            return std::nullopt;
        }
    }
    unsigned major = outcome.machine.nvidia_major.value_or(kClassicNvidiaMajor);
    auto removed = remove_gpu_nodes(root, major, *minor, options.dry_run);
    if (!removed) {
        outcome.result.changes.push_back(
            {Change::Kind::Failed, "nvidia" + std::to_string(*minor), removed.error().message});
        return std::nullopt;
    }
    outcome.result = std::move(*removed);
    if (outcome.result.failed()) {
        return std::nullopt;
    }
    return minor;
}

} // namespace

MknodOutcome run_mknod(const MknodOptions& options) {
    MknodOutcome outcome;
    outcome.dry_run = options.dry_run;
    outcome.root_display = options.root.empty() ? "/" : options.root;
    auto root = Sysroot::open(options.root);
    if (!root) {
        return nothing_done(std::move(outcome), root.error().message);
    }
    auto machine = discover_machine(*root);
    if (!machine) {
        return nothing_done(std::move(outcome), machine.error().message);
    }
    outcome.machine = std::move(*machine);

    // Everything that makes the run a no-op is checked before the lock, so a
    // run that does nothing leaves nothing behind (not even run/gpuinit/lock).
    Policy policy = Policy::classic();
    if (!options.remove) {
        if (!outcome.machine.nvidia_major) {
            return nothing_done(std::move(outcome),
                                "the nvidia driver is not loaded: no 'nvidia' in " +
                                    root->display("proc/devices") + "; run gpu-modload first");
        }
        auto loaded = Policy::load(*root);
        if (!loaded) {
            return nothing_done(std::move(outcome),
                                loaded.error().message + "; nothing was changed");
        }
        policy = std::move(*loaded);
    }

    // Serialize with concurrent runs before reading anything /dev-related;
    // a dry run changes nothing and needs no lock.
    UniqueFd lock;
    if (!options.dry_run) {
        auto locked = lock_run_dir(*root);
        if (!locked) {
            return nothing_done(std::move(outcome), locked.error().message);
        }
        lock = std::move(*locked);
    }

    std::optional<unsigned> removed_minor;
    if (options.remove) {
        removed_minor = run_remove(*root, options, outcome);
    } else {
        AccountDb accounts = AccountDb::load(*root);
        outcome.plan = plan_nodes(outcome.machine, policy, accounts, options.request);
        for (const std::string& warning : accounts.warnings()) {
            outcome.plan.problems.push_back({Problem::Severity::Warning, warning});
        }
        auto result = reconcile(*root, outcome.plan, options.dry_run);
        if (!result) {
            return nothing_done(std::move(outcome), result.error().message);
        }
        outcome.result = std::move(*result);
    }
    if (!options.dry_run) {
        if (auto saved = save_gpu_records(*root, outcome.machine, removed_minor); !saved) {
            outcome.plan.problems.push_back({Problem::Severity::Warning, saved.error().message});
        }
    }
    finish(outcome);
    return outcome;
}

std::string render_text(const MknodOutcome& outcome, int verbosity) {
    std::string out;
    std::string prefix = outcome.root_display == "/" ? "/dev/" : outcome.root_display + "/dev/";
    if (!outcome.fatal.empty()) {
        return "gpu-mknod: error: " + outcome.fatal + "\n";
    }
    if (verbosity >= 0 && outcome.dry_run) {
        out += "gpu-mknod: dry run on " + outcome.root_display + ": nothing is changed\n";
    }
    if (verbosity >= 1) {
        for (const Gpu& gpu : outcome.machine.gpus) {
            out += format("gpu      %-14s minor %-3u %s %s\n", gpu.bdf.c_str(), gpu.minor,
                          gpu.uuid.empty() ? "-" : gpu.uuid.c_str(), gpu.model.c_str());
        }
    }
    int width = 0;
    for (const Change& change : outcome.result.changes) {
        width = std::max(width, static_cast<int>(prefix.size() + change.name.size()));
    }
    for (const Change& change : outcome.result.changes) {
        bool show = change.kind != Change::Kind::Unchanged || verbosity >= 1;
        if (change.kind == Change::Kind::Failed) {
            continue; // reported with the errors below
        }
        if (show && verbosity >= 0) {
            const char* verb = change_kind_name(change.kind);
            std::string shown_verb = outcome.dry_run && change.kind != Change::Kind::Unchanged
                                         ? std::string("would ") + verb
                                         : verb;
            std::string path = prefix + change.name;
            out += format("%-14s %-*s  %s\n", shown_verb.c_str(), width, path.c_str(),
                          change.detail.c_str());
        }
    }
    for (const Problem& problem : outcome.plan.problems) {
        if (problem.severity == Problem::Severity::Error || verbosity >= 0) {
            out += std::string("gpu-mknod: ") +
                   (problem.severity == Problem::Severity::Error ? "error: " : "warning: ") +
                   problem.message + "\n";
        }
    }
    for (const Change& change : outcome.result.changes) {
        if (change.kind == Change::Kind::Failed) {
            out += "gpu-mknod: error: " + change.detail + "\n";
        }
    }
    if (verbosity >= 0) {
        size_t created = outcome.result.count(Change::Kind::Create);
        size_t replaced = outcome.result.count(Change::Kind::Replace);
        size_t repaired = outcome.result.count(Change::Kind::Repair);
        size_t removed = outcome.result.count(Change::Kind::Remove);
        size_t unchanged = outcome.result.count(Change::Kind::Unchanged);
        size_t failed = outcome.result.count(Change::Kind::Failed);
        if (created + replaced + repaired + removed + failed == 0) {
            out += format("gpu-mknod: nothing to do: %zu GPU(s), %zu node(s) and link(s) already "
                          "correct\n",
                          outcome.machine.gpus.size(), unchanged);
        } else {
            out += format("gpu-mknod: %zu GPU(s): %s%zu created, %zu repaired, %zu replaced, %zu "
                          "removed, %zu unchanged, %zu failed\n",
                          outcome.machine.gpus.size(), outcome.dry_run ? "would be " : "", created,
                          repaired, replaced, removed, unchanged, failed);
        }
    }
    return out;
}

std::string render_json(const MknodOutcome& outcome) {
    JsonWriter json;
    json.begin_object();
    json.key("root").value(outcome.root_display);
    json.key("dry_run").value(outcome.dry_run);
    json.key("exit_code").value(outcome.exit_code);
    if (!outcome.fatal.empty()) {
        json.key("fatal").value(outcome.fatal);
    }
    json.key("driver_loaded").value(outcome.machine.nvidia_major.has_value());
    json.key("minors_from_driver").value(outcome.machine.minors_from_driver);
    json.key("gpus").begin_array();
    for (const Gpu& gpu : outcome.machine.gpus) {
        json.begin_object();
        json.key("bdf").value(gpu.bdf);
        json.key("minor").value(gpu.minor);
        json.key("uuid").value(gpu.uuid);
        json.key("model").value(gpu.model);
        json.end_object();
    }
    json.end_array();
    json.key("unusable_gpus").begin_array();
    for (const UnusableGpu& gpu : outcome.machine.unusable) {
        json.begin_object();
        json.key("bdf").value(gpu.bdf);
        json.key("reason").value(gpu.reason);
        json.end_object();
    }
    json.end_array();
    json.key("nodes").begin_array();
    for (const NodeSpec& node : outcome.plan.nodes) {
        json.begin_object();
        json.key("path").value("/dev/" + node.name);
        json.key("major").value(node.major);
        json.key("minor").value(node.minor);
        json.key("owner").value(node.owner);
        json.key("uid").value(static_cast<uint64_t>(node.uid));
        json.key("group").value(node.group);
        json.key("gid").value(static_cast<uint64_t>(node.gid));
        json.key("mode").value(format_mode(node.mode));
        json.key("subject").value(node.subject);
        json.key("rule").value(node.origin);
        json.end_object();
    }
    json.end_array();
    json.key("changes").begin_array();
    for (const Change& change : outcome.result.changes) {
        json.begin_object();
        json.key("action").value(change_kind_name(change.kind));
        json.key("path").value("/dev/" + change.name);
        json.key("link").value(change.is_link);
        json.key("detail").value(change.detail);
        json.end_object();
    }
    json.end_array();
    json.key("problems").begin_array();
    for (const Problem& problem : outcome.plan.problems) {
        json.begin_object();
        json.key("severity")
            .value(problem.severity == Problem::Severity::Error ? "error" : "warning");
        json.key("message").value(problem.message);
        json.end_object();
    }
    json.end_array();
    json.end_object();
    return json.str() + "\n";
}

} // namespace gpuinit
