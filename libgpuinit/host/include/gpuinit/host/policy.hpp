// The access policy: which group, mode and owner each GPU node and each
// control node gets. Source: <root>/etc/gpu-restriction.conf (see
// gpu-restriction.conf(5)); without that file the classic scheme applies.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/gpu_selector.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

inline constexpr std::string_view kPolicyPath = "etc/gpu-restriction.conf";
inline constexpr unsigned kDefaultGpuMode = 0660;
inline constexpr unsigned kDefaultControlMode = 0666;
// A MIG rule's default: cap nodes are opened read-only.
inline constexpr unsigned kDefaultMigMode = 0440;
inline constexpr size_t kMaxPolicyBytes = 1u << 20;
// The line "mig-leases-per-user=N": how many MIG instances one user may
// hold through gpu-mig's leases at once. The default is one: a CUDA process
// uses one MIG instance, so one lease is what a job needs, and a user
// cannot hold the instances other users' jobs are waiting for. Sites whose
// users run several jobs on a node raise it.
inline constexpr std::string_view kMigLeasesKey = "mig-leases-per-user";
inline constexpr unsigned kDefaultMigLeasesPerUser = 1;
inline constexpr unsigned kMaxMigLeasesPerUser = 4096;

// The control nodes that can carry a rule of their own.
inline constexpr std::string_view kControlNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                                     "nvidia-modeset"};

struct AccessRule {
    std::string owner = "root";
    std::string group;
    unsigned mode = 0;
    std::string origin; // "/etc/gpu-restriction.conf:4" or "built-in default"
};

class Policy {
  public:
    // What a rule is about: the first key of every line names it.
    enum class Subject { Gpu, AnyGpu, Control, AnyControl };
    struct Entry {
        Subject subject = Subject::AnyGpu;
        std::optional<GpuSelector> gpu; // with Subject::Gpu
        std::string control;            // with Subject::Control
        // A MIG rule (gpu=... gi=G [ci=C]): the cap nodes of that GPU
        // instance (and of all its compute instances, unless ci= names one),
        // not /dev/nvidiaN.
        std::optional<unsigned> gi;
        std::optional<unsigned> ci;
        AccessRule rule;
        size_t line = 0;
    };

    // The classic scheme: nvidiaN root:nvidiaN 0660, control nodes root:root 0666.
    static Policy classic();
    static Result<Policy> parse(std::string_view text, std::string_view source);
    // The classic scheme when the file does not exist; its parse otherwise.
    static Result<Policy> load(const Sysroot& root);
    // A candidate file at `path` (gpu-mknod --policy), outside the root: it
    // must exist and be a regular file; messages name it as given.
    static Result<Policy> load_file(const std::string& path);

    bool from_file() const { return from_file_; }
    // mig-leases-per-user=, else kDefaultMigLeasesPerUser.
    unsigned mig_leases_per_user() const {
        return mig_leases_per_user_.value_or(kDefaultMigLeasesPerUser);
    }
    // "/etc/gpu-restriction.conf:3", or "the default" without the line.
    std::string mig_leases_origin() const {
        return mig_leases_per_user_ ? source_ + ":" + std::to_string(mig_leases_line_)
                                    : std::string("the default");
    }
    const std::string& source() const { return source_; }

    // Most specific rule first: UUID, PCI address, minor, gpu=*, default.
    AccessRule rule_for_gpu(const GpuIdentity& gpu) const;
    AccessRule rule_for_control(std::string_view node) const;
    // The most specific MIG rule for the cap of GPU instance `gi` (with
    // `ci`: of that compute instance): GPU specificity first, then a ci=
    // rule over a gi-only one. None: the node keeps the driver's mode.
    std::optional<AccessRule> rule_for_mig(const GpuIdentity& gpu, unsigned gi,
                                           std::optional<unsigned> ci) const;
    // A warning for every rule that names a GPU not among `present` (a
    // typo, or a GPU that went away).
    void report_unmatched(const std::vector<GpuIdentity>& present, Diagnostics& diagnostics) const;
    // A warning for every MIG rule (gi=) whose GPUs, among `present`, have
    // no MIG instance (`with_instances` holds the minors that have one):
    // MIG is off there, or no instance was made yet, so the rule gives no
    // node anything.
    void report_mig_without_instances(const std::vector<GpuIdentity>& present,
                                      const std::vector<unsigned>& with_instances,
                                      Diagnostics& diagnostics) const;

  private:
    std::vector<Entry> entries_;
    std::string source_ = "built-in default";
    bool from_file_ = false;
    std::optional<unsigned> mig_leases_per_user_;
    size_t mig_leases_line_ = 0;
};

} // namespace gpuinit
