// gpu-mknod's job as a library call: discover the machine, load the policy,
// plan the nodes and reconcile /dev, under the run lock. The tool only parses
// options and prints what this returns.
#pragma once

#include "gpuinit/devnodes/node_plan.hpp"
#include "gpuinit/devnodes/reconcile.hpp"
#include "gpuinit/host/machine.hpp"

#include <string>
#include <vector>

namespace gpuinit {

// Documented in gpu-mknod(8).
enum MknodExit : int {
    kExitOk = 0,
    kExitUsage = 1,
    kExitPartial = 2,
    kExitNothingDone = 3,
};

struct MknodOptions {
    std::string root = "/";
    bool dry_run = false;
    bool remove = false; // with Scope::Device: delete that GPU's nodes
    PlanRequest request;
};

struct MknodOutcome {
    int exit_code = kExitOk;
    std::string root_display; // "/" or the root directory
    std::string fatal;        // why nothing could be done
    Machine machine;
    NodePlan plan;
    ReconcileResult result;
    bool dry_run = false;
};

MknodOutcome run_mknod(const MknodOptions& options);

// Human-readable report. verbosity: -1 quiet (errors only), 0 changes and
// problems, 1 also unchanged nodes and the GPU table.
std::string render_text(const MknodOutcome& outcome, int verbosity);
std::string render_json(const MknodOutcome& outcome);

} // namespace gpuinit
