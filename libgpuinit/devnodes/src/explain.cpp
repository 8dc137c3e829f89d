#include "gpuinit/devnodes/explain.hpp"

#include "gpuinit/devnodes/node_plan.hpp"

namespace gpuinit {

namespace {

constexpr std::string_view kDefaultOrigin = "built-in default";
constexpr std::string_view kDriverOrigin = "the driver's mode";

std::string decided_by(const std::string& origin) {
    if (origin == kDefaultOrigin) {
        return "default";
    }
    if (origin == kDriverOrigin) {
        return "driver";
    }
    return origin;
}

std::string now_of(const ReconcileResult& result, const std::string& name) {
    for (const Change& change : result.changes) {
        if (change.target != Change::Target::Node || change.name != name) {
            continue;
        }
        if (change.kind == Change::Kind::Unchanged) {
            return {};
        }
        std::string verb = change.kind == Change::Kind::Failed
                               ? "cannot tell"
                               : std::string("would ") + change_kind_name(change.kind);
        return change.detail.empty() ? verb : verb + ": " + change.detail;
    }
    return {};
}

} // namespace

std::string access_of(unsigned mode_bits) {
    bool read = (mode_bits & 4) != 0;
    bool write = (mode_bits & 2) != 0;
    return read && write ? "rw" : read ? "r" : write ? "w" : "-";
}

std::optional<unsigned> explain_gpu(MknodOutcome& outcome, const GpuSelector& gpu) {
    for (const Gpu& known : outcome.machine.gpus) {
        if (gpu.matches(known.identity())) {
            return known.minor;
        }
    }
    Diagnostic unknown = error("no NVIDIA GPU " + gpu.text() +
                               " that the driver lists (check /proc/driver/nvidia/gpus)");
    unknown.where.device = gpu.text();
    outcome.diagnostics.add(std::move(unknown));
    outcome.status = MknodStatus::NothingDone;
    return std::nullopt;
}

std::vector<NodeExplanation> explain_nodes(const MknodOutcome& outcome,
                                           std::optional<unsigned> gpu) {
    std::vector<NodeExplanation> explained;
    if (outcome.status == MknodStatus::NothingDone) {
        return explained;
    }
    for (const NodeSpec& node : outcome.plan.nodes) {
        if (gpu && node.gpu_minor && *node.gpu_minor != *gpu) {
            continue;
        }
        NodeExplanation entry;
        entry.path = "/dev/" + node.name;
        entry.subject = node.subject;
        entry.owner = node.owner;
        entry.group = node.group;
        entry.uid = node.uid;
        entry.gid = node.gid;
        entry.mode = node.mode;
        entry.owner_access = access_of(node.mode >> 6);
        entry.group_access = access_of(node.mode >> 3);
        entry.other_access = access_of(node.mode);
        entry.decided_by = decided_by(node.origin);
        entry.root_only = node.unresolved;
        entry.now = now_of(outcome.result, node.name);
        explained.push_back(std::move(entry));
    }
    return explained;
}

} // namespace gpuinit
