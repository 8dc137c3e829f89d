// How the admin names a GPU, everywhere (--device, gpu= in the policy,
// --remove): by minor, by PCI address or by UUID. Parsed once, here.
#pragma once

#include "gpuinit/base/result.hpp"

#include <string>
#include <string_view>

namespace gpuinit {

// What identifies a GPU: its minor, canonical PCI address and UUID (may be
// empty when the driver printed none).
struct GpuIdentity {
    unsigned minor = 0;
    std::string bdf;
    std::string uuid;
};

// "GPU-" and 1 to 60 hex digits and dashes, as the driver prints it.
bool valid_gpu_uuid(std::string_view text);
// UUIDs are compared without regard to case.
bool same_uuid(std::string_view a, std::string_view b);

class GpuSelector {
  public:
    enum class Kind { Minor, Bdf, Uuid };

    // A minor (0-253), a PCI address ([domain:]bus:dev.fn, hex) or a GPU UUID.
    static Result<GpuSelector> parse(std::string_view text);

    Kind kind() const { return kind_; }
    unsigned minor() const { return minor_; }
    // The canonical PCI address or the UUID as given; empty for a minor.
    const std::string& key() const { return key_; }

    bool matches(const GpuIdentity& gpu) const;
    // The same GPU by the same kind of name (UUIDs without regard to case).
    bool same_as(const GpuSelector& other) const;
    // Canonical text: "3", "0000:17:00.0", "GPU-...".
    std::string text() const;

  private:
    Kind kind_ = Kind::Minor;
    unsigned minor_ = 0;
    std::string key_;
};

} // namespace gpuinit
