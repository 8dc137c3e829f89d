#include "render/limit_daemon_report.hpp"

#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"

namespace gpuinit::tools {

namespace limit = gpuinit::limit;

std::string render_daemon_pass_text(const limit::PassReport& report) {
    std::string out = report.nvml ? "" : "NVML: not available (registration only)\n";
    if (!report.process_lists_problem.empty()) {
        out += "NVML process lists: not used: " + report.process_lists_problem +
               " (memory outside the interposer is not charged)\n";
    }
    for (const limit::PassNvmlDevice& device : report.nvml_devices) {
        out += format("NVML GPU %u %s: %zu processes (%s", device.index, device.uuid.c_str(),
                      device.processes.size(), limit::listing_name(device.listing));
        if (!device.detail.call.empty()) {
            out +=
                format(" by %s, %u-byte entries", device.detail.call.c_str(), device.detail.stride);
        }
        out += device.detail.problem.empty() ? ")\n" : ": " + device.detail.problem + ")\n";
    }
    if (report.groups.empty()) {
        out += "no groups\n";
    }
    for (const limit::PassGroup& group : report.groups) {
        out += format("group %s: %zu registered\n", group.name.c_str(), group.registered);
        for (const limit::PassDevice& device : group.devices) {
            out += format("  %s: counted %llu, measured %llu, external %llu, cap %llu%s\n",
                          device.uuid.c_str(), static_cast<unsigned long long>(device.counted),
                          static_cast<unsigned long long>(device.measured),
                          static_cast<unsigned long long>(device.external),
                          static_cast<unsigned long long>(device.cap),
                          device.over_cap ? " (over the cap)" : "");
            if (device.driven) {
                out += format("    compute cap %u%%: busy %llu ns this step, gate %s\n",
                              device.cap_percent, static_cast<unsigned long long>(device.busy_ns),
                              device.gate_open ? "open" : "closed");
            }
            for (const limit::PassProcess& process : device.processes) {
                out +=
                    format("    pid %d (%s): %llu bytes, sm %u%%\n", process.pid,
                           process.registered ? "registered" : "cgroup",
                           static_cast<unsigned long long>(process.used_bytes), process.sm_percent);
            }
        }
    }
    for (const std::string& action : report.actions) {
        out += action + "\n";
    }
    return out;
}

std::string render_daemon_pass_json(const limit::PassReport& report) {
    JsonWriter json;
    json.begin_object();
    json.key("nvml").value(report.nvml);
    json.key("process_lists_problem").value(report.process_lists_problem);
    json.key("nvml_devices").begin_array();
    for (const limit::PassNvmlDevice& device : report.nvml_devices) {
        json.begin_object();
        json.key("index").value(device.index);
        json.key("uuid").value(device.uuid);
        json.key("listing").value(limit::listing_name(device.listing));
        json.key("call").value(device.detail.call);
        json.key("stride").value(device.detail.stride);
        json.key("problem").value(device.detail.problem);
        json.key("processes").begin_array();
        for (const limit::NvmlProcess& process : device.processes) {
            json.begin_object();
            json.key("pid").value(process.pid);
            json.key("used_bytes").value(process.used_bytes);
            json.end_object();
        }
        json.end_array();
        json.end_object();
    }
    json.end_array();
    json.key("groups").begin_array();
    for (const limit::PassGroup& group : report.groups) {
        json.begin_object();
        json.key("name").value(group.name);
        json.key("registered").value(static_cast<uint64_t>(group.registered));
        json.key("devices").begin_array();
        for (const limit::PassDevice& device : group.devices) {
            json.begin_object();
            json.key("uuid").value(device.uuid);
            json.key("cap").value(device.cap);
            json.key("counted").value(device.counted);
            json.key("measured").value(device.measured);
            json.key("external").value(device.external);
            json.key("over_cap").value(device.over_cap);
            json.key("compute_cap_percent").value(device.cap_percent);
            json.key("driven").value(device.driven);
            json.key("gate_open").value(device.gate_open);
            json.key("busy_ns").value(device.busy_ns);
            json.key("processes").begin_array();
            for (const limit::PassProcess& process : device.processes) {
                json.begin_object();
                json.key("pid").value(process.pid);
                json.key("source").value(process.registered ? "registered" : "cgroup");
                json.key("used_bytes").value(process.used_bytes);
                json.key("sm_percent").value(process.sm_percent);
                json.end_object();
            }
            json.end_array();
            json.end_object();
        }
        json.end_array();
        json.end_object();
    }
    json.end_array();
    json.key("actions").begin_array();
    for (const std::string& action : report.actions) {
        json.value(action);
    }
    json.end_array();
    json.end_object();
    return json.str() + "\n";
}

} // namespace gpuinit::tools
