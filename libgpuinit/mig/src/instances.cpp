#include "gpuinit/mig/instances.hpp"

#include "gpuinit/base/text.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace gpuinit {

std::string MigInstance::key() const {
    return format("gpu%u/gi%u/ci%u", gpu_minor, gi, ci);
}

std::vector<MigInstance> join_mig_instances(const Machine& machine, const MigTopology& topology,
                                            Diagnostics& diagnostics) {
    std::map<unsigned, const Gpu*> gpus;
    for (const Gpu& gpu : machine.gpus) {
        gpus.emplace(gpu.minor, &gpu);
    }
    std::map<std::pair<unsigned, unsigned>, unsigned> gi_minors;
    for (const MigCap& cap : topology.caps) {
        if (cap.kind == MigCap::Kind::GpuInstance) {
            gi_minors.emplace(std::pair{cap.gpu_minor, cap.gi}, cap.minor);
        }
    }
    std::vector<MigInstance> instances;
    for (const MigCap& cap : topology.caps) {
        if (cap.kind != MigCap::Kind::ComputeInstance) {
            continue;
        }
        auto gpu = gpus.find(cap.gpu_minor);
        if (gpu == gpus.end()) {
            diagnostics.error(cap.subject() + format(": the driver lists no GPU with minor %u; "
                                                     "instance left out",
                                                     cap.gpu_minor),
                              Location::in_file(cap.access));
            continue;
        }
        auto gi = gi_minors.find({cap.gpu_minor, cap.gi});
        if (gi == gi_minors.end()) {
            diagnostics.error(cap.subject() + ": its GPU instance has no usable access file; "
                                              "instance left out",
                              Location::in_file(cap.access));
            continue;
        }
        MigInstance instance;
        instance.gpu_minor = cap.gpu_minor;
        instance.gpu_bdf = gpu->second->bdf;
        instance.gpu_uuid = gpu->second->uuid;
        instance.gpu_model = gpu->second->model;
        instance.gi = cap.gi;
        instance.ci = cap.ci;
        instance.gi_cap_minor = gi->second;
        instance.ci_cap_minor = cap.minor;
        instances.push_back(std::move(instance));
    }
    std::sort(instances.begin(), instances.end(), [](const MigInstance& a, const MigInstance& b) {
        return std::tie(a.gpu_minor, a.gi, a.ci) < std::tie(b.gpu_minor, b.gi, b.ci);
    });
    return instances;
}

} // namespace gpuinit
