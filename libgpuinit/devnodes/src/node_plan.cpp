#include "gpuinit/devnodes/node_plan.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/gpu_information.hpp"

namespace gpuinit {

namespace {

void add_node(NodePlan& plan, const AccountDb& accounts, std::string name, unsigned major,
              unsigned minor, const AccessRule& rule, std::string subject,
              Diagnostics& diagnostics) {
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
        node.unresolved = true;
        std::string device = "/dev/" + node.name;
        if (!gid) {
            diagnostics.add(Diagnostic{
                Severity::Error, 0, kReasonNoAccount, Location::of_device(device, rule.group),
                "group " + rule.group + " does not exist (" + node.subject + ", rule from " +
                    rule.origin + "): run 'groupadd " + rule.group + "' and rerun; " + device +
                    " stays root-only 0600"});
        }
        if (!uid) {
            diagnostics.add(Diagnostic{
                Severity::Error, 0, kReasonNoAccount, Location::of_device(device),
                "user " + rule.owner + " does not exist (" + node.subject + ", rule from " +
                    rule.origin + "): create it or fix owner= and rerun; " + device +
                    " stays root-only 0600"});
        }
    }
    plan.links.push_back({char_link_name(major, minor), "../" + node.name});
    plan.nodes.push_back(std::move(node));
}

bool in_scope(const PlanRequest& request, const GpuIdentity& gpu) {
    return request.scope != PlanRequest::Scope::Device || request.device->matches(gpu);
}

void plan_gpus(NodePlan& plan, const Machine& machine, const Policy& policy,
               const AccountDb& accounts, const PlanRequest& request, Diagnostics& diagnostics) {
    bool by_device = request.scope == PlanRequest::Scope::Device;
    bool found = false;
    for (const Gpu& gpu : machine.gpus) {
        if (!in_scope(request, gpu.identity())) {
            continue;
        }
        found = true;
        AccessRule rule = policy.rule_for_gpu(gpu.identity());
        add_node(plan, accounts, gpu_node_name(gpu.minor), *machine.nvidia_major, gpu.minor, rule,
                 gpu.subject(), diagnostics);
        plan.nodes.back().gpu_minor = gpu.minor;
    }
    for (const UnusableGpu& gpu : machine.unusable) {
        // Only a PCI address names a GPU without a minor.
        if (by_device && !in_scope(request, GpuIdentity{kMaxGpuMinor + 1, gpu.bdf, {}})) {
            continue;
        }
        found = true;
        Diagnostic problem;
        problem.severity = by_device ? Severity::Error : gpu.severity;
        problem.where.device = "GPU " + gpu.bdf;
        problem.message = "GPU " + gpu.bdf + " gets no node: " + gpu.reason;
        diagnostics.add(std::move(problem));
    }
    if (by_device && !found) {
        diagnostics.error("no NVIDIA GPU " + request.device->text() +
                              " (check /proc/driver/nvidia/gpus and lspci -d 10de:)",
                          Location::of_device(request.device->text()));
    }
}

void plan_control(NodePlan& plan, const Machine& machine, const Policy& policy,
                  const AccountDb& accounts, Diagnostics& diagnostics) {
    unsigned major = *machine.nvidia_major;
    add_node(plan, accounts, "nvidiactl", major, kControlMinor,
             policy.rule_for_control("nvidiactl"), "control", diagnostics);
    if (machine.modeset_loaded) {
        add_node(plan, accounts, "nvidia-modeset", major, kModesetMinor,
                 policy.rule_for_control("nvidia-modeset"), "control", diagnostics);
    }
    if (machine.uvm_major) {
        add_node(plan, accounts, "nvidia-uvm", *machine.uvm_major, 0,
                 policy.rule_for_control("nvidia-uvm"), "control", diagnostics);
        add_node(plan, accounts, "nvidia-uvm-tools", *machine.uvm_major, 1,
                 policy.rule_for_control("nvidia-uvm-tools"), "control", diagnostics);
    }
}

constexpr std::string_view kCapsDir = "nvidia-caps";
constexpr std::string_view kCapPrefix = "nvidia-cap";

// Every MIG capability that exists: config and monitor keep the driver's
// owner and mode; an instance's caps take the policy's MIG rule, else the
// driver's mode (root:root). Destroyed instances' nodes are pruned.
void plan_mig(NodePlan& plan, const Machine& machine, const Policy& policy,
              const AccountDb& accounts, Diagnostics& diagnostics) {
    if (!machine.caps_major || machine.mig.caps.empty()) {
        return;
    }
    unsigned major = *machine.caps_major;
    for (const MigCap& cap : machine.mig.caps) {
        std::optional<AccessRule> rule;
        std::string subject = cap.subject();
        if (cap.kind == MigCap::Kind::GpuInstance || cap.kind == MigCap::Kind::ComputeInstance) {
            GpuIdentity gpu{cap.gpu_minor, {}, {}};
            for (const Gpu& known : machine.gpus) {
                if (known.minor == cap.gpu_minor) {
                    gpu = known.identity();
                }
            }
            std::optional<unsigned> ci;
            if (cap.kind == MigCap::Kind::ComputeInstance) {
                ci = cap.ci;
            }
            rule = policy.rule_for_mig(gpu, cap.gi, ci);
        }
        if (!rule) {
            rule = AccessRule{"root", "root", cap.mode, "the driver's mode"};
        }
        add_node(plan, accounts, cap_node_name(cap.minor), major, cap.minor, *rule, subject,
                 diagnostics);
        if (cap.kind == MigCap::Kind::GpuInstance || cap.kind == MigCap::Kind::ComputeInstance) {
            plan.nodes.back().gpu_minor = cap.gpu_minor;
        }
        if (cap.modify) {
            plan.modify_off.push_back(cap.access);
        }
    }
    plan.prune.push_back({std::string(kCapsDir), std::string(kCapPrefix), major});
}

} // namespace

std::string cap_node_name(unsigned minor) {
    return std::string(kCapsDir) + "/" + std::string(kCapPrefix) + std::to_string(minor);
}

std::string gpu_node_name(unsigned minor) {
    return "nvidia" + std::to_string(minor);
}

std::string char_link_name(unsigned major, unsigned minor) {
    return "char/" + std::to_string(major) + ":" + std::to_string(minor);
}

NodePlan plan_nodes(const Machine& machine, const Policy& policy, const AccountDb& accounts,
                    const PlanRequest& request, Diagnostics& diagnostics) {
    NodePlan plan;
    if (!machine.nvidia_major) {
        return plan;
    }
    // Sized once: a vector grown one node at a time leaves its smaller
    // copies behind on the heap, and every new heap page is a page fault.
    constexpr size_t kMaxControlNodes = 4;
    plan.nodes.reserve(machine.gpus.size() + kMaxControlNodes + machine.mig.caps.size());
    plan.links.reserve(machine.gpus.size() + kMaxControlNodes + machine.mig.caps.size());
    if (request.scope == PlanRequest::Scope::All || request.scope == PlanRequest::Scope::Control) {
        plan_control(plan, machine, policy, accounts, diagnostics);
    }
    if (request.scope == PlanRequest::Scope::All || request.scope == PlanRequest::Scope::Device) {
        plan_gpus(plan, machine, policy, accounts, request, diagnostics);
    }
    if (request.scope == PlanRequest::Scope::All || request.scope == PlanRequest::Scope::Mig) {
        plan_mig(plan, machine, policy, accounts, diagnostics);
    }
    if (request.scope == PlanRequest::Scope::All) {
        std::vector<GpuIdentity> present;
        present.reserve(machine.gpus.size());
        for (const Gpu& gpu : machine.gpus) {
            present.push_back(gpu.identity());
        }
        policy.report_unmatched(present, diagnostics);
        std::vector<unsigned> with_instances;
        for (const MigCap& cap : machine.mig.caps) {
            if (cap.kind == MigCap::Kind::GpuInstance) {
                with_instances.push_back(cap.gpu_minor);
            }
        }
        policy.report_mig_without_instances(present, with_instances, diagnostics);
    }
    if (!plan.nodes.empty()) {
        plan.dirs.push_back(DirSpec{""});
        plan.dirs.push_back(DirSpec{"char"});
    }
    if (!plan.prune.empty()) {
        plan.dirs.push_back(DirSpec{std::string(kCapsDir)});
    }
    return plan;
}

} // namespace gpuinit
