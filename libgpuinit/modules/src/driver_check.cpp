#include "gpuinit/modules/driver_check.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/accounts.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/host/policy.hpp"
#include "gpuinit/host/procfs.hpp"

#include <algorithm>
#include <optional>

namespace gpuinit {

namespace {

constexpr std::string_view kParamsPath = "proc/driver/nvidia/params";

struct GpuAccess {
    std::string who; // "GPU 0"
    AccessRule rule;
    std::optional<uid_t> uid;
    std::optional<gid_t> gid;
};

void add_once(std::vector<std::string>& list, std::string message) {
    if (std::find(list.begin(), list.end(), message) == list.end()) {
        list.push_back(std::move(message));
    }
}

// Does the driver's uid/gid/mode give anyone access the rule does not?
void check_widening(const DriverCheck& check, const GpuAccess& gpu,
                    std::vector<std::string>& dangers) {
    unsigned driver_mode = static_cast<unsigned>(check.mode) & 0777u;
    unsigned policy_mode = gpu.rule.mode;
    std::string driver_text = format("NVreg_DeviceFileMode=%s", format_mode(driver_mode).c_str());
    if ((driver_mode & 07u) & ~(policy_mode & 07u)) {
        add_once(dangers, driver_text +
                              " lets every user open the nodes nvidia-modprobe creates, but the"
                              " policy (" +
                              gpu.rule.origin + ") gives GPUs " + format_mode(policy_mode) +
                              "; set NVreg_DeviceFileMode=0660 or stricter and reload the driver");
    }
    bool group_bits = (driver_mode & 070u) != 0;
    bool owner_bits = (driver_mode & 0700u) != 0;
    // Fail closed: an id the policy names but this root cannot resolve (a
    // typo, or a directory group gpu-modload cannot see) may or may not be
    // the driver's.
    if (group_bits && check.gid != 0 && !gpu.gid) {
        add_once(dangers,
                 format("NVreg_DeviceFileGID=%llu with %s: the group %s that the policy (%s)"
                        " names cannot be resolved, so group %llu may get access the policy"
                        " denies; create the group (groupadd %s) or set NVreg_DeviceFileGID=0",
                        static_cast<unsigned long long>(check.gid), driver_text.c_str(),
                        gpu.rule.group.c_str(), gpu.rule.origin.c_str(),
                        static_cast<unsigned long long>(check.gid), gpu.rule.group.c_str()));
    }
    if (owner_bits && check.uid != 0 && !gpu.uid) {
        add_once(dangers,
                 format("NVreg_DeviceFileUID=%llu: the owner %s that the policy (%s) names"
                        " cannot be resolved, so user %llu may own nodes the policy gives to"
                        " another; create the user or set NVreg_DeviceFileUID=0",
                        static_cast<unsigned long long>(check.uid), gpu.rule.owner.c_str(),
                        gpu.rule.origin.c_str(), static_cast<unsigned long long>(check.uid)));
    }
    if (group_bits && check.gid != 0 && gpu.gid && check.gid != *gpu.gid) {
        add_once(dangers, format("NVreg_DeviceFileGID=%llu with %s gives group %llu access to %s,"
                                 " which the policy (%s) gives to group %s; set"
                                 " NVreg_DeviceFileGID=0",
                                 static_cast<unsigned long long>(check.gid), driver_text.c_str(),
                                 static_cast<unsigned long long>(check.gid), gpu.who.c_str(),
                                 gpu.rule.origin.c_str(), gpu.rule.group.c_str()));
    } else if (gpu.gid && check.gid == *gpu.gid && ((driver_mode & 070u) & ~(policy_mode & 070u))) {
        add_once(dangers, driver_text + " gives group " + gpu.rule.group + " more than the " +
                              format_mode(policy_mode) + " of the policy (" + gpu.rule.origin +
                              ")");
    }
    if (owner_bits && check.uid != 0 && gpu.uid && check.uid != *gpu.uid) {
        add_once(dangers, format("NVreg_DeviceFileUID=%llu owns the nodes nvidia-modprobe creates"
                                 " (%s), which the policy gives to %s; set NVreg_DeviceFileUID=0",
                                 static_cast<unsigned long long>(check.uid), gpu.who.c_str(),
                                 gpu.rule.owner.c_str()));
    }
}

} // namespace

Result<DriverCheck> check_driver(const Sysroot& root) {
    DriverCheck check;
    if (!root.exists(kParamsPath)) {
        return check;
    }
    check.driver_loaded = true;
    auto text = root.read_file(kParamsPath);
    if (!text) {
        return text.error();
    }
    auto params = parse_driver_params(*text, root.display(kParamsPath));
    if (!params) {
        return params.error();
    }
    // A parameter missing from params counts with the driver's default.
    auto param = [&](const char* name, uint64_t driver_default) {
        std::optional<uint64_t> value = params->number(name);
        if (!value) {
            check.not_in_params.emplace_back(name);
        }
        return value.value_or(driver_default);
    };
    check.uid = param("DeviceFileUID", 0);
    check.gid = param("DeviceFileGID", 0);
    check.mode = param("DeviceFileMode", 0666);
    check.modify_device_files = param("ModifyDeviceFiles", 1);

    auto policy = Policy::load(root);
    if (!policy) {
        return policy.error();
    }
    check.policy_source = policy->source();
    AccountDb accounts = AccountDb::load(root);
    std::vector<GpuAccess> gpus;
    if (auto machine = discover_machine(root); machine && !machine->gpus.empty()) {
        for (const Gpu& gpu : machine->gpus) {
            AccessRule rule = policy->rule_for_gpu({gpu.minor, gpu.bdf, gpu.uuid});
            gpus.push_back({format("GPU %u", gpu.minor), rule, accounts.user(rule.owner),
                            accounts.group(rule.group)});
        }
    } else {
        // No GPU visible: judge the rule the first GPU would get.
        AccessRule rule = policy->rule_for_gpu({0, "", ""});
        gpus.push_back({"GPU 0", rule, accounts.user(rule.owner), accounts.group(rule.group)});
    }

    // nvidia-modprobe resets every node to one uid/gid/mode. That undoes the
    // policy when it is the classic one group per GPU, when GPUs differ from
    // each other, or when a GPU's rule is not exactly the driver's.
    bool per_gpu_scheme = !policy->from_file();
    unsigned driver_mode = static_cast<unsigned>(check.mode) & 0777u;
    for (const GpuAccess& gpu : gpus) {
        const AccessRule& first = gpus.front().rule;
        per_gpu_scheme = per_gpu_scheme || gpu.rule.group != first.group ||
                         gpu.rule.owner != first.owner || gpu.rule.mode != first.mode ||
                         gpu.rule.mode != driver_mode || !gpu.gid || *gpu.gid != check.gid ||
                         !gpu.uid || *gpu.uid != check.uid;
        check_widening(check, gpu, check.dangers);
    }
    if (check.modify_device_files != 0 && per_gpu_scheme) {
        check.dangers.insert(
            check.dangers.begin(),
            "ModifyDeviceFiles is 1: every CUDA or NVML start runs nvidia-modprobe, which resets"
            " each /dev/nvidia* to DeviceFileUID/GID/Mode and wipes the per-GPU groups of the"
            " policy (" +
                check.policy_source +
                "); set NVreg_ModifyDeviceFiles=0 (gpuinit ships"
                " /usr/lib/modprobe.d/gpu-restriction.conf) and reload the driver");
    }
    return check;
}

} // namespace gpuinit
