// <root>/run/gpuinit/gpus remembers which PCI address had which minor, so a
// udev "remove" event, which names only the PCI address of a GPU that the
// driver no longer lists, can still find the node to delete.
#pragma once

#include "gpuinit/fs/run_dir.hpp"
#include "gpuinit/host/machine.hpp"

#include <optional>
#include <string>

namespace gpuinit {

// Rewrites the record (atomically, only when it changes) with the machine's
// current GPUs plus the earlier records of GPUs that are absent now, so a
// later `--remove --device BDF` still finds them. An earlier record is
// dropped when a present GPU holds its minor or its address, or when its
// minor is `forget_minor` (the GPU whose nodes --remove just deleted).
Status save_gpu_records(const RunDir& run, const Machine& machine,
                        std::optional<unsigned> forget_minor = std::nullopt);
// The minor last recorded for the GPU `selector` names (by PCI address or
// UUID); nullopt when unknown.
Result<std::optional<unsigned>> recorded_minor(const RunDir& run, const GpuSelector& selector);

} // namespace gpuinit
