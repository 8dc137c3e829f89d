// MIG names from NVML, the driver's libnvidia-ml.so.1, loaded at run time
// with dlopen in the dynamic build only: the library is never linked (the
// driver ships it; a machine without it still runs every tool), and the
// static build never references dlopen (glibc's static dlopen warns, and the
// static link treats warnings as errors).
#pragma once

#include "gpuinit/mig/names.hpp"
#include "gpuinit/nvml/api.hpp"

#include <string>

namespace gpuinit {

inline constexpr const char* kNvmlLibrary = nvml::kLibraryName;

// Whether this build can load NVML at all.
bool nvml_supported();

// Loads `library` (a file name the dynamic loader searches for, or a path),
// initializes NVML, and for every GPU with MIG on reads each MIG device's
// GI id, CI id, UUID and name (whose "MIG <profile>" ending is the
// profile), then shuts NVML down and unloads it. A GPU or device NVML
// cannot read is a warning and left out. Fails when the library cannot be
// loaded, lacks a needed symbol, or nvmlInit fails; in the static build it
// always fails, saying to use nvidia-smi output instead.
Result<MigNames> mig_names_from_nvml(Diagnostics& diagnostics,
                                     const std::string& library = kNvmlLibrary);

// The profile at the end of a MIG device's NVML name: "NVIDIA A100-SXM4-40GB
// MIG 1g.5gb" -> "1g.5gb"; "" when the name does not end so.
std::string profile_from_nvml_name(std::string_view name);

} // namespace gpuinit
