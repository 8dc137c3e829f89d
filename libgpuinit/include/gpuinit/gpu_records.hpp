// <root>/run/gpuinit/gpus remembers which PCI address had which minor, so a
// udev "remove" event, which names only the PCI address of a GPU that the
// driver no longer lists, can still find the node to delete.
#pragma once

#include "gpuinit/machine.hpp"
#include "gpuinit/result.hpp"
#include "gpuinit/sysroot.hpp"

#include <optional>
#include <string>

namespace gpuinit {

// Rewrites the record from the machine's current GPUs (atomic rename).
Status save_gpu_records(const Sysroot& root, const Machine& machine);
// The minor last recorded for `bdf` (canonical); nullopt when unknown.
std::optional<unsigned> recorded_minor(const Sysroot& root, const std::string& bdf);

} // namespace gpuinit
