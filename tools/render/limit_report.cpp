#include "render/limit_report.hpp"

#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"

#include <algorithm>
#include <cstring>

namespace gpuinit::tools {

namespace {

const char* compute_driver_name(uint32_t driver) {
    switch (driver) {
    case 1:
        return "in-process sampling";
    case 2:
        return "the host daemon";
    default:
        return "nobody yet";
    }
}

constexpr const char* kProgram = "gpu-limit";

const char* rule_name(limit::MemoryRule rule) {
    switch (rule) {
    case limit::MemoryRule::None:
        return "none";
    case limit::MemoryRule::PerDevice:
        return "per-device";
    case limit::MemoryRule::Ratio:
        return "ratio";
    case limit::MemoryRule::ContainerGiB:
        return "container-gib";
    }
    return "none";
}

std::string finished(JsonWriter& json, const Diagnostics& diagnostics) {
    json.key("diagnostics");
    write_diagnostics_json(json, diagnostics);
    json.end_object();
    return json.str() + "\n";
}

// The UUID and a slot's comm are as the group's processes wrote them (the
// state file is theirs): the text report shows them through printable().
std::string uuid_of(const limit::DeviceUsage& device) {
    return std::string(device.uuid, strnlen(device.uuid, sizeof device.uuid));
}

} // namespace

std::string human_bytes(uint64_t bytes) {
    static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        return format("%llu B", static_cast<unsigned long long>(bytes));
    }
    double value = static_cast<double>(bytes);
    size_t unit = 0;
    value /= 1024;
    while (value >= 1024 && unit + 1 < std::size(kUnits)) {
        value /= 1024;
        ++unit;
    }
    return format("%.2f %s", value, kUnits[unit]);
}

std::string shell_word(const std::string& word) {
    bool safe = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               std::string_view("/._-:,=+@%").find(c) != std::string_view::npos;
    });
    if (safe) {
        return word;
    }
    std::string quoted = "'";
    for (char c : word) {
        quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return quoted + "'";
}

Rendered render_run_plan_text(const limit::RunPlan& plan, const std::vector<std::string>& command,
                              const Diagnostics& diagnostics, int verbosity) {
    Rendered rendered;
    render_diagnostics(kProgram, diagnostics, verbosity, rendered);
    for (const std::string& name : plan.unset) {
        rendered.out += "unset " + name + "\n";
    }
    for (const auto& [name, value] : plan.set) {
        rendered.out += "export " + name + "=" + shell_word(value) + "\n";
    }
    std::string line = "exec";
    for (const std::string& word : command) {
        line += " " + shell_word(word);
    }
    rendered.out += line + "\n";
    if (verbosity > 0) {
        rendered.err += "gpu-limit: group " + plan.group + " (from " + plan.group_source +
                        "), state in " + plan.state_dir + "/" + plan.group + "\n";
    }
    return rendered;
}

std::string render_run_plan_json(const limit::RunPlan& plan,
                                 const std::vector<std::string>& command,
                                 const Diagnostics& diagnostics, int exit_code) {
    JsonWriter json;
    json.begin_object();
    json.key("exit_code").value(exit_code);
    json.key("group").value(plan.group);
    json.key("group_source").value(plan.group_source);
    json.key("state_dir").value(plan.state_dir);
    json.key("library").value(plan.library);
    json.key("memory_rule").value(rule_name(plan.rule));
    json.key("environment").begin_object();
    for (const auto& [name, value] : plan.set) {
        json.key(name).value(value);
    }
    json.end_object();
    json.key("unset").begin_array();
    for (const std::string& name : plan.unset) {
        json.value(name);
    }
    json.end_array();
    json.key("command").begin_array();
    for (const std::string& word : command) {
        json.value(word);
    }
    json.end_array();
    return finished(json, diagnostics);
}

Rendered render_status_text(const limit::StatusReport& report, const Diagnostics& diagnostics,
                            int verbosity) {
    Rendered rendered;
    render_diagnostics(kProgram, diagnostics, verbosity, rendered);
    if (report.groups.empty()) {
        rendered.out += "no group in " + report.state_dir +
                        (report.state_dir_exists ? "\n" : " (it does not exist yet)\n");
        return rendered;
    }
    for (const limit::GroupReport& group : report.groups) {
        size_t live = static_cast<size_t>(
            std::count_if(group.processes.begin(), group.processes.end(),
                          [](const limit::ProcessUsage& process) { return process.alive; }));
        rendered.out += format("group %s: %zu device(s), %zu live process(es)  (%s)\n",
                               group.name.c_str(), group.devices.size(), live, group.path.c_str());
        if (group.reclaimed > 0) {
            rendered.out +=
                format("  returned the memory of %d dead process(es)\n", group.reclaimed);
        }
        if (!group.devices.empty()) {
            rendered.out += format("  %-3s %-40s %12s %12s %12s %12s %8s\n", "DEV", "UUID", "CAP",
                                   "USED", "PEAK", "PHYSICAL", "REFUSED");
        }
        for (size_t d = 0; d < group.devices.size(); ++d) {
            const limit::DeviceUsage& device = group.devices[d];
            rendered.out += format(
                "  %-3zu %-40s %12s %12s %12s %12s %8llu\n", d, printable(uuid_of(device)).c_str(),
                human_bytes(device.cap).c_str(), human_bytes(device.used).c_str(),
                human_bytes(device.peak).c_str(), human_bytes(device.physical_total).c_str(),
                static_cast<unsigned long long>(device.refusals));
            if (device.external_bytes != 0) {
                rendered.out += format("      of which %s measured by the host daemon outside "
                                       "the interposer's books\n",
                                       human_bytes(device.external_bytes).c_str());
            }
            if (device.compute_percent != 0) {
                rendered.out += format(
                    "      compute: cap %u%%, measured %.1f%%, gate %s, %llu launch(es) held, "
                    "driven by %s\n",
                    device.compute_percent, static_cast<double>(device.share_ppm) / 10000.0,
                    device.gate_open ? "open" : "closed",
                    static_cast<unsigned long long>(device.launches_held),
                    compute_driver_name(device.compute_driver));
            }
        }
        for (const limit::ProcessUsage& process : group.processes) {
            if (!process.alive && verbosity <= 0) {
                continue; // reclaimed at the next allocation of any member
            }
            std::string usage;
            for (size_t d = 0; d < process.charged.size(); ++d) {
                if (process.charged[d] != 0) {
                    usage += format(" dev %zu: %s", d, human_bytes(process.charged[d]).c_str());
                }
            }
            // A container's pid is its own namespace's; the daemon's is the host's.
            std::string host;
            if (process.host_pid != 0 && process.host_pid != process.pid) {
                host = format(" (host pid %d)", static_cast<int>(process.host_pid));
            }
            rendered.out += format("  pid %-8d %-16s%s%s%s\n", static_cast<int>(process.pid),
                                   printable(process.comm).c_str(), host.c_str(),
                                   process.alive ? "" : " (dead)",
                                   usage.empty() ? " nothing allocated" : usage.c_str());
        }
    }
    return rendered;
}

std::string render_status_json(const limit::StatusReport& report, const Diagnostics& diagnostics,
                               int exit_code) {
    JsonWriter json;
    json.begin_object();
    json.key("exit_code").value(exit_code);
    json.key("state_dir").value(report.state_dir);
    json.key("groups").begin_array();
    for (const limit::GroupReport& group : report.groups) {
        json.begin_object();
        json.key("name").value(group.name);
        json.key("path").value(group.path);
        json.key("reclaimed_processes").value(group.reclaimed);
        json.key("devices").begin_array();
        for (const limit::DeviceUsage& device : group.devices) {
            json.begin_object();
            json.key("uuid").value(uuid_of(device));
            json.key("cap_bytes").value(device.cap);
            json.key("used_bytes").value(device.used);
            json.key("peak_bytes").value(device.peak);
            json.key("physical_bytes").value(device.physical_total);
            json.key("refusals").value(device.refusals);
            json.key("external_bytes").value(device.external_bytes);
            json.key("compute").begin_object();
            json.key("cap_percent").value(device.compute_percent);
            json.key("share_ppm").value(device.share_ppm);
            json.key("gate_open").value(device.gate_open);
            json.key("launches_held").value(device.launches_held);
            json.key("driver").value(compute_driver_name(device.compute_driver));
            json.end_object();
            json.end_object();
        }
        json.end_array();
        json.key("processes").begin_array();
        for (const limit::ProcessUsage& process : group.processes) {
            json.begin_object();
            json.key("slot").value(process.slot);
            json.key("pid").value(static_cast<int>(process.pid));
            json.key("host_pid").value(static_cast<int>(process.host_pid));
            json.key("comm").value(process.comm);
            json.key("alive").value(process.alive);
            json.key("used_bytes").begin_array();
            for (uint64_t bytes : process.charged) {
                json.value(bytes);
            }
            json.end_array();
            json.end_object();
        }
        json.end_array();
        json.end_object();
    }
    json.end_array();
    return finished(json, diagnostics);
}

} // namespace gpuinit::tools
