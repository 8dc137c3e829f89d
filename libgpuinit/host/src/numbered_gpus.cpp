#include "gpuinit/host/numbered_gpus.hpp"

#include <algorithm>
#include <string_view>
#include <utility>

namespace gpuinit {

Result<NumberedGpus> read_numbered_gpus(const Sysroot& root) {
    Diagnostics diagnostics;
    auto machine = read_driver_gpus(root, diagnostics);
    if (!machine) {
        return machine.error();
    }
    for (const UnusableGpu& gpu : machine->unusable) {
        if (gpu.severity == Severity::Error) {
            return error("cannot number the host's GPUs: " + gpu.bdf + ": " + gpu.reason +
                         "; fix the driver's entry or name GPUs the host has");
        }
    }
    NumberedGpus numbered;
    numbered.listed = machine->minors_from_driver;
    numbered.gpus = std::move(machine->gpus);
    // Canonical addresses are fixed-width lowercase hex but for a domain of
    // five digits, which comes after every four-digit one.
    std::sort(numbered.gpus.begin(), numbered.gpus.end(), [](const Gpu& a, const Gpu& b) {
        return std::pair(a.bdf.size(), std::string_view(a.bdf)) <
               std::pair(b.bdf.size(), std::string_view(b.bdf));
    });
    return numbered;
}

} // namespace gpuinit
