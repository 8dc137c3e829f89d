#include "render/persist_report.hpp"

#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"

#include <cstring>

namespace gpuinit::tools {

Rendered render_persist_text(const ClientReply& client) {
    const ControlReply& reply = client.reply;
    Rendered rendered;
    if (reply.code != 0) {
        rendered.err += "gpu-persist: error: " + reply.message + "\n";
    }
    const DaemonInfo& d = reply.daemon;
    rendered.out += format("gpu-persist: pid %d, ", static_cast<int>(d.pid));
    rendered.out += d.runs_as_root ? std::string("running as root")
                                   : format("running as uid %u (privileges separated)",
                                            static_cast<unsigned>(d.uid));
    rendered.out += ", nvidia-smi compat " + d.compat + ", hotplug " + d.hotplug;
    if (client.from_status_file) {
        rendered.out += " (from its status file)";
    }
    rendered.out += "\n";
    if (reply.gpus.empty()) {
        rendered.out += "no GPU: the driver lists none\n";
        return rendered;
    }
    rendered.out += format("%-5s %-14s %-18s %s\n", "MINOR", "PCI", "STATE", "NOTE");
    for (const HeldGpu& gpu : reply.gpus) {
        std::string note = gpu.error;
        if (!gpu.wanted && gpu.state != HoldState::Disabled) {
            note = "disabled; released when its init finishes";
        }
        rendered.out += format("%-5u %-14s %-18s %s\n", gpu.id.minor, gpu.id.bdf.c_str(),
                               hold_state_name(gpu.state), note.c_str());
    }
    return rendered;
}

std::string render_persist_json(const ClientReply& client, int exit_code) {
    const ControlReply& reply = client.reply;
    JsonWriter json;
    json.begin_object();
    json.key("exit_code").value(exit_code);
    json.key("result").begin_object();
    json.key("code").value(reply.code);
    json.key("errno").value(reply.code != 0 ? strerrorname_np(reply.code) : "");
    json.key("message").value(reply.message);
    json.end_object();
    json.key("from_status_file").value(client.from_status_file);
    json.key("daemon").begin_object();
    json.key("pid").value(static_cast<int>(reply.daemon.pid));
    json.key("uid").value(static_cast<unsigned>(reply.daemon.uid));
    json.key("runs_as_root").value(reply.daemon.runs_as_root);
    json.key("nvidia_smi_compat").value(reply.daemon.compat);
    json.key("hotplug").value(reply.daemon.hotplug);
    json.end_object();
    json.key("gpus").begin_array();
    for (const HeldGpu& gpu : reply.gpus) {
        json.begin_object();
        json.key("minor").value(gpu.id.minor);
        json.key("pci").value(gpu.id.bdf);
        json.key("uuid").value(gpu.id.uuid);
        json.key("state").value(hold_state_name(gpu.state));
        json.key("enabled").value(gpu.wanted);
        json.key("held").value(gpu.state == HoldState::Held);
        json.key("errno").value(gpu.error_code != 0 ? strerrorname_np(gpu.error_code) : "");
        json.key("message").value(gpu.error);
        json.end_object();
    }
    json.end_array();
    json.end_object();
    return json.str() + "\n";
}

} // namespace gpuinit::tools
