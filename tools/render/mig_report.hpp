// gpu-mig's output: instance ids for CUDA_VISIBLE_DEVICES, the instance
// table of `list`, and what `sync` did, for people and for scripts.
#pragma once

#include "common/report.hpp"
#include "gpuinit/mig/apply_run.hpp"
#include "gpuinit/mig/gres.hpp"
#include "gpuinit/mig/leases.hpp"
#include "gpuinit/mig/pick.hpp"
#include "gpuinit/mig/sync.hpp"
#include "render/mknod_report.hpp"

#include <string>
#include <vector>

namespace gpuinit::tools {

// "MIG-a,MIG-b" (uuid) or "gpu1/gi7/ci0,gpu2/gi7/ci0" (key).
std::string mig_ids(const std::vector<MigInstance>& instances, bool uuid);

Rendered render_mig_list_text(const InstanceUses& uses, const Diagnostics& diagnostics,
                              int verbosity);
std::string render_mig_list_json(const InstanceUses& uses, const Diagnostics& diagnostics,
                                 int exit_code);

// release: the instance and who held its lease.
Rendered render_mig_release_text(const LeaseRelease& release, int verbosity);
std::string render_mig_release_json(const LeaseRelease& release, const Diagnostics& diagnostics,
                                    int exit_code);

// What sync did after the cap nodes (those are gpu-mknod's report).
struct MigSyncReport {
    const LeaseSync& leases;
    std::string lease_dir;
    const std::vector<MigInstance>& instances; // with the names the file got
    std::string names_source;                  // "" when none answered
};

Rendered render_mig_sync_text(const MigSyncReport& report, const Diagnostics& diagnostics,
                              int verbosity);
std::string render_mig_sync_json(const MigSyncReport& report, const MknodOutcome& nodes,
                                 const MknodReportContext& nodes_context,
                                 const Diagnostics& diagnostics, int exit_code);

// sync's whole outcome (the cap nodes, then the leases and names), as
// `gpu-mig sync` and `gpu-mig apply` print it.
Rendered render_sync_outcome_text(const mig::SyncOutcome& outcome,
                                  const MknodReportContext& context, int verbosity);
void write_sync_outcome_json(JsonWriter& json, const mig::SyncOutcome& outcome,
                             const MknodReportContext& context);

// apply: one line per GPU the layout names (with --dry-run and -v its
// steps), then what sync did.
Rendered render_mig_apply_text(const mig::ApplyReport& report, const MknodReportContext& context,
                               bool dry_run, int verbosity);
std::string render_mig_apply_json(const mig::ApplyReport& report, const MknodReportContext& context,
                                  int exit_code);

// gres: gres.conf (with the slurm.conf fragment as its last comment), or
// the findings of --check.
std::string render_gres_json(const GresPlan& plan, std::string_view node,
                             const Diagnostics& diagnostics, int exit_code);
Rendered render_gres_check_text(const std::vector<GresFinding>& findings, const std::string& file,
                                const Diagnostics& diagnostics, int verbosity);
std::string render_gres_check_json(const std::vector<GresFinding>& findings,
                                   const std::string& file, const Diagnostics& diagnostics,
                                   int exit_code);

// env: the TaskProlog's line, or JSON.
std::string render_env_json(const std::string& variable, const std::string& indices,
                            const std::vector<std::string>& ids, const Diagnostics& diagnostics,
                            int exit_code);

} // namespace gpuinit::tools
