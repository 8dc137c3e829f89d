#include "gpuinit/modules/driver_check.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/accounts.hpp"
#include "gpuinit/host/driver_params.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/host/policy.hpp"
#include "gpuinit/modules/failures.hpp"

#include <algorithm>
#include <optional>

namespace gpuinit {

namespace {

// One node the driver's settings apply to: a GPU, or a control node.
struct NodeAccess {
    std::string who;  // "GPU 0", "/dev/nvidiactl"
    std::string kind; // for the every-user message: "GPUs", "/dev/nvidiactl"
    AccessRule rule;
    std::optional<uid_t> uid;
    std::optional<gid_t> gid;
};

// The findings, each once; the ModifyDeviceFiles one leads.
class Dangers {
  public:
    void add(std::string message, bool lead = false) {
        if (std::find(messages_.begin(), messages_.end(), message) != messages_.end()) {
            return;
        }
        messages_.insert(lead ? messages_.begin() : messages_.end(), std::move(message));
    }
    void report(Diagnostics& diagnostics) const {
        for (const std::string& message : messages_) {
            diagnostics.add(module_failure(ModuleFailure::CheckDanger, message));
        }
    }

  private:
    std::vector<std::string> messages_;
};

// Does the driver's uid/gid/mode give anyone read or write access the rule
// does not? (Execute bits mean nothing on a device node.) A class the rule
// already opens to every user gains nothing.
void check_widening(const DriverCheck& check, const NodeAccess& node, Dangers& dangers) {
    unsigned driver_mode = static_cast<unsigned>(check.mode) & 0777u;
    unsigned driver_rw = driver_mode & 0666u;
    unsigned policy_mode = node.rule.mode;
    unsigned policy_rw = policy_mode & 0666u;
    unsigned everyone = policy_rw & 06u;
    std::string driver_text = format("NVreg_DeviceFileMode=%s", format_mode(driver_mode).c_str());
    if ((driver_rw & 06u) & ~everyone) {
        dangers.add(driver_text +
                    " lets every user open the nodes nvidia-modprobe creates, but the policy (" +
                    node.rule.origin + ") gives " + node.kind + " " + format_mode(policy_mode) +
                    "; set NVreg_DeviceFileMode=0660 or stricter and reload the driver");
    }
    bool group_bits = ((driver_rw & 060u) & ~(everyone << 3)) != 0;
    bool owner_bits = ((driver_rw & 0600u) & ~(everyone << 6)) != 0;
    // Fail closed: an id the policy names but this root cannot resolve (a
    // typo, or a directory group gpu-modload cannot see) may or may not be
    // the driver's.
    if (group_bits && check.gid != 0 && !node.gid) {
        dangers.add(format("NVreg_DeviceFileGID=%llu with %s: the group %s that the policy (%s)"
                           " names cannot be resolved, so group %llu may get access the policy"
                           " denies; create the group (groupadd %s) or set NVreg_DeviceFileGID=0",
                           static_cast<unsigned long long>(check.gid), driver_text.c_str(),
                           node.rule.group.c_str(), node.rule.origin.c_str(),
                           static_cast<unsigned long long>(check.gid), node.rule.group.c_str()));
    }
    if (owner_bits && check.uid != 0 && !node.uid) {
        dangers.add(format("NVreg_DeviceFileUID=%llu: the owner %s that the policy (%s) names"
                           " cannot be resolved, so user %llu may own nodes the policy gives to"
                           " another; create the user or set NVreg_DeviceFileUID=0",
                           static_cast<unsigned long long>(check.uid), node.rule.owner.c_str(),
                           node.rule.origin.c_str(), static_cast<unsigned long long>(check.uid)));
    }
    if (group_bits && check.gid != 0 && node.gid && check.gid != *node.gid) {
        dangers.add(format("NVreg_DeviceFileGID=%llu with %s gives group %llu access to %s,"
                           " which the policy (%s) gives to group %s; set NVreg_DeviceFileGID=0",
                           static_cast<unsigned long long>(check.gid), driver_text.c_str(),
                           static_cast<unsigned long long>(check.gid), node.who.c_str(),
                           node.rule.origin.c_str(), node.rule.group.c_str()));
    } else if (node.gid && check.gid == *node.gid && ((driver_rw & 060u) & ~(policy_rw & 060u))) {
        dangers.add(driver_text + " gives group " + node.rule.group + " more than the " +
                    format_mode(policy_mode) + " of the policy (" + node.rule.origin + ") for " +
                    node.who);
    }
    if (owner_bits && check.uid != 0 && node.uid && check.uid != *node.uid) {
        dangers.add(format("NVreg_DeviceFileUID=%llu owns the nodes nvidia-modprobe creates"
                           " (%s), which the policy gives to %s; set NVreg_DeviceFileUID=0",
                           static_cast<unsigned long long>(check.uid), node.who.c_str(),
                           node.rule.owner.c_str()));
    }
}

} // namespace

Result<DriverCheck> check_driver(const Sysroot& root, Diagnostics& diagnostics) {
    DriverCheck check;
    auto loaded = root.exists(kDriverParamsPath);
    if (!loaded) {
        return loaded.error();
    }
    if (!*loaded) {
        return check;
    }
    check.driver_loaded = true;
    auto text = root.read_file(kDriverParamsPath);
    if (!text) {
        return text.error();
    }
    auto params = parse_driver_params(*text, root.display(kDriverParamsPath));
    if (!params) {
        return params.error();
    }
    // A parameter missing from params counts with the driver's default; one
    // that is there but not a number cannot be judged.
    struct Param {
        const char* name;
        uint64_t driver_default;
        uint64_t* value;
    } wanted[] = {{"DeviceFileUID", 0, &check.uid},
                  {"DeviceFileGID", 0, &check.gid},
                  {"DeviceFileMode", 0666, &check.mode},
                  {"ModifyDeviceFiles", 1, &check.modify_device_files}};
    for (const Param& param : wanted) {
        auto value = params->number(param.name);
        if (!value) {
            return value.error();
        }
        if (!*value) {
            check.not_in_params.emplace_back(param.name);
        }
        *param.value = value->value_or(param.driver_default);
    }

    auto policy = Policy::load(root);
    if (!policy) {
        return policy.error();
    }
    check.policy_source = policy->source();
    auto accounts = AccountDb::load(root, diagnostics);
    if (!accounts) {
        return accounts.error();
    }
    // GPUs not bound to the driver are not the driver's settings' business:
    // no PCI walk, and discovery's own notes are not the check's findings.
    Diagnostics discovery;
    auto machine = discover_machine(root, discovery, {PciNeed::Scope::None, {}});
    if (!machine) {
        Diagnostic failed = machine.error();
        failed.message += "; the driver's settings cannot be judged without its GPUs";
        return failed;
    }
    for (const UnusableGpu& gpu : machine->unusable) {
        if (gpu.severity == Severity::Error) {
            return error("GPU " + gpu.bdf + ": " + gpu.reason +
                         "; the driver's settings cannot be judged without it");
        }
    }
    auto access = [&](std::string who, std::string kind, const AccessRule& rule) {
        return NodeAccess{std::move(who), std::move(kind), rule, accounts->user(rule.owner),
                          accounts->group(rule.group)};
    };
    std::vector<NodeAccess> gpus;
    for (const Gpu& gpu : machine->gpus) {
        gpus.push_back(
            access(format("GPU %u", gpu.minor), "GPUs", policy->rule_for_gpu(gpu.identity())));
    }
    if (gpus.empty()) {
        // No GPU bound yet: judge the rule the first GPU would get.
        gpus.push_back(access("GPU 0", "GPUs", policy->rule_for_gpu({0, "", ""})));
    }
    std::vector<std::string_view> control_names = {"nvidiactl"};
    if (machine->uvm_major) {
        control_names.insert(control_names.end(), {"nvidia-uvm", "nvidia-uvm-tools"});
    }
    if (machine->modeset_loaded) {
        control_names.push_back("nvidia-modeset");
    }

    Dangers dangers;
    // nvidia-modprobe resets every node to one uid/gid/mode. That undoes the
    // policy when it is the classic one group per GPU, when GPUs differ from
    // each other, or when a GPU's rule is not exactly the driver's.
    bool per_gpu_scheme = !policy->from_file();
    unsigned driver_mode = static_cast<unsigned>(check.mode) & 0777u;
    for (const NodeAccess& gpu : gpus) {
        const AccessRule& first = gpus.front().rule;
        per_gpu_scheme = per_gpu_scheme || gpu.rule.group != first.group ||
                         gpu.rule.owner != first.owner || gpu.rule.mode != first.mode ||
                         gpu.rule.mode != driver_mode || !gpu.gid || *gpu.gid != check.gid ||
                         !gpu.uid || *gpu.uid != check.uid;
        check_widening(check, gpu, dangers);
    }
    // nvidia-modprobe creates the control nodes, and with ModifyDeviceFiles
    // resets them, with the same uid/gid/mode.
    for (std::string_view name : control_names) {
        std::string node = "/dev/" + std::string(name);
        check_widening(check, access(node, node, policy->rule_for_control(name)), dangers);
    }
    if (check.modify_device_files != 0 && per_gpu_scheme) {
        dangers.add(format("ModifyDeviceFiles is %llu:",
                           static_cast<unsigned long long>(check.modify_device_files)) +
                        " every CUDA or NVML start runs nvidia-modprobe, which resets each"
                        " /dev/nvidia* to DeviceFileUID/GID/Mode and wipes the per-GPU groups of"
                        " the policy (" +
                        check.policy_source +
                        "); set NVreg_ModifyDeviceFiles=0 (gpuinit ships"
                        " /usr/lib/modprobe.d/gpu-restriction.conf) and reload the driver",
                    true);
    }
    dangers.report(diagnostics);
    return check;
}

} // namespace gpuinit
