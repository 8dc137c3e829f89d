// The host's GPUs in nvidia-smi's numbering, for what names GPUs by index
// (NVIDIA_VISIBLE_DEVICES=1 in a container's config).
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/machine.hpp"

#include <vector>

namespace gpuinit {

// The driver's GPUs (read_driver_gpus) in PCI bus order, the order NVML and
// nvidia-smi number them in. A broken entry (an error there: unreadable, no
// minor, a minor or UUID listed twice) fails the whole read: left out, it
// would shift every index after it. An excluded GPU is left out, as NVML
// leaves it out. `listed` is false when the driver's list is absent (the
// driver is not loaded).
struct NumberedGpus {
    bool listed = false;
    std::vector<Gpu> gpus;
};
Result<NumberedGpus> read_numbered_gpus(const Sysroot& root);

} // namespace gpuinit
