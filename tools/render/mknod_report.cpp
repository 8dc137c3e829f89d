#include "mknod_report.hpp"

#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"

#include <algorithm>

namespace gpuinit::tools {

namespace {

// "/dev/nvidia0", "/dev" for the directory itself, under the root.
std::string dev_path(const std::string& root_display, const std::string& name) {
    std::string dev = root_display == "/" ? "/dev" : root_display + "/dev";
    return name.empty() ? dev : dev + "/" + name;
}

// Where a change happened: below /dev, or (a MIG access file) below the root.
std::string change_path(const std::string& root_display, const Change& change) {
    if (change.target == Change::Target::AccessFile) {
        return (root_display == "/" ? "" : root_display) + "/" + change.name;
    }
    return dev_path(root_display, change.name);
}

const char* target_name(Change::Target target) {
    switch (target) {
    case Change::Target::Node:
        return "node";
    case Change::Target::Link:
        return "link";
    case Change::Target::Directory:
        return "directory";
    case Change::Target::Leftover:
        return "leftover";
    case Change::Target::AccessFile:
        return "access-file";
    }
    return "?";
}

} // namespace

Rendered render_mknod_text(const MknodOutcome& outcome, const MknodReportContext& context,
                           int verbosity) {
    Rendered rendered;
    std::string& out = rendered.out;
    bool ran = outcome.status != MknodStatus::NothingDone || !outcome.result.changes.empty();
    if (verbosity >= 0 && outcome.dry_run && ran) {
        out += std::string(context.program) + ": dry run on " + context.root_display +
               ": nothing is changed\n";
    }
    if (verbosity >= 1) {
        // The driver's model, else the pci.ids name.
        for (const Gpu& gpu : outcome.machine.gpus) {
            const std::string& model =
                gpu.model.empty() ? outcome.machine.pci_name(gpu.bdf) : gpu.model;
            out += format("gpu      %-14s minor %-3u %s %s\n", gpu.bdf.c_str(), gpu.minor,
                          gpu.uuid.empty() ? "-" : gpu.uuid.c_str(), printable(model).c_str());
        }
        // Why each gets no node is among the diagnostics; this says which
        // board it is, which the driver does not say for a GPU it does not list.
        for (const UnusableGpu& gpu : outcome.machine.unusable) {
            const std::string& name = outcome.machine.pci_name(gpu.bdf);
            out += format("no node  %-14s %s\n", gpu.bdf.c_str(),
                          name.empty() ? "-" : printable(name).c_str());
        }
    }
    int width = 0;
    for (const Change& change : outcome.result.changes) {
        width = std::max(width, static_cast<int>(change_path(context.root_display, change).size()));
    }
    for (const Change& change : outcome.result.changes) {
        // Failures are among the diagnostics.
        bool show = change.kind != Change::Kind::Failed &&
                    (change.kind != Change::Kind::Unchanged || verbosity >= 1);
        if (!show || verbosity < 0) {
            continue;
        }
        const char* verb = change_kind_name(change.kind);
        std::string shown_verb = outcome.dry_run && change.kind != Change::Kind::Unchanged
                                     ? std::string("would ") + verb
                                     : verb;
        std::string path = change_path(context.root_display, change);
        out += format("%-14s %-*s  ", shown_verb.c_str(), width, path.c_str()) +
               printable(change.detail) + "\n";
    }
    render_diagnostics(context.program, outcome.diagnostics, verbosity, rendered);
    if (verbosity >= 0 && ran) {
        const ReconcileResult& result = outcome.result;
        size_t created = result.count(Change::Kind::Create);
        size_t replaced = result.count(Change::Kind::Replace);
        size_t repaired = result.count(Change::Kind::Repair);
        size_t removed = result.count(Change::Kind::Remove);
        size_t unchanged = result.count(Change::Kind::Unchanged);
        size_t failed = result.count(Change::Kind::Failed);
        if (created + replaced + repaired + removed + failed == 0) {
            out += std::string(context.program) +
                   format(": nothing to do: %zu GPU(s), %zu node(s) and link(s) already correct\n",
                          outcome.machine.gpus.size(), unchanged);
        } else {
            out += std::string(context.program) +
                   format(": %zu GPU(s): %s%zu created, %zu repaired, %zu replaced, %zu "
                          "removed, %zu unchanged, %zu failed\n",
                          outcome.machine.gpus.size(), outcome.dry_run ? "would be " : "", created,
                          repaired, replaced, removed, unchanged, failed);
        }
    }
    return rendered;
}

void write_mknod_json(JsonWriter& json, const MknodOutcome& outcome,
                      const MknodReportContext& context) {
    json.begin_object();
    json.key("root").value(context.root_display);
    json.key("dry_run").value(outcome.dry_run);
    json.key("exit_code").value(context.exit_code);
    if (outcome.status == MknodStatus::NothingDone) {
        for (const Diagnostic& diagnostic : outcome.diagnostics.items()) {
            if (diagnostic.severity == Severity::Error) {
                json.key("fatal").value(diagnostic.text());
                break;
            }
        }
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
        json.key("pci_name").value(outcome.machine.pci_name(gpu.bdf));
        json.end_object();
    }
    json.end_array();
    json.key("unusable_gpus").begin_array();
    for (const UnusableGpu& gpu : outcome.machine.unusable) {
        json.begin_object();
        json.key("bdf").value(gpu.bdf);
        json.key("reason").value(gpu.reason);
        json.key("pci_name").value(outcome.machine.pci_name(gpu.bdf));
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
        json.key("path").value(change_path("/", change));
        json.key("target").value(target_name(change.target));
        json.key("link").value(change.target == Change::Target::Link);
        json.key("detail").value(change.detail);
        json.end_object();
    }
    json.end_array();
    json.key("problems");
    write_diagnostics_json(json, outcome.diagnostics);
    json.end_object();
}

std::string render_mknod_json(const MknodOutcome& outcome, const MknodReportContext& context) {
    JsonWriter json;
    write_mknod_json(json, outcome, context);
    return json.str();
}

Rendered render_explain_text(const MknodOutcome& outcome, const std::vector<NodeExplanation>& nodes,
                             const MknodReportContext& context, int verbosity) {
    Rendered rendered;
    int width = 0;
    for (const NodeExplanation& node : nodes) {
        width = std::max(
            width, static_cast<int>(dev_path(context.root_display, node.path.substr(5)).size()));
    }
    for (const NodeExplanation& node : nodes) {
        if (verbosity < 0) {
            break;
        }
        std::string path = dev_path(context.root_display, node.path.substr(5));
        rendered.out += format("%-*s  %s:%s %s  owner %s, group %s, others %s  (%s)\n", width,
                               path.c_str(), printable(node.owner).c_str(),
                               printable(node.group).c_str(), format_mode(node.mode).c_str(),
                               node.owner_access.c_str(), node.group_access.c_str(),
                               node.other_access.c_str(), printable(node.decided_by).c_str());
        if (node.root_only) {
            rendered.out += format("%-*s  root-only: the group or owner %s names does not exist\n",
                                   width, "", printable(node.decided_by).c_str());
        }
        if (!node.now.empty()) {
            rendered.out += format("%-*s  now: %s\n", width, "", printable(node.now).c_str());
        }
    }
    render_diagnostics("gpu-mknod", outcome.diagnostics, verbosity, rendered);
    return rendered;
}

std::string render_explain_json(const MknodOutcome& outcome,
                                const std::vector<NodeExplanation>& nodes,
                                const MknodReportContext& context) {
    JsonWriter json;
    json.begin_object();
    json.key("root").value(context.root_display);
    json.key("exit_code").value(context.exit_code);
    json.key("nodes").begin_array();
    for (const NodeExplanation& node : nodes) {
        json.begin_object();
        json.key("path").value(node.path);
        json.key("subject").value(node.subject);
        json.key("owner").value(node.owner);
        json.key("uid").value(static_cast<uint64_t>(node.uid));
        json.key("group").value(node.group);
        json.key("gid").value(static_cast<uint64_t>(node.gid));
        json.key("mode").value(format_mode(node.mode));
        json.key("owner_access").value(node.owner_access);
        json.key("group_access").value(node.group_access);
        json.key("other_access").value(node.other_access);
        json.key("decided_by").value(node.decided_by);
        json.key("root_only").value(node.root_only);
        json.key("now").value(node.now);
        json.end_object();
    }
    json.end_array();
    json.key("problems");
    write_diagnostics_json(json, outcome.diagnostics);
    json.end_object();
    return json.str();
}

} // namespace gpuinit::tools
