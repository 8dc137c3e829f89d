#include "gpuinit/mig/commands.hpp"

#include "gpuinit/base/text.hpp"

#include <utility>

namespace gpuinit::mig {

namespace {

Status name_view(const Sysroot& root, const std::string& smi_output, MigView& view,
                 Diagnostics& diagnostics) {
    return name_mig_view(root, {smi_output, MigNamesFirst::File}, view, diagnostics);
}

bool names_mig_uuid(const std::optional<std::string>& variable) {
    return variable && variable->find("MIG-") != std::string::npos;
}

// The gres.conf slurmd read: beside $SLURM_CONF, else Slurm's default, both
// under the root.
std::string default_gres_conf(const std::optional<std::string>& slurm_conf) {
    if (slurm_conf && slurm_conf->starts_with('/')) {
        return slurm_conf->substr(0, slurm_conf->rfind('/') + 1) + "gres.conf";
    }
    return "/etc/slurm/gres.conf";
}

} // namespace

Result<Pick> pick(const Sysroot& root, const PickCommand& command, Diagnostics& diagnostics) {
    auto view = read_mig_view(root, diagnostics);
    if (!view) {
        return view.error();
    }
    const PickRequest& request = command.request;
    if (request.need_uuid || !request.profile.empty() ||
        names_mig_uuid(request.cuda_visible_devices) ||
        names_mig_uuid(request.nvidia_visible_devices)) {
        if (auto named = name_view(root, command.smi_output, *view, diagnostics); !named) {
            return named.error();
        }
    }
    return pick_instances(root, view->machine, view->instances, request, diagnostics);
}

Result<InstanceUses> list(const Sysroot& root, const std::string& smi_output,
                          Diagnostics& diagnostics) {
    auto view = read_mig_view(root, diagnostics);
    if (!view) {
        return view.error();
    }
    if (auto named = name_view(root, smi_output, *view, diagnostics); !named) {
        return named.error();
    }
    return instance_uses(root, view->machine, view->instances, diagnostics);
}

Result<LeaseRelease> release(const Sysroot& root, std::string_view key, Diagnostics& diagnostics) {
    auto view = read_mig_view(root, diagnostics);
    if (!view) {
        return view.error();
    }
    return release_lease(root, view->instances, key);
}

Result<GresOutcome> gres(const Sysroot& root, const GresCommand& command,
                         Diagnostics& diagnostics) {
    auto view = read_mig_view(root, diagnostics);
    if (!view) {
        return view.error();
    }
    if (auto named = name_view(root, command.smi_output, *view, diagnostics); !named) {
        return named.error();
    }
    std::optional<GresTypeMap> type_map;
    if (!command.type_map.empty()) {
        auto text = read_named_file(command.type_map, kGresConfLimit);
        if (!text) {
            return text.error();
        }
        auto map = parse_gres_type_map(*text, command.type_map);
        if (!map) {
            return map.error();
        }
        type_map = std::move(*map);
    }
    auto plan =
        plan_gres(view->machine, view->instances, command.style, type_map ? &*type_map : nullptr);
    if (!plan) {
        return plan.error();
    }
    GresOutcome outcome{std::move(*plan), std::nullopt};
    if (!command.check.empty()) {
        auto text = read_named_file(command.check, kGresConfLimit);
        if (!text && command.check_if_exists && text.error().code == ENOENT) {
            outcome.check_skipped = true;
            return outcome;
        }
        if (!text) {
            return text.error();
        }
        auto findings =
            check_gres_conf(*text, command.check, outcome.plan, root, view->machine, command.node);
        if (!findings) {
            return findings.error();
        }
        outcome.findings = std::move(*findings);
    }
    return outcome;
}

Result<SlurmEnv> slurm_env(const Sysroot& root, const SlurmEnvCommand& command,
                           Diagnostics& diagnostics) {
    SlurmEnv env;
    if (command.step_gpus && !command.step_gpus->empty()) {
        env.allocation = {"SLURM_STEP_GPUS", *command.step_gpus};
    } else if (command.job_gpus && !command.job_gpus->empty()) {
        env.allocation = {"SLURM_JOB_GPUS", *command.job_gpus};
    } else {
        return env; // a job without GPUs: nothing to change
    }
    bool given = !command.gres_conf.empty();
    std::string conf = given ? command.gres_conf : default_gres_conf(command.slurm_conf);
    std::string shown = given ? conf : root.display(strip_slashes(conf));
    auto text = given ? read_named_file(conf, kGresConfLimit)
                      : root.read_file(strip_slashes(conf), kGresConfLimit);
    if (!text) {
        return text.error();
    }
    auto records = parse_gres_conf(*text, shown, command.node_name);
    if (!records) {
        return records.error();
    }
    auto view = read_mig_view(root, diagnostics);
    if (!view) {
        return view.error();
    }
    // Whole GPUs need no names: ask for them only when a MIG UUID is missing.
    auto found =
        cuda_ids_for_slurm(env.allocation, *records, shown, view->machine, view->instances);
    if (!found) {
        if (auto named = name_view(root, command.smi_output, *view, diagnostics); !named) {
            return named.error();
        }
        found = cuda_ids_for_slurm(env.allocation, *records, shown, view->machine, view->instances);
    }
    if (!found) {
        return found.error();
    }
    env.ids = std::move(*found);
    return env;
}

} // namespace gpuinit::mig
