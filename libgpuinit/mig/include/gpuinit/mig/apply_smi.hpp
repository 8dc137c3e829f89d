// gpu-mig apply's MigControl over nvidia-smi, for machines where NVML cannot
// be loaded. Each change is one run of the program (never through a shell),
// with a timeout and an output bound, and the ids a create prints are read
// back: the driver chooses GI and CI ids (an H100's first 1g.10gb is GI 9,
// not 1), so none is predicted.
//
// nvidia-smi names GPUs by its own index, which need not be the device
// minor. gpus() learns each GPU's index from the order of `nvidia-smi -q -x`
// (or the control is given the GPUs in that order), and the later calls
// match a GpuIdentity to its index by UUID, else by PCI address.
//
// gpus() reads each GPU's state from five commands, each run once for all
// GPUs: `-q -x` (UUID, minor, PCI address, name, MIG mode current and
// pending, processes), and, when any GPU has MIG on, `mig -lgi` (GIs and
// their profiles), `mig -lci` (CIs), `mig -lgip` (each GPU's GI profile
// names and ids) and `mig -lgipp` (each profile's placements, by id). They
// are joined by nvidia-smi's GPU index. A GPU whose MIG mode nvidia-smi
// gives as N/A has no MIG: it is reported with MIG off (as declared when
// the layout says mig=off; a layout that wants MIG on fails at the mode
// change, naming the GPU), not as a GPU whose mode is unknown.
#pragma once

#include "gpuinit/mig/apply.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace gpuinit::mig {

// A CI profile name ("1c.3g.40gb", or the GI's own "3g.40gb" for a CI of the
// whole GI) as nvidia-smi mig -cci takes it: nvml.h's
// NVML_COMPUTE_INSTANCE_PROFILE_<N>_SLICE (1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5,
// 6: 6). nullopt for a name that is not one.
std::optional<unsigned> ci_profile_id(std::string_view profile);

class SmiMigControl : public MigControl {
  public:
    // `program`: nvidia-smi's absolute path. gpus() learns the GPUs.
    explicit SmiMigControl(std::string program,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));
    // `gpus`: nvidia-smi's GPUs, index = position (as -L and -q -x list
    // them), for calls made without gpus() first.
    SmiMigControl(std::string program, std::vector<GpuIdentity> gpus,
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));

    // Every GPU nvidia-smi lists, in its index order, which the later calls
    // then use. Fails when a command fails (other than saying there is
    // nothing to list), its output does not parse, or the outputs disagree
    // (the state changed between two commands: run it again).
    Result<std::vector<MigGpuState>> gpus() override;
    Status destroy_ci(const GpuIdentity& gpu, unsigned gi, unsigned ci) override;
    Status destroy_gi(const GpuIdentity& gpu, unsigned gi) override;
    Status set_mig_mode(const GpuIdentity& gpu, bool on) override;
    Status reset(const GpuIdentity& gpu) override;
    Result<unsigned> create_gi(const GpuIdentity& gpu, std::string_view profile,
                               std::optional<unsigned> start) override;
    Result<unsigned> create_ci(const GpuIdentity& gpu, unsigned gi,
                               std::string_view profile) override;

  private:
    Result<unsigned> index_of(const GpuIdentity& gpu) const;
    // Runs nvidia-smi with `args` on the GPU; its output, or an error with
    // its first line when it exits with a status other than 0.
    Result<std::string> run(const GpuIdentity& gpu, std::vector<std::string> args) const;
    // Runs nvidia-smi with `args` for all GPUs. With `none_is_empty`, an
    // exit status other than 0 with nothing but nvidia-smi's "nothing to
    // list" lines ("No MIG-enabled devices found.") is empty output.
    Result<std::string> run_all(const std::vector<std::string>& args, bool none_is_empty) const;

    std::string program_;
    std::vector<GpuIdentity> gpus_;
    std::chrono::milliseconds timeout_;
};

} // namespace gpuinit::mig
