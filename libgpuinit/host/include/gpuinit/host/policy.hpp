// The access policy: which group, mode and owner each GPU node and each
// control node gets. Source: <root>/etc/gpu-restriction.conf (see
// gpu-restriction.conf(5)); without that file the classic scheme applies.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

inline constexpr std::string_view kPolicyPath = "etc/gpu-restriction.conf";
inline constexpr unsigned kDefaultGpuMode = 0660;
inline constexpr unsigned kDefaultControlMode = 0666;

// The control nodes that can carry a rule of their own.
inline constexpr std::string_view kControlNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                                     "nvidia-modeset"};

struct AccessRule {
    std::string owner = "root";
    std::string group;
    unsigned mode = 0;
    std::string origin; // "gpu-restriction.conf:4" or "built-in default"
};

// What identifies a GPU to the policy.
struct GpuIdentity {
    unsigned minor = 0;
    std::string bdf;  // canonical
    std::string uuid; // may be empty
};

class Policy {
  public:
    enum class Selector { Minor, Bdf, Uuid, AnyGpu, Control, AnyControl };
    struct Entry {
        Selector selector;
        std::string key; // the bdf, UUID or control node name, canonical
        unsigned minor = 0;
        AccessRule rule;
        size_t line = 0;
    };

    // The classic scheme: nvidiaN root:nvidiaN 0660, control nodes root:root 0666.
    static Policy classic();
    static Result<Policy> parse(std::string_view text, std::string_view source);
    // The classic scheme when the file does not exist; its parse otherwise.
    static Result<Policy> load(const Sysroot& root);

    bool from_file() const { return from_file_; }
    const std::string& source() const { return source_; }
    const std::vector<Entry>& entries() const { return entries_; }

    // Most specific rule first: UUID, PCI address, minor, gpu=*, default.
    AccessRule rule_for_gpu(const GpuIdentity& gpu) const;
    AccessRule rule_for_control(std::string_view node) const;
    // Rules naming a GPU that is not among `present` (likely a typo, or a
    // GPU that went away): "gpu-restriction.conf:7: gpu=3 matches no GPU".
    std::vector<std::string> unmatched(const std::vector<GpuIdentity>& present) const;

  private:
    std::vector<Entry> entries_;
    std::string source_ = "built-in default";
    bool from_file_ = false;
};

} // namespace gpuinit
