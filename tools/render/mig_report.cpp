#include "render/mig_report.hpp"

#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"

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
    if (!use.leased) {
        return "no-lease";
    }
    return *use.leased ? "leased" : "free";
}

void list_names(JsonWriter& json, const std::vector<std::string>& names) {
    json.begin_array();
    for (const std::string& name : names) {
        json.value(name);
    }
    json.end_array();
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
    for (const InstanceUse& use : uses.uses) {
        const MigInstance& i = use.instance;
        std::string state = state_of(use);
        if (use.leased.value_or(false) && !use.pids.empty()) {
            state = "leased,busy";
        }
        for (size_t n = 0; n < use.pids.size(); ++n) {
            state += (n == 0 ? " PID " : ",") + std::to_string(use.pids[n]);
        }
        std::string caps = format("nvidia-cap%u,nvidia-cap%u", i.gi_cap_minor, i.ci_cap_minor);
        rendered.out += format("%-4u %-13s %-3u %-3u %-10s %-29s %-41s %s\n", i.gpu_minor,
                               i.gpu_bdf.c_str(), i.gi, i.ci, or_unknown(i.profile).c_str(),
                               caps.c_str(), or_unknown(i.uuid).c_str(), state.c_str());
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
        json.end_object();
    }
    json.end_array();
    json.key("diagnostics");
    write_diagnostics_json(json, diagnostics);
    json.end_object();
    return json.str() + "\n";
}

Rendered render_mig_sync_text(const LeaseSync& sync, const std::string& lease_dir,
                              const Diagnostics& diagnostics, int verbosity) {
    Rendered rendered;
    render_diagnostics(kProgram, diagnostics, verbosity, rendered);
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
        rendered.out +=
            format("%s: %zu created, %zu repaired, %zu removed, %zu kept\n", lease_dir.c_str(),
                   sync.created.size(), sync.repaired.size(), sync.removed.size(), sync.kept);
    }
    return rendered;
}

std::string render_mig_sync_json(const LeaseSync& sync, const std::string& lease_dir,
                                 const Diagnostics& diagnostics, int exit_code) {
    JsonWriter json;
    json.begin_object();
    json.key("exit_code").value(exit_code);
    json.key("lease_dir").value(lease_dir);
    json.key("created");
    list_names(json, sync.created);
    json.key("repaired");
    list_names(json, sync.repaired);
    json.key("removed");
    list_names(json, sync.removed);
    json.key("kept").value(static_cast<uint64_t>(sync.kept));
    json.key("diagnostics");
    write_diagnostics_json(json, diagnostics);
    json.end_object();
    return json.str() + "\n";
}

} // namespace gpuinit::tools
