// The pure half of `gpuinit status`: what each layer returned, judged and
// turned into a section of rows and metrics. No I/O here.
#include "gpuinit/base/text.hpp"
#include "gpuinit/status/report.hpp"

#include <cerrno>
#include <cstring>

namespace gpuinit::status {

namespace {

Verdict verdict_for(const Diagnostic& error) {
    switch (error.code) {
    case EACCES:
    case EPERM:
        return Verdict::NotPermitted;
    case ETIMEDOUT:
        return Verdict::TimedOut;
    default:
        return Verdict::Failed;
    }
}

std::string first_error(const Diagnostics& diagnostics) {
    for (const Diagnostic& item : diagnostics.items()) {
        if (item.severity == Severity::Error) {
            return item.text();
        }
    }
    return {};
}

const Diagnostic* first_error_of(const Diagnostics& diagnostics) {
    for (const Diagnostic& item : diagnostics.items()) {
        if (item.severity == Severity::Error) {
            return &item;
        }
    }
    return nullptr;
}

Metric metric(std::string name, double value,
              std::vector<std::pair<std::string, std::string>> labels = {}) {
    return Metric{std::move(name), std::move(labels), value};
}

// A section's first problem decides its verdict and reason; later ones
// stay in its rows.
void problem(Section& section, Verdict verdict, std::string reason) {
    if (section.verdict == Verdict::Ok) {
        section.verdict = verdict;
        section.reason = std::move(reason);
    }
}

std::string gpu_label(unsigned minor) {
    return std::to_string(minor);
}

} // namespace

const std::vector<MetricFamily> kMetricFamilies = {
    {"gpuinit_probe_success", "gauge",
     "Whether the probe ran and gave an answer (1), or failed or timed out (0)."},
    {"gpuinit_probe_configured", "gauge",
     "Whether the part the probe checks is set up on this machine."},
    {"gpuinit_probe_ok", "gauge",
     "Whether everything the probe checks is as configured (a part not set up counts as ok)."},
    {"gpuinit_probe_duration_seconds", "gauge", "How long the probe took."},
    {"gpuinit_status_exit_code", "gauge",
     "The exit code of gpuinit status (0 all as configured; see gpuinit(8))."},
    {"gpuinit_last_run_timestamp_seconds", "gauge",
     "When gpuinit status last ran, in seconds since the epoch."},
    {"gpuinit_driver_loaded", "gauge", "Whether the NVIDIA driver is loaded."},
    {"gpuinit_driver_settings_ok", "gauge",
     "Whether the driver's parameters keep the node policy (gpu-modload --check)."},
    {"gpuinit_nodes_differing", "gauge",
     "Device nodes and links that differ from the policy (gpu-mknod --check)."},
    {"gpuinit_persist_daemon_up", "gauge", "Whether gpu-persist answers on its control socket."},
    {"gpuinit_persist_gpu_held", "gauge",
     "Whether gpu-persist holds the GPU (its state is in the state label)."},
    {"gpuinit_mig_instances", "gauge", "MIG compute instances the driver lists."},
    {"gpuinit_mig_unnamed_instances", "gauge",
     "MIG instances without a profile and UUID in gpu-mig's names file."},
    {"gpuinit_mig_instance_leased", "gauge",
     "Whether the MIG instance's lease is held (1), free (0); absent when unknown."},
    {"gpuinit_limit_daemon_up", "gauge", "Whether the gpu-limit daemon answers on its socket."},
    {"gpuinit_limit_memory_cap_bytes", "gauge", "A gpu-limit group's memory cap on a GPU."},
    {"gpuinit_limit_memory_used_bytes", "gauge", "A gpu-limit group's memory in use on a GPU."},
    {"gpuinit_limit_compute_cap_ratio", "gauge",
     "A gpu-limit group's compute cap on a GPU, as a fraction (0: none)."},
};

const char* verdict_name(Verdict verdict) {
    switch (verdict) {
    case Verdict::Ok:
        return "ok";
    case Verdict::NotConfigured:
        return "not-configured";
    case Verdict::Differs:
        return "differs";
    case Verdict::Partial:
        return "partial";
    case Verdict::Failed:
        return "failed";
    case Verdict::NotPermitted:
        return "not-permitted";
    case Verdict::TimedOut:
        return "timed-out";
    }
    return "failed";
}

bool probe_succeeded(Verdict verdict) {
    return verdict == Verdict::Ok || verdict == Verdict::NotConfigured ||
           verdict == Verdict::Differs || verdict == Verdict::Partial;
}

bool is_problem(Verdict verdict) {
    return verdict != Verdict::Ok && verdict != Verdict::NotConfigured;
}

std::optional<size_t> Report::first_problem() const {
    for (size_t i = 0; i < sections.size(); ++i) {
        if (is_problem(sections[i].verdict)) {
            return i;
        }
    }
    return std::nullopt;
}

std::vector<Metric> report_metrics(const Report& report, int exit_code) {
    std::vector<Metric> all;
    for (const Section& section : report.sections) {
        std::vector<std::pair<std::string, std::string>> probe = {{"probe", section.probe}};
        all.push_back(
            metric("gpuinit_probe_success", probe_succeeded(section.verdict) ? 1 : 0, probe));
        // A probe that could not run cannot tell: it counts as configured.
        all.push_back(metric("gpuinit_probe_configured",
                             section.verdict == Verdict::NotConfigured ? 0 : 1, probe));
        all.push_back(metric("gpuinit_probe_ok", is_problem(section.verdict) ? 0 : 1, probe));
        all.push_back(metric("gpuinit_probe_duration_seconds", section.seconds, probe));
        all.insert(all.end(), section.metrics.begin(), section.metrics.end());
    }
    all.push_back(metric("gpuinit_status_exit_code", exit_code));
    all.push_back(
        metric("gpuinit_last_run_timestamp_seconds", static_cast<double>(report.timestamp)));
    std::vector<Metric> ordered;
    for (const MetricFamily& family : kMetricFamilies) {
        for (const Metric& sample : all) {
            if (sample.name == family.name) {
                ordered.push_back(sample);
            }
        }
    }
    return ordered;
}

Section failed_section(std::string probe, Verdict verdict, std::string reason) {
    Section section;
    section.probe = std::move(probe);
    section.verdict = verdict;
    section.reason = std::move(reason);
    return section;
}

Section assemble_driver(const Result<DriverCheck>& check, const Diagnostics& diagnostics) {
    Section section;
    section.probe = "driver";
    if (!check) {
        problem(section, verdict_for(check.error()), check.error().text());
        return section;
    }
    section.metrics.push_back(metric("gpuinit_driver_loaded", check->driver_loaded ? 1 : 0));
    if (!check->driver_loaded) {
        problem(section, Verdict::Failed,
                "the NVIDIA driver is not loaded: load it with gpu-modload nvidia");
        section.items.push_back({"nvidia", "not loaded", "", true});
        return section;
    }
    // Every setting that undoes or widens the policy is an error (CheckDanger).
    bool settings_ok = true;
    for (const Diagnostic& item : diagnostics.items()) {
        if (item.severity != Severity::Error) {
            continue;
        }
        settings_ok = false;
        section.items.push_back({"nvidia params", "differs", item.text(), true});
    }
    section.metrics.push_back(metric("gpuinit_driver_settings_ok", settings_ok ? 1 : 0));
    if (!settings_ok) {
        problem(section, Verdict::Differs, first_error(diagnostics));
        return section;
    }
    section.items.push_back({"nvidia", "loaded",
                             format("DeviceFileUID %llu, GID %llu, mode %04llo, "
                                    "ModifyDeviceFiles %llu (policy: %s)",
                                    static_cast<unsigned long long>(check->uid),
                                    static_cast<unsigned long long>(check->gid),
                                    static_cast<unsigned long long>(check->mode),
                                    static_cast<unsigned long long>(check->modify_device_files),
                                    check->policy_source.c_str()),
                             false});
    return section;
}

Section assemble_nodes(const MknodOutcome& outcome) {
    Section section;
    section.probe = "nodes";
    size_t differing = 0;
    for (const Change& change : outcome.result.changes) {
        std::string name = "/dev" + (change.name.empty() ? "" : "/" + change.name);
        if (change.target == Change::Target::AccessFile) {
            name = "/" + change.name;
        }
        switch (change.kind) {
        case Change::Kind::Unchanged:
            break;
        case Change::Kind::Failed:
            section.items.push_back({name, "unreadable", change.detail, true});
            problem(section, Verdict::Partial, name + ": " + change.detail);
            break;
        default:
            ++differing;
            section.items.push_back({name, "differs",
                                     std::string("would ") + change_kind_name(change.kind) +
                                         (change.detail.empty() ? "" : ": " + change.detail),
                                     true});
            break;
        }
    }
    if (outcome.status == MknodStatus::NothingDone) {
        const Diagnostic* error = first_error_of(outcome.diagnostics);
        problem(section, error != nullptr ? verdict_for(*error) : Verdict::Failed,
                error != nullptr ? error->text() : "gpu-mknod's plan could not be made");
        return section;
    }
    section.metrics.push_back(metric("gpuinit_nodes_differing", static_cast<double>(differing)));
    if (differing > 0) {
        problem(section, Verdict::Differs,
                format("%zu device node%s differ%s from the policy (first: %s): run gpu-mknod",
                       differing, differing == 1 ? "" : "s", differing == 1 ? "s" : "",
                       section.items.front().what.c_str()));
    } else if (outcome.status == MknodStatus::Partial) {
        problem(section, Verdict::Partial, first_error(outcome.diagnostics));
    }
    if (section.items.empty()) {
        section.items.push_back(
            {"/dev/nvidia*", "ok",
             format("%zu nodes and links as the policy says", outcome.result.changes.size()),
             false});
    }
    return section;
}

Section assemble_persist(const PersistFacts& facts) {
    Section section;
    section.probe = "persist";
    if (!facts.reply) {
        section.metrics.push_back(metric("gpuinit_persist_daemon_up", 0));
        Diagnostic error = facts.error.value_or(gpuinit::error("no reply", ECONNREFUSED));
        bool not_running = error.code == ECONNREFUSED || error.code == ENOENT;
        if (not_running && !facts.configured) {
            section.verdict = Verdict::NotConfigured;
            section.reason = "gpu-persist is not running and not enabled";
            return section;
        }
        if (not_running) {
            problem(section, Verdict::Failed,
                    "gpu-persist is not running, but " + facts.configured_by +
                        " says it should: start it (systemctl start gpu-persist) and see "
                        "its log");
            return section;
        }
        problem(section, verdict_for(error), error.text());
        return section;
    }
    section.metrics.push_back(metric("gpuinit_persist_daemon_up", 1));
    for (const HeldGpu& gpu : facts.reply->gpus) {
        std::string what = format("GPU %u (%s)", gpu.id.minor, gpu.id.bdf.c_str());
        std::string state = hold_state_name(gpu.state);
        bool bad = gpu.wanted &&
                   (gpu.state == HoldState::Failed || gpu.state == HoldState::Lost ||
                    gpu.state == HoldState::WaitingForNode || gpu.state == HoldState::Unbinding);
        section.items.push_back({what, state, printable(gpu.error), bad});
        section.metrics.push_back(metric("gpuinit_persist_gpu_held",
                                         gpu.state == HoldState::Held ? 1 : 0,
                                         {{"gpu", gpu_label(gpu.id.minor)},
                                          {"pci_address", gpu.id.bdf},
                                          {"uuid", gpu.id.uuid},
                                          {"state", state}}));
        if (bad) {
            problem(section, Verdict::Differs,
                    what + " is " + state + (gpu.error.empty() ? "" : " (" + gpu.error + ")") +
                        ": fix the cause, then gpu-persist enable " + gpu.id.bdf);
        }
    }
    return section;
}

Section assemble_mig(const MigFacts& facts) {
    Section section;
    section.probe = "mig";
    if (!facts.uses) {
        Diagnostic error = facts.error.value_or(gpuinit::error("MIG instances unreadable"));
        problem(section, verdict_for(error), error.text());
        return section;
    }
    const auto& uses = facts.uses->uses;
    section.metrics.push_back(metric("gpuinit_mig_instances", static_cast<double>(uses.size())));
    if (uses.empty()) {
        section.verdict = Verdict::NotConfigured;
        section.reason = "no MIG instances";
        return section;
    }
    size_t unnamed = 0;
    for (const InstanceUse& use : uses) {
        const MigInstance& instance = use.instance;
        const MigName* name =
            facts.names_file ? facts.names_file->find(instance.gpu_uuid, instance.gi, instance.ci)
                             : nullptr;
        bool named = name != nullptr && !name->profile.empty() && !name->uuid.empty();
        std::string state = !use.leased ? "unknown" : *use.leased ? "leased" : "free";
        std::string detail = (instance.profile.empty() ? "-" : instance.profile) + " " +
                             (instance.uuid.empty() ? "-" : instance.uuid);
        for (const LeaseHolder& holder : use.holders) {
            detail += format(" held by %s pid %d",
                             holder.user.empty() ? std::to_string(holder.uid).c_str()
                                                 : holder.user.c_str(),
                             static_cast<int>(holder.pid));
            if (!holder.job.empty()) {
                detail += " job " + holder.job;
            }
        }
        if (!named) {
            ++unnamed;
            detail += facts.names_file ? " (not in the names file)" : " (no names file)";
        }
        section.items.push_back({instance.key(), state, detail, !named});
        if (use.leased) {
            section.metrics.push_back(metric("gpuinit_mig_instance_leased", *use.leased ? 1 : 0,
                                             {{"instance", instance.key()},
                                              {"gpu", gpu_label(instance.gpu_minor)},
                                              {"profile", instance.profile},
                                              {"mig_uuid", instance.uuid}}));
        }
    }
    section.metrics.push_back(
        metric("gpuinit_mig_unnamed_instances", static_cast<double>(unnamed)));
    size_t leased = 0;
    for (const InstanceUse& use : uses) {
        leased += use.leased && *use.leased ? 1 : 0;
    }
    // What an ok row says: a summary, not the first instance's details.
    section.reason = format("%zu MIG instance%s, all named; %zu leased", uses.size(),
                            uses.size() == 1 ? "" : "s", leased);
    if (facts.names_error) {
        problem(section, verdict_for(*facts.names_error), facts.names_error->text());
    } else if (!facts.names_file) {
        problem(section, Verdict::Differs,
                "no names file (run/gpu-mig/names): run gpu-mig sync after every MIG change");
    } else if (unnamed > 0) {
        for (const Item& item : section.items) {
            if (item.problem) {
                problem(section, Verdict::Differs,
                        format("%zu MIG instance%s without a name in run/gpu-mig/names "
                               "(first: %s): run gpu-mig sync",
                               unnamed, unnamed == 1 ? "" : "s", item.what.c_str()));
                break;
            }
        }
    } else if (facts.names_file->instances().size() > uses.size()) {
        problem(section, Verdict::Differs,
                "run/gpu-mig/names names instances the driver does not list: run gpu-mig sync");
    }
    if (facts.diagnostics.has_errors()) {
        problem(section, Verdict::Partial, first_error(facts.diagnostics));
    }
    return section;
}

Section assemble_limit(const LimitFacts& facts) {
    Section section;
    section.probe = "limit";
    size_t groups = facts.groups ? facts.groups->groups.size() : 0;
    if (!facts.daemon_up && !facts.configured && groups == 0) {
        section.verdict = Verdict::NotConfigured;
        section.reason = "the gpu-limit daemon is not running and not enabled, and no group";
        section.metrics.push_back(metric("gpuinit_limit_daemon_up", 0));
        return section;
    }
    section.metrics.push_back(metric("gpuinit_limit_daemon_up", facts.daemon_up ? 1 : 0));
    section.items.push_back({"gpu-limit daemon", facts.daemon_up ? "up" : "down",
                             facts.daemon_error, !facts.daemon_up});
    if (!facts.daemon_up) {
        problem(section, Verdict::Failed,
                "the gpu-limit daemon does not answer (" + facts.daemon_error +
                    "): start it (systemctl start gpu-limit-daemon)");
    }
    if (facts.groups_error) {
        problem(section, verdict_for(*facts.groups_error), facts.groups_error->text());
    }
    if (facts.groups) {
        for (const limit::GroupReport& group : facts.groups->groups) {
            std::string detail;
            for (size_t i = 0; i < group.devices.size(); ++i) {
                const limit::DeviceUsage& device = group.devices[i];
                std::string uuid(device.uuid, strnlen(device.uuid, sizeof(device.uuid)));
                std::vector<std::pair<std::string, std::string>> labels = {{"group", group.name},
                                                                           {"gpu_uuid", uuid}};
                section.metrics.push_back(metric("gpuinit_limit_memory_cap_bytes",
                                                 static_cast<double>(device.cap), labels));
                section.metrics.push_back(metric("gpuinit_limit_memory_used_bytes",
                                                 static_cast<double>(device.used), labels));
                section.metrics.push_back(metric("gpuinit_limit_compute_cap_ratio",
                                                 device.compute_percent / 100.0, labels));
                detail += format("%s%s: %llu of %llu MiB", detail.empty() ? "" : "; ", uuid.c_str(),
                                 static_cast<unsigned long long>(device.used >> 20),
                                 static_cast<unsigned long long>(device.cap >> 20));
                if (device.compute_percent > 0) {
                    detail += format(", compute %u%%", device.compute_percent);
                }
            }
            size_t alive = 0;
            for (const limit::ProcessUsage& process : group.processes) {
                alive += process.alive ? 1 : 0;
            }
            detail += format("%s%zu process%s", detail.empty() ? "" : "; ", alive,
                             alive == 1 ? "" : "es");
            section.items.push_back({"group " + group.name, "ok", detail, false});
        }
    }
    if (facts.diagnostics.has_errors()) {
        problem(section, Verdict::Partial, first_error(facts.diagnostics));
    }
    return section;
}

} // namespace gpuinit::status
