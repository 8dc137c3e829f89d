#include "gpuinit/devnodes/node_plan.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/pci.hpp"
#include "gpuinit/host/procfs.hpp"

#include <algorithm>

namespace gpuinit {

namespace {

void add_error(NodePlan& plan, std::string message) {
    plan.problems.push_back({Problem::Severity::Error, std::move(message)});
}

void add_warning(NodePlan& plan, std::string message) {
    plan.problems.push_back({Problem::Severity::Warning, std::move(message)});
}

// Resolves the rule's names to ids. A name that does not resolve never
// widens access: the node becomes root:root 0600 and the problem is an error.
void add_node(NodePlan& plan, const AccountDb& accounts, std::string name, unsigned major,
              unsigned minor, const AccessRule& rule, std::string subject) {
    NodeSpec node;
    node.name = std::move(name);
    node.major = major;
    node.minor = minor;
    node.subject = std::move(subject);
    node.origin = rule.origin;
    auto uid = accounts.user(rule.owner);
    auto gid = accounts.group(rule.group);
    if (uid && gid) {
        node.uid = *uid;
        node.gid = *gid;
        node.owner = rule.owner;
        node.group = rule.group;
        node.mode = rule.mode;
    } else {
        node.uid = 0;
        node.gid = 0;
        node.owner = "root";
        node.group = "root";
        node.mode = 0600;
        if (!gid) {
            add_error(plan, "group " + rule.group + " does not exist (" + node.subject +
                                ", rule from " + rule.origin + "): run 'groupadd " + rule.group +
                                "' and rerun; /dev/" + node.name + " stays root-only 0600");
        }
        if (!uid) {
            add_error(plan, "user " + rule.owner + " does not exist (" + node.subject +
                                ", rule from " + rule.origin +
                                "): create it or fix owner= and"
                                " rerun; /dev/" +
                                node.name + " stays root-only 0600");
        }
    }
    plan.links.push_back({char_link_name(major, minor), "../" + node.name});
    plan.nodes.push_back(std::move(node));
}

// `wanted` is what --device said: a minor or a PCI address.
bool names_gpu(const std::string& wanted, std::optional<unsigned> minor, const std::string& bdf) {
    if (auto number = parse_decimal(wanted, kMaxGpuMinor)) {
        return minor == *number;
    }
    return normalize_bdf(wanted) == bdf;
}

void plan_gpus(NodePlan& plan, const Machine& machine, const Policy& policy,
               const AccountDb& accounts, const PlanRequest& request) {
    bool by_device = request.scope == PlanRequest::Scope::Device;
    bool found = false;
    for (const Gpu& gpu : machine.gpus) {
        if (by_device && !names_gpu(request.device, gpu.minor, gpu.bdf)) {
            continue;
        }
        found = true;
        AccessRule rule = policy.rule_for_gpu(GpuIdentity{gpu.minor, gpu.bdf, gpu.uuid});
        add_node(plan, accounts, "nvidia" + std::to_string(gpu.minor), *machine.nvidia_major,
                 gpu.minor, rule, format("GPU %u (%s)", gpu.minor, gpu.bdf.c_str()));
    }
    for (const UnusableGpu& gpu : machine.unusable) {
        if (by_device && !names_gpu(request.device, std::nullopt, gpu.bdf)) {
            continue;
        }
        found = true;
        std::string message = "GPU " + gpu.bdf + " gets no node: " + gpu.reason;
        if (gpu.is_error || by_device) {
            add_error(plan, std::move(message));
        } else {
            add_warning(plan, std::move(message));
        }
    }
    if (by_device && !found) {
        add_error(plan, "no NVIDIA GPU with minor or PCI address '" + request.device +
                            "' (check /proc/driver/nvidia/gpus and lspci -d 10de:)");
    }
}

void plan_control(NodePlan& plan, const Machine& machine, const Policy& policy,
                  const AccountDb& accounts) {
    unsigned major = *machine.nvidia_major;
    add_node(plan, accounts, "nvidiactl", major, kControlMinor,
             policy.rule_for_control("nvidiactl"), "control");
    if (machine.modeset_loaded) {
        add_node(plan, accounts, "nvidia-modeset", major, kModesetMinor,
                 policy.rule_for_control("nvidia-modeset"), "control");
    }
    if (machine.uvm_major) {
        add_node(plan, accounts, "nvidia-uvm", *machine.uvm_major, 0,
                 policy.rule_for_control("nvidia-uvm"), "control");
        add_node(plan, accounts, "nvidia-uvm-tools", *machine.uvm_major, 1,
                 policy.rule_for_control("nvidia-uvm-tools"), "control");
    }
}

} // namespace

bool NodePlan::has_errors() const {
    return std::any_of(problems.begin(), problems.end(),
                       [](const Problem& p) { return p.severity == Problem::Severity::Error; });
}

std::string char_link_name(unsigned major, unsigned minor) {
    return "char/" + std::to_string(major) + ":" + std::to_string(minor);
}

NodePlan plan_nodes(const Machine& machine, const Policy& policy, const AccountDb& accounts,
                    const PlanRequest& request) {
    NodePlan plan;
    for (const std::string& warning : machine.warnings) {
        add_warning(plan, warning);
    }
    for (const std::string& error : machine.errors) {
        add_error(plan, error);
    }
    if (!machine.nvidia_major) {
        return plan;
    }
    if (request.scope != PlanRequest::Scope::Device) {
        plan_control(plan, machine, policy, accounts);
    }
    if (request.scope != PlanRequest::Scope::Control) {
        plan_gpus(plan, machine, policy, accounts, request);
    }
    if (request.scope == PlanRequest::Scope::All) {
        std::vector<GpuIdentity> present;
        for (const Gpu& gpu : machine.gpus) {
            present.push_back({gpu.minor, gpu.bdf, gpu.uuid});
        }
        for (std::string& message : policy.unmatched(present)) {
            add_warning(plan, std::move(message));
        }
    }
    return plan;
}

} // namespace gpuinit
