#include "render/mig_report.hpp"

#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/mig/apply.hpp"

#include <algorithm>

namespace gpuinit::tools {

namespace {

constexpr const char* kProgram = "gpu-mig";

std::string cap_path(unsigned minor) {
    return format("/dev/nvidia-caps/nvidia-cap%u", minor);
}

std::string or_unknown(const std::string& value) {
    return value.empty() ? "unknown" : value;
}

const char* state_of(const InstanceUse& use) {
    if (!use.pids.empty()) {
        return "busy";
    }
    if (!use.lease_yours) {
        return "not-yours";
    }
    if (!use.leased) {
        return "no-lease";
    }
    return *use.leased ? "leased" : "free";
}

// Every report ends alike: its diagnostics, the closing brace, a newline.
std::string finished(JsonWriter& json, const Diagnostics& diagnostics) {
    json.key("diagnostics");
    write_diagnostics_json(json, diagnostics);
    json.end_object();
    return json.str() + "\n";
}

void list_names(JsonWriter& json, const std::vector<std::string>& names) {
    json.begin_array();
    for (const std::string& name : names) {
        json.value(name);
    }
    json.end_array();
}

// "PID 4242 alice job 1234": who holds a lease, as far as it is known.
std::string holder_text(const LeaseHolder& holder) {
    std::string text =
        format("PID %d %s", static_cast<int>(holder.pid),
               holder.user.empty() ? format("uid %u", holder.uid).c_str() : holder.user.c_str());
    if (!holder.job.empty()) {
        text += " job " + holder.job;
    }
    return text;
}

void holder_json(JsonWriter& json, const LeaseHolder& holder) {
    json.begin_object();
    json.key("pid").value(static_cast<int>(holder.pid));
    json.key("uid").value(static_cast<uint64_t>(holder.uid));
    json.key("user");
    holder.user.empty() ? json.null() : json.value(holder.user);
    json.key("job");
    holder.job.empty() ? json.null() : json.value(holder.job);
    json.key("job_source");
    holder.job_source.empty() ? json.null() : json.value(holder.job_source);
    json.end_object();
}

} // namespace

std::string mig_ids(const std::vector<MigInstance>& instances, bool uuid) {
    std::string ids;
    for (const MigInstance& instance : instances) {
        ids += (ids.empty() ? "" : ",") + (uuid ? instance.uuid : instance.key());
    }
    return ids;
}

Rendered render_mig_list_text(const InstanceUses& uses, const Diagnostics& diagnostics,
                              int verbosity) {
    Rendered rendered;
    render_diagnostics(kProgram, diagnostics, verbosity, rendered);
    if (uses.uses.empty()) {
        rendered.out += "no MIG instance: the driver lists none\n";
        return rendered;
    }
    rendered.out += format("%-4s %-13s %-3s %-3s %-10s %-29s %-41s %s\n", "GPU", "PCI", "GI", "CI",
                           "PROFILE", "CAPS (/dev/nvidia-caps/)", "UUID", "STATE");
    size_t unseen = 0; // leases held by processes the caller cannot see
    for (const InstanceUse& use : uses.uses) {
        const MigInstance& i = use.instance;
        std::string state = state_of(use);
        if (use.leased.value_or(false) && !use.pids.empty()) {
            state = "leased,busy";
        }
        for (size_t n = 0; n < use.pids.size(); ++n) {
            state += (n == 0 ? " PID " : ",") + std::to_string(use.pids[n]);
        }
        for (const LeaseHolder& holder : use.holders) {
            state += " by " + holder_text(holder);
        }
        if (use.leased.value_or(false) && use.holders.empty()) {
            state += " by ?";
            ++unseen;
        }
        std::string caps = format("nvidia-cap%u,nvidia-cap%u", i.gi_cap_minor, i.ci_cap_minor);
        rendered.out += format("%-4u %-13s %-3u %-3u %-10s %-29s %-41s %s\n", i.gpu_minor,
                               i.gpu_bdf.c_str(), i.gi, i.ci, or_unknown(i.profile).c_str(),
                               caps.c_str(), or_unknown(i.uuid).c_str(), state.c_str());
    }
    if (unseen != 0 && verbosity >= 0) {
        rendered.err +=
            uses.all_holders
                ? format("%s: note: %zu leases (by ?) are held by processes this /proc does not "
                         "show (another PID namespace, or --root on a copy of a machine)\n",
                         kProgram, unseen)
                : format("%s: note: %zu leases (by ?) are held by other users' processes; only "
                         "root sees who holds them\n",
                         kProgram, unseen);
    }
    if (uses.uninspected != 0 && verbosity >= 0) {
        rendered.err += format("%s: note: %zu processes of other users could not be inspected "
                               "(only root sees them); the leases are the guarantee\n",
                               kProgram, uses.uninspected);
    }
    return rendered;
}

std::string render_mig_list_json(const InstanceUses& uses, const Diagnostics& diagnostics,
                                 int exit_code) {
    JsonWriter json;
    json.begin_object();
    json.key("exit_code").value(exit_code);
    json.key("uninspected_processes").value(static_cast<uint64_t>(uses.uninspected));
    json.key("holders_of").value(uses.all_holders ? "all" : "caller");
    json.key("instances").begin_array();
    for (const InstanceUse& use : uses.uses) {
        const MigInstance& i = use.instance;
        json.begin_object();
        json.key("key").value(i.key());
        json.key("gpu_minor").value(i.gpu_minor);
        json.key("pci").value(i.gpu_bdf);
        json.key("gpu_uuid").value(i.gpu_uuid);
        json.key("gi").value(i.gi);
        json.key("ci").value(i.ci);
        json.key("profile");
        i.profile.empty() ? json.null() : json.value(i.profile);
        json.key("uuid");
        i.uuid.empty() ? json.null() : json.value(i.uuid);
        json.key("device").value(format("/dev/nvidia%u", i.gpu_minor));
        json.key("caps");
        list_names(json, {cap_path(i.gi_cap_minor), cap_path(i.ci_cap_minor)});
        json.key("state").value(state_of(use));
        json.key("leased");
        use.leased ? json.value(*use.leased) : json.null();
        json.key("pids").begin_array();
        for (pid_t pid : use.pids) {
            json.value(static_cast<int>(pid));
        }
        json.end_array();
        json.key("holders").begin_array();
        for (const LeaseHolder& holder : use.holders) {
            holder_json(json, holder);
        }
        json.end_array();
        json.end_object();
    }
    json.end_array();
    return finished(json, diagnostics);
}

Rendered render_mig_release_text(const LeaseRelease& release, int verbosity) {
    Rendered rendered;
    std::string key = release.instance.key();
    if (release.holders.empty()) {
        rendered.out =
            key + ": lease replaced; " +
            (release.was_held ? "it was held, by a process root cannot see\n" : "nobody held it\n");
        return rendered;
    }
    rendered.out = key + ": lease taken back from";
    for (const LeaseHolder& holder : release.holders) {
        rendered.out += " " + holder_text(holder);
    }
    rendered.out += "\n";
    if (verbosity >= 0) {
        rendered.err = format("%s: note: the holder still runs on %s; kill it if it must stop\n",
                              kProgram, key.c_str());
    }
    return rendered;
}

std::string render_mig_release_json(const LeaseRelease& release, const Diagnostics& diagnostics,
                                    int exit_code) {
    JsonWriter json;
    json.begin_object();
    json.key("exit_code").value(exit_code);
    json.key("key").value(release.instance.key());
    json.key("was_held").value(release.was_held);
    json.key("holders").begin_array();
    for (const LeaseHolder& holder : release.holders) {
        holder_json(json, holder);
    }
    json.end_array();
    return finished(json, diagnostics);
}

Rendered render_mig_sync_text(const MigSyncReport& report, const Diagnostics& diagnostics,
                              int verbosity) {
    Rendered rendered;
    render_diagnostics(kProgram, diagnostics, verbosity, rendered);
    const LeaseSync& sync = report.leases;
    if (verbosity > 0) {
        for (const std::string& name : sync.created) {
            rendered.out += "created lease " + name + "\n";
        }
        for (const std::string& name : sync.repaired) {
            rendered.out += "replaced or fixed lease " + name + "\n";
        }
        for (const std::string& name : sync.removed) {
            rendered.out += "removed lease " + name + " (its instance is gone)\n";
        }
    }
    if (verbosity >= 0) {
        rendered.out += format("%s: %zu created, %zu repaired, %zu removed, %zu kept\n",
                               report.lease_dir.c_str(), sync.created.size(), sync.repaired.size(),
                               sync.removed.size(), sync.kept);
        size_t named = 0;
        for (const MigInstance& instance : report.instances) {
            named += !instance.profile.empty() && !instance.uuid.empty() ? 1 : 0;
        }
        rendered.out += format("%s/names: %zu of %zu instances named", report.lease_dir.c_str(),
                               named, report.instances.size()) +
                        (report.names_source.empty() ? "" : " from " + report.names_source) + "\n";
    }
    return rendered;
}

namespace {

// What sync did after the nodes, as fields of the object being written.
void write_sync_fields(JsonWriter& json, const MigSyncReport& report, const MknodOutcome& nodes,
                       const MknodReportContext& nodes_context) {
    json.key("nodes");
    write_mknod_json(json, nodes, nodes_context);
    json.key("lease_dir").value(report.lease_dir);
    json.key("created");
    list_names(json, report.leases.created);
    json.key("repaired");
    list_names(json, report.leases.repaired);
    json.key("removed");
    list_names(json, report.leases.removed);
    json.key("kept").value(static_cast<uint64_t>(report.leases.kept));
    json.key("names_source").value(report.names_source);
    json.key("instances").begin_array();
    for (const MigInstance& instance : report.instances) {
        json.begin_object();
        json.key("key").value(instance.key());
        json.key("profile").value(instance.profile);
        json.key("uuid").value(instance.uuid);
        json.end_object();
    }
    json.end_array();
}

} // namespace

std::string render_mig_sync_json(const MigSyncReport& report, const MknodOutcome& nodes,
                                 const MknodReportContext& nodes_context,
                                 const Diagnostics& diagnostics, int exit_code) {
    JsonWriter json;
    json.begin_object();
    json.key("exit_code").value(exit_code);
    write_sync_fields(json, report, nodes, nodes_context);
    return finished(json, diagnostics);
}

namespace {

// Warnings that differ only in their file (one per cap node's access file,
// say) folded into one line each: "44 files like F are ...". Errors stay
// one by one.
Diagnostics folded(const Diagnostics& diagnostics) {
    std::vector<std::pair<std::string, std::vector<const Diagnostic*>>> groups;
    Diagnostics out;
    auto shape = [](const Diagnostic& d) {
        std::string message = d.message;
        for (size_t at = message.find(d.where.file);
             !d.where.file.empty() && at != std::string::npos;
             at = message.find(d.where.file, at + 2)) {
            message.replace(at, d.where.file.size(), "{}");
        }
        return message;
    };
    for (const Diagnostic& d : diagnostics.items()) {
        if (d.severity != Severity::Warning || d.where.file.empty() || d.where.line != 0) {
            continue;
        }
        std::string key = shape(d);
        auto group = std::find_if(groups.begin(), groups.end(),
                                  [&](const auto& g) { return g.first == key; });
        if (group == groups.end()) {
            groups.push_back({key, {&d}});
        } else {
            group->second.push_back(&d);
        }
    }
    for (const Diagnostic& d : diagnostics.items()) {
        auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
            return std::find(g.second.begin(), g.second.end(), &d) != g.second.end();
        });
        if (group == groups.end() || group->second.size() == 1) {
            out.add(d);
        } else if (group->second.front() == &d) {
            std::string message = group->first;
            if (size_t at = message.find("{} is "); at != std::string::npos) {
                message.replace(at, 6, "{} are ");
            }
            std::string files = format("%zu files like ", group->second.size()) + d.where.file;
            for (size_t at = message.find("{}"); at != std::string::npos;
                 at = message.find("{}", at + files.size())) {
                message.replace(at, 2, files);
            }
            out.warning(message);
        }
    }
    return out;
}

// sync's one line without -v: the instances, their names, what changed in
// the cap nodes and the leases.
std::string sync_summary(const mig::SyncOutcome& outcome, const MknodReportContext& context) {
    size_t named = 0;
    for (const MigInstance& instance : outcome.view.instances) {
        named += !instance.profile.empty() && !instance.uuid.empty() ? 1 : 0;
    }
    std::string line = format("%s: sync: %zu MIG instances, %zu named", context.program,
                              outcome.view.instances.size(), named);
    if (!outcome.view.names_source.empty()) {
        line += " from " + outcome.view.names_source;
    }
    const ReconcileResult& nodes = outcome.nodes.result;
    std::string changed;
    const std::pair<Change::Kind, const char*> kinds[] = {{Change::Kind::Create, "created"},
                                                          {Change::Kind::Repair, "repaired"},
                                                          {Change::Kind::Replace, "replaced"},
                                                          {Change::Kind::Remove, "removed"},
                                                          {Change::Kind::Failed, "failed"}};
    for (const auto& [kind, name] : kinds) {
        if (size_t count = nodes.count(kind); count != 0) {
            changed += format("%s%zu %s", changed.empty() ? "" : ", ", count, name);
        }
    }
    line += "; cap nodes: " + (changed.empty() ? std::string("all correct") : changed);
    const LeaseSync& leases = outcome.leases;
    line += format("; leases in %s: %zu created, %zu repaired, %zu removed, %zu kept\n",
                   outcome.lease_dir.c_str(), leases.created.size(), leases.repaired.size(),
                   leases.removed.size(), leases.kept);
    return line;
}

} // namespace

Rendered render_sync_outcome_text(const mig::SyncOutcome& outcome,
                                  const MknodReportContext& context, int verbosity) {
    bool detail = verbosity > 0 || outcome.status == mig::SyncOutcome::Status::NothingDone;
    Rendered rendered;
    if (detail) {
        rendered = render_mknod_text(outcome.nodes, context, verbosity);
    } else {
        render_diagnostics(context.program, folded(outcome.nodes.diagnostics), verbosity, rendered);
    }
    if (outcome.status == mig::SyncOutcome::Status::NothingDone) {
        return rendered;
    }
    if (outcome.failure) {
        Diagnostics failed;
        failed.add(*outcome.failure);
        render_diagnostics(kProgram, failed, verbosity, rendered);
        return rendered;
    }
    if (!detail) {
        render_diagnostics(kProgram, folded(outcome.diagnostics), verbosity, rendered);
        if (verbosity >= 0) {
            rendered.out += sync_summary(outcome, context);
        }
        return rendered;
    }
    Rendered leases = render_mig_sync_text(
        {outcome.leases, outcome.lease_dir, outcome.view.instances, outcome.view.names_source},
        outcome.diagnostics, verbosity);
    rendered.out += leases.out;
    rendered.err += leases.err;
    return rendered;
}

void write_sync_outcome_json(JsonWriter& json, const mig::SyncOutcome& outcome,
                             const MknodReportContext& context) {
    json.begin_object();
    write_sync_fields(
        json,
        {outcome.leases, outcome.lease_dir, outcome.view.instances, outcome.view.names_source},
        outcome.nodes, context);
    Diagnostics all = outcome.diagnostics;
    if (outcome.failure) {
        all.add(*outcome.failure);
    }
    json.key("diagnostics");
    write_diagnostics_json(json, all);
    json.end_object();
}

namespace {

std::string plan_line(const mig::GpuApplyOutcome& outcome, bool dry_run) {
    const mig::GpuApplyPlan& plan = outcome.plan;
    std::string subject = mig::gpu_subject(plan.gpu);
    std::string origin = plan.layout != nullptr ? " (" + plan.layout->origin + ")" : "";
    using Verdict = mig::GpuApplyPlan::Verdict;
    switch (plan.verdict) {
    case Verdict::NotDeclared:
        return "";
    case Verdict::AsDeclared:
        return subject + ": as declared" + origin;
    case Verdict::Busy: {
        std::string users;
        for (unsigned pid : plan.pids) {
            users += (users.empty() ? "processes " : ", ") + std::to_string(pid);
        }
        if (!plan.leased.empty()) {
            users += std::string(users.empty() ? "" : " and ") + "the leases of";
            for (const std::string& key : plan.leased) {
                users += " " + key;
            }
            users += " (gpu-mig list)";
        }
        return subject + ": not changed: " + users +
               " use it (stop them, or --force to change it anyway)" + origin;
    }
    case Verdict::ResetPending:
        return subject + ": its MIG mode changes at its next reset: rerun with " +
               "--reset-if-needed when it is idle" + origin;
    case Verdict::Unknown:
        return subject + ": not changed: its MIG mode could not be read (no MIG on this GPU?)" +
               origin;
    case Verdict::DoesNotFit:
        return subject + ": not changed: " + plan.problem + origin;
    case Verdict::Change:
        break;
    }
    if (dry_run) {
        return subject + format(": would change in %zu steps", plan.steps.size()) +
               (plan.reset_pending ? ", then wait for a reset (--reset-if-needed)" : "") + origin;
    }
    if (outcome.failure) {
        return "";
    }
    std::string made;
    for (const mig::CreatedInstance& created : outcome.created) {
        made += format(" gi%u/ci%u", created.gi, created.ci) + " " + created.profile;
    }
    return subject + format(": changed in %zu steps", outcome.steps_done) +
           (plan.reset_pending ? "; MIG mode changes at its next reset (--reset-if-needed)" : "") +
           (made.empty() ? "" : ";" + made) + origin;
}

std::string step_words(const mig::ApplyStep& step) {
    using Kind = mig::ApplyStep::Kind;
    switch (step.kind) {
    case Kind::DestroyCi:
        return format("destroy compute instance %u of GPU instance %u", step.ci, step.gi);
    case Kind::DestroyGi:
        return format("destroy GPU instance %u", step.gi);
    case Kind::SetMigMode:
        return step.mig ? "enable MIG mode" : "disable MIG mode";
    case Kind::ResetGpu:
        return "reset the GPU";
    case Kind::CreateGi:
        return "create a " + step.profile + " GPU instance" +
               (step.start ? format(" at placement %u", *step.start) : "");
    case Kind::CreateCi:
        return "create a " + step.profile +
               format(" compute instance in new GPU instance %u", step.gi + 1);
    }
    return "";
}

} // namespace

Rendered render_mig_apply_text(const mig::ApplyReport& report, const MknodReportContext& context,
                               bool dry_run, int verbosity) {
    Rendered rendered;
    render_diagnostics(kProgram, report.diagnostics, verbosity, rendered);
    if (report.status == mig::ApplyReport::Status::NoLayout) {
        if (verbosity >= 0) {
            rendered.out += report.layout_source + ": no MIG layout declared; nothing changed\n";
        }
        return rendered;
    }
    for (const mig::GpuApplyOutcome& outcome : report.gpus) {
        for (const Diagnostic& warning : outcome.warnings) {
            Diagnostics one;
            one.add(warning);
            render_diagnostics(kProgram, one, verbosity, rendered);
        }
        if (outcome.failure) {
            rendered.err += std::string(kProgram) + ": error: " + outcome.failure->text() + "\n";
        }
        std::string line = plan_line(outcome, dry_run);
        if (!line.empty() && verbosity >= 0) {
            rendered.out += line + "\n";
        }
        if ((dry_run || verbosity > 0) &&
            outcome.plan.verdict == mig::GpuApplyPlan::Verdict::Change) {
            for (size_t i = 0; i < outcome.plan.steps.size(); ++i) {
                rendered.out += format("  %zu. ", i + 1) + step_words(outcome.plan.steps[i]) +
                                (dry_run || i < outcome.steps_done ? "" : " (not done)") + "\n";
            }
        }
    }
    if (report.sync) {
        Rendered synced = render_sync_outcome_text(*report.sync, context, verbosity);
        rendered.out += synced.out;
        rendered.err += synced.err;
    }
    return rendered;
}

std::string render_mig_apply_json(const mig::ApplyReport& report, const MknodReportContext& context,
                                  int exit_code) {
    JsonWriter json;
    json.begin_object();
    json.key("exit_code").value(exit_code);
    json.key("layout").value(report.layout_source);
    json.key("declared").value(report.status != mig::ApplyReport::Status::NoLayout);
    json.key("control").value(report.control);
    json.key("gpus").begin_array();
    for (const mig::GpuApplyOutcome& outcome : report.gpus) {
        const mig::GpuApplyPlan& plan = outcome.plan;
        json.begin_object();
        json.key("minor").value(static_cast<uint64_t>(plan.gpu.minor));
        json.key("pci").value(plan.gpu.bdf);
        json.key("uuid").value(plan.gpu.uuid);
        json.key("model").value(plan.model);
        json.key("verdict").value(mig::verdict_name(plan.verdict));
        json.key("layout").value(plan.layout != nullptr ? plan.layout->origin : "");
        json.key("as_declared").value(mig::outcome_as_declared(outcome));
        json.key("reset_pending").value(plan.reset_pending);
        json.key("pids").begin_array();
        for (unsigned pid : plan.pids) {
            json.value(static_cast<uint64_t>(pid));
        }
        json.end_array();
        json.key("leased").begin_array();
        for (const std::string& key : plan.leased) {
            json.value(key);
        }
        json.end_array();
        json.key("problem").value(plan.problem);
        json.key("steps").begin_array();
        for (const mig::ApplyStep& step : plan.steps) {
            json.begin_object();
            json.key("step").value(mig::step_name(step.kind));
            json.key("text").value(step_words(step));
            json.end_object();
        }
        json.end_array();
        json.key("steps_done").value(static_cast<uint64_t>(outcome.steps_done));
        json.key("created").begin_array();
        for (const mig::CreatedInstance& created : outcome.created) {
            json.begin_object();
            json.key("gi").value(static_cast<uint64_t>(created.gi));
            json.key("ci").value(static_cast<uint64_t>(created.ci));
            json.key("profile").value(created.profile);
            json.end_object();
        }
        json.end_array();
        json.key("error").value(outcome.failure ? outcome.failure->text() : "");
        json.end_object();
    }
    json.end_array();
    if (report.sync) {
        json.key("sync");
        write_sync_outcome_json(json, *report.sync, context);
    }
    Diagnostics all = report.diagnostics;
    for (const mig::GpuApplyOutcome& outcome : report.gpus) {
        for (const Diagnostic& warning : outcome.warnings) {
            all.add(warning);
        }
        if (outcome.failure) {
            all.add(*outcome.failure);
        }
    }
    return finished(json, all);
}

std::string render_gres_json(const GresPlan& plan, std::string_view node,
                             const Diagnostics& diagnostics, int exit_code) {
    JsonWriter json;
    json.begin_object();
    json.key("exit_code").value(exit_code);
    json.key("node").value(std::string(node));
    json.key("records").begin_array();
    for (const GresRecord& record : plan.records) {
        json.begin_object();
        json.key("type").value(record.type);
        json.key("files");
        list_names(json, record.files);
        json.key("subject").value(record.subject);
        json.end_object();
    }
    json.end_array();
    json.key("counts").begin_object();
    for (const auto& [type, count] : plan.counts) {
        json.key(type).value(count);
    }
    json.end_object();
    json.key("slurm_conf").value(render_slurm_gres(plan));
    json.key("gres_conf").value(render_gres_conf(plan, node));
    return finished(json, diagnostics);
}

Rendered render_gres_check_text(const std::vector<GresFinding>& findings, const std::string& file,
                                const Diagnostics& diagnostics, int verbosity) {
    Rendered rendered;
    render_diagnostics(kProgram, diagnostics, verbosity, rendered);
    // -q (gpu-mig.service): one line for the journal, naming the first.
    if (verbosity < 0) {
        if (!findings.empty()) {
            rendered.err +=
                format("%s: error: %s differs from the machine in %zu ways; first: ", kProgram,
                       file.c_str(), findings.size()) +
                gres_finding_name(findings[0].kind) + ": " + findings[0].message +
                "; gpu-mig gres --check " + file + " lists them all\n";
        }
        return rendered;
    }
    for (const GresFinding& finding : findings) {
        rendered.out +=
            std::string(gres_finding_name(finding.kind)) + ": " + finding.message + "\n";
    }
    if (verbosity >= 0) {
        rendered.out += findings.empty() ? file + ": matches the machine\n"
                                         : format("%s: %zu differences from the machine\n",
                                                  file.c_str(), findings.size());
    }
    return rendered;
}

std::string render_gres_check_json(const std::vector<GresFinding>& findings,
                                   const std::string& file, const Diagnostics& diagnostics,
                                   int exit_code) {
    JsonWriter json;
    json.begin_object();
    json.key("exit_code").value(exit_code);
    json.key("file").value(file);
    json.key("findings").begin_array();
    for (const GresFinding& finding : findings) {
        json.begin_object();
        json.key("kind").value(gres_finding_name(finding.kind));
        json.key("line").value(static_cast<uint64_t>(finding.line));
        json.key("message").value(finding.message);
        json.end_object();
    }
    json.end_array();
    return finished(json, diagnostics);
}

std::string render_env_json(const std::string& variable, const std::string& indices,
                            const std::vector<std::string>& ids, const Diagnostics& diagnostics,
                            int exit_code) {
    JsonWriter json;
    json.begin_object();
    json.key("exit_code").value(exit_code);
    json.key("variable").value(variable);
    json.key("indices").value(indices);
    json.key("cuda_visible_devices");
    list_names(json, ids);
    return finished(json, diagnostics);
}

} // namespace gpuinit::tools
