// MIG instances as jobs use them: one per compute instance, joined with its
// GPU (minor, PCI address, UUID, model) and the cap minors a process must
// open (its GI's and its CI's). Profile names and MIG UUIDs are not in
// /proc: they come from NVML or nvidia-smi output when given, else stay
// empty (unknown), never invented.
#pragma once

#include "gpuinit/base/diag.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/host/mig_topology.hpp"

#include <string>
#include <vector>

namespace gpuinit {

struct MigInstance {
    unsigned gpu_minor = 0;
    std::string gpu_bdf;
    std::string gpu_uuid;
    std::string gpu_model;
    unsigned gi = 0;
    unsigned ci = 0;
    unsigned gi_cap_minor = 0;
    unsigned ci_cap_minor = 0;
    std::string profile; // "1g.10gb", "1c.3g.40gb"; empty: unknown
    std::string uuid;    // "MIG-<uuid>"; empty: unknown

    // "gpu1/gi7/ci0"
    std::string key() const;
};

// Every compute instance of the topology whose GPU the driver lists, sorted
// by GPU minor, GI and CI. A CI on a GPU minor the driver does not list, or
// whose GI has no access file, is an error in `diagnostics` and left out.
std::vector<MigInstance> join_mig_instances(const Machine& machine, const MigTopology& topology,
                                            Diagnostics& diagnostics);

} // namespace gpuinit
