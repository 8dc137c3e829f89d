// gpu-mig apply's MigControl over NVML, the driver's libnvidia-ml.so.1,
// loaded at run time in the dynamic build (gpuinit/nvml/library.hpp): it
// reads every GPU's MIG mode, instances, placements and processes, and
// creates and destroys GPU and compute instances with NVML's own calls, so
// no output is parsed. The static build cannot load NVML and uses
// nvidia-smi (apply_smi.hpp).
//
// NVML names profiles by index (NVML_GPU_INSTANCE_PROFILE_*), never as
// nvidia-smi prints them; the names here are derived from each profile's
// slices and memory as NVIDIA's go-nvlib does (pkg/nvlib/device/
// mig_profile.go: NewMigProfile, String, getMigMemorySizeGB), which is what
// nvidia-mig-parted's configs and nvidia-smi mig -lgip use: "1g.10gb",
// "1g.10gb+me", "1c.3g.40gb".
#pragma once

#include "gpuinit/mig/apply.hpp"
#include "gpuinit/mig/nvml.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace gpuinit::mig {

// A MIG profile's memory in GB as its name gives it: its share of the
// GPU's memory rounded up to eighths, times the GPU's memory in whole GiB
// (rounded up), rounded. 0 when the GPU's memory is 0.
unsigned mig_memory_gb(uint64_t device_bytes, uint64_t profile_mb);

// The name of the GPU-instance profile with NVML index `profile` (one of
// NVML_GPU_INSTANCE_PROFILE_*, including those newer than the nvml.h built
// against), `profile_mb` its memorySizeMB: "1g.10gb", "1g.10gb+me",
// "1g.10gb-me", "2g.20gb+gfx", "1g.20gb+me.all"; nullopt for an index
// NVIDIA's naming does not cover.
std::optional<std::string> nvml_gi_profile_name(unsigned profile, uint64_t profile_mb,
                                                uint64_t device_bytes);
// The name of compute-instance profile index `ci_profile` (one of
// NVML_COMPUTE_INSTANCE_PROFILE_*) in a GI named `gi_name` of `gi_slices`
// compute slices: "1c.3g.40gb", or the GI's own name for a CI of the whole
// GI; nullopt for an unknown index or one larger than the GI.
std::optional<std::string> nvml_ci_profile_name(unsigned ci_profile, const std::string& gi_name,
                                                unsigned gi_slices);
// The compute slices of GPU-instance profile index `profile`; 0 when unknown.
unsigned nvml_gi_profile_slices(unsigned profile);

// Loads `library` and initializes NVML; the control keeps it loaded until
// it is destroyed. Warnings while reading the GPUs (a GPU NVML cannot read)
// go to `diagnostics`, which must outlive the control. NVML has no public
// GPU reset: reset() goes through `reset_through` (nvidia-smi's control)
// when given, else fails, saying so; a mode change that NVML activated at
// once needs no reset, and reset() then does nothing. Fails with ENOTSUP
// in the static build, which loads no NVML (nvidia-smi is used instead),
// and when the library cannot be loaded or lacks a function it needs.
Result<std::unique_ptr<MigControl>> open_nvml_mig_control(Diagnostics& diagnostics,
                                                          const std::string& library = kNvmlLibrary,
                                                          MigControl* reset_through = nullptr);

} // namespace gpuinit::mig
