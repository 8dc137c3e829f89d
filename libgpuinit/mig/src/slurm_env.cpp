#include "gpuinit/mig/slurm_env.hpp"

#include "gpuinit/base/text.hpp"

#include <optional>

namespace gpuinit {

namespace {

Result<std::string> cuda_id(const GresConfRecord& record, const std::string& where,
                            const Machine& machine, const std::vector<MigInstance>& instances) {
    std::optional<unsigned> gpu_minor;
    std::vector<unsigned> caps;
    for (const std::string& file : record.files) {
        if (auto cap = device_path_number(file, "/dev/nvidia-caps/nvidia-cap")) {
            caps.push_back(*cap);
        } else if (auto minor = device_path_number(file, "/dev/nvidia"); minor && !gpu_minor) {
            gpu_minor = minor;
        } else {
            return error(where + ": " + quote(file) +
                         " is neither a GPU (/dev/nvidiaN) nor a MIG cap node: gpu-mig env "
                         "cannot name this device");
        }
    }
    if (!gpu_minor) {
        return error(where + ": no /dev/nvidiaN among its files: gpu-mig env cannot tell the GPU");
    }
    if (caps.empty()) {
        for (const Gpu& gpu : machine.gpus) {
            if (gpu.minor == *gpu_minor) {
                if (gpu.uuid.empty()) {
                    return error(where + ": " + gpu.subject() +
                                 " has no UUID in the driver's information file");
                }
                return gpu.uuid;
            }
        }
        return error(format("%s: /dev/nvidia%u is no GPU the driver lists (nvidia-smi's index "
                            "is not the minor): rewrite gres.conf with gpu-mig gres",
                            where.c_str(), *gpu_minor));
    }
    for (const MigInstance& instance : instances) {
        if (instance.gpu_minor != *gpu_minor) {
            continue;
        }
        bool gi_listed = false;
        bool ci_listed = false;
        for (unsigned cap : caps) {
            gi_listed = gi_listed || cap == instance.gi_cap_minor;
            ci_listed = ci_listed || cap == instance.ci_cap_minor;
        }
        if (!gi_listed || !ci_listed) {
            continue;
        }
        if (instance.uuid.empty()) {
            return error(where + ": MIG " + instance.key() +
                         " has no known MIG UUID: run 'gpu-mig sync' as root after every "
                         "nvidia-smi mig change");
        }
        return instance.uuid;
    }
    return error(where +
                 ": no MIG instance has these GI and CI cap nodes now: the instances changed; "
                 "rerun gpu-mig sync and gpu-mig gres (gres --check says what differs)");
}

} // namespace

Result<std::vector<std::string>> cuda_ids_for_slurm(const SlurmGpuAllocation& allocation,
                                                    const std::vector<GresConfRecord>& records,
                                                    std::string_view conf_source,
                                                    const Machine& machine,
                                                    const std::vector<MigInstance>& instances) {
    std::vector<std::string> ids;
    for (std::string_view piece : split_fields(allocation.indices, ',')) {
        auto index = parse_decimal(piece, 1u << 20);
        if (!index) {
            return error(allocation.variable + "=" + quote(allocation.indices, 80) +
                         ": expected device indices like 0,3");
        }
        if (*index >= records.size()) {
            return error(format("%s names device %llu, but %s has %zu Name=gpu devices for this "
                                "node: is it the gres.conf slurmd read?",
                                allocation.variable.c_str(),
                                static_cast<unsigned long long>(*index),
                                std::string(conf_source).c_str(), records.size()));
        }
        const GresConfRecord& record = records[*index];
        std::string where = std::string(conf_source) + ":" + std::to_string(record.line) + " (" +
                            allocation.variable + " device " + std::to_string(*index) + ")";
        auto id = cuda_id(record, where, machine, instances);
        if (!id) {
            return id.error();
        }
        ids.push_back(std::move(*id));
    }
    return ids;
}

} // namespace gpuinit
