#include "gpuinit/mig/sync.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/devnodes/node_plan.hpp"
#include "gpuinit/mig/names_file.hpp"

#include <cerrno>
#include <fcntl.h>
#include <map>
#include <sys/stat.h>

namespace gpuinit {

namespace {

// Each CI cap node's planned group and mode, by its minor: what the lease of
// that instance lets through.
std::map<unsigned, LeaseAccess> lease_access(const MknodOutcome& nodes) {
    std::map<unsigned, LeaseAccess> access;
    if (!nodes.machine.caps_major) {
        return access;
    }
    for (const NodeSpec& node : nodes.plan.nodes) {
        if (node.major == *nodes.machine.caps_major) {
            access[node.minor] = LeaseAccess{node.gid, node.mode, node.group};
        }
    }
    return access;
}

} // namespace

Result<MigView> read_mig_view(const Sysroot& root, Diagnostics& diagnostics,
                              std::optional<Machine> known) {
    MigView view;
    if (known) {
        view.machine = std::move(*known);
    } else {
        auto machine = discover_machine(root, diagnostics, PciNeed{PciNeed::Scope::None, {}});
        if (!machine) {
            return machine.error();
        }
        auto topology = read_mig_topology(root, diagnostics);
        if (!topology) {
            return topology.error();
        }
        view.machine = std::move(*machine);
        view.machine.mig = std::move(*topology);
    }
    view.instances = join_mig_instances(view.machine, view.machine.mig, diagnostics);
    return view;
}

Status name_mig_view(const Sysroot& root, const MigNamesRequest& request, MigView& view,
                     Diagnostics& diagnostics) {
    auto source = name_mig_instances(root, request, view.instances, diagnostics);
    if (!source) {
        return source.error();
    }
    view.names_source = std::move(*source);
    return {};
}

Result<std::string> read_named_file(const std::string& path, size_t limit) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd.valid()) {
        return errno_error("cannot open " + path);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        return errno_error("cannot stat " + path);
    }
    if (!S_ISREG(st.st_mode)) {
        return error(path + " is not a regular file", EINVAL);
    }
    return read_all(fd.get(), limit, path);
}

namespace mig {

SyncOutcome sync(const Sysroot& root, const SyncOptions& options) {
    SyncOutcome outcome;
    outcome.lease_dir = root.display(kMigLeaseDir);
    MknodOptions mknod;
    mknod.request.scope = PlanRequest::Scope::Mig;
    outcome.nodes = run_mknod(root, mknod);
    if (outcome.nodes.status == MknodStatus::NothingDone) {
        outcome.status = SyncOutcome::Status::NothingDone;
        return outcome;
    }
    auto view = read_mig_view(root, outcome.diagnostics, outcome.nodes.machine);
    if (!view) {
        outcome.status = SyncOutcome::Status::Failed;
        outcome.failure = view.error();
        return outcome;
    }
    outcome.view = std::move(*view);
    // An incomplete instance list must not cost a live instance its lease.
    bool complete = !outcome.diagnostics.has_errors() && outcome.nodes.status == MknodStatus::Done;
    auto leases = sync_leases(root, outcome.view.instances, lease_access(outcome.nodes), complete,
                              outcome.diagnostics);
    if (!leases) {
        outcome.status = SyncOutcome::Status::Failed;
        outcome.failure = leases.error();
        return outcome;
    }
    outcome.leases = std::move(*leases);
    if (!complete) {
        outcome.diagnostics.warning(
            "some instances could not be read: leases of instances that seem gone were kept; fix "
            "the errors above and rerun gpu-mig sync");
    }
    if (auto named = name_mig_view(root, {options.smi_output, MigNamesFirst::Driver}, outcome.view,
                                   outcome.diagnostics);
        !named) {
        outcome.diagnostics.add(named.error());
    }
    std::string source =
        outcome.view.names_source.empty() ? "no source" : outcome.view.names_source;
    if (auto written =
            write_mig_names_file(root, render_mig_names_file(outcome.view.instances, source));
        !written) {
        outcome.diagnostics.add(written.error());
    }
    bool partial = outcome.diagnostics.has_errors() || outcome.nodes.status != MknodStatus::Done;
    outcome.status = partial ? SyncOutcome::Status::Partial : SyncOutcome::Status::Done;
    return outcome;
}

} // namespace mig

} // namespace gpuinit
