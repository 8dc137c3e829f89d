// <root>/run/gpuinit/gpus remembers which PCI address had which minor, so a
// udev "remove" event, which names only the PCI address of a GPU that the
// driver no longer lists, can still find the node to delete.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/machine.hpp"

#include <optional>
#include <string>

namespace gpuinit {

// Rewrites the record (atomic rename) with the machine's current GPUs plus
// the earlier records of GPUs that are absent now, so a later
// `--remove --device BDF` still finds them. An earlier record is dropped when
// a present GPU holds its minor or its address, or when its minor is
// `forget_minor` (the GPU whose nodes --remove just deleted).
Status save_gpu_records(const Sysroot& root, const Machine& machine,
                        std::optional<unsigned> forget_minor = std::nullopt);
// The minor last recorded for `bdf` (canonical); nullopt when unknown.
std::optional<unsigned> recorded_minor(const Sysroot& root, const std::string& bdf);

} // namespace gpuinit
