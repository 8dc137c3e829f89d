// The declared MIG layout, <root>/etc/gpu-mig-layout.conf (see
// gpu-mig-layout.conf(5)): per GPU, MIG off, or MIG on with its GPU
// instances, each with its compute instances. GPU and compute instances do
// not survive a reboot (MIG mode does); `gpu-mig apply` makes the machine
// match this file at boot, before the scheduler starts.
//
// A file of its own, not a section of gpu-restriction.conf: gpu-mknod reads
// the policy on every udev event and fails closed on a line it cannot
// parse, so a mistake in a layout (a profile this GPU lacks, a typo) would
// stop the device nodes of every GPU; the layout is read by one command at
// boot, whose failure leaves the nodes alone. A file that does not exist
// means no layout: the machine is left as it is.
//
// One line per GPU subject, whitespace-separated key=value words, '#'
// comments:
//   gpu=*|MINOR|PCI-ADDRESS|GPU-UUID   or   model=NAME
//   mig=off
//   mig=on [gi=PROFILE[*N][/CI[*M][,CI[*M]]...]]...
// e.g.
//   gpu=* mig=on gi=1g.10gb*7
//   gpu=0 mig=off
//   gpu=1 mig=on gi=3g.40gb/1c.3g.40gb*2
// A GI without "/..." gets one compute instance as large as itself (what
// `nvidia-smi mig -cgi P -C` makes).
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/gpu_selector.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit::mig {

inline constexpr std::string_view kLayoutPath = "etc/gpu-mig-layout.conf";
inline constexpr size_t kMaxLayoutBytes = 1u << 20;
// The driver's cap tables hold GI ids 0-14 and CI ids 0-7 (mig-minors):
// no GPU can have more, so a layout asking for more is a mistake.
inline constexpr unsigned kMaxLayoutGis = 15;
inline constexpr unsigned kMaxLayoutCis = 8;
inline constexpr size_t kMaxLayoutModel = 96;

struct LayoutGi {
    std::string profile;          // "3g.40gb"
    std::vector<std::string> cis; // one entry per compute instance: "1c.3g.40gb"
    friend bool operator==(const LayoutGi&, const LayoutGi&) = default;
};

// What one GPU should be.
struct GpuLayout {
    bool mig = false;
    std::vector<LayoutGi> gis; // with mig; sorted by profile, then CIs
    std::string origin;        // "/etc/gpu-mig-layout.conf:3"
    // The same layout, whatever its origin.
    bool same_as(const GpuLayout& other) const { return mig == other.mig && gis == other.gis; }
};

class MigLayout {
  public:
    // Most specific first: a GPU takes the layout of the first kind that
    // names it.
    enum class Subject { Uuid, Bdf, Minor, Model, AnyGpu };
    struct Entry {
        Subject subject = Subject::AnyGpu;
        std::optional<GpuSelector> gpu; // Uuid, Bdf, Minor
        std::string model;              // Model: as written ('_' for spaces)
        GpuLayout layout;
        size_t line = 0;
    };

    static Result<MigLayout> parse(std::string_view text, std::string_view source);
    // nullopt when the file does not exist: no layout declared.
    static Result<std::optional<MigLayout>> load(const Sysroot& root);

    const std::string& source() const { return source_; }
    const std::vector<Entry>& entries() const { return entries_; }

    // The layout for a GPU (its name as the driver gives it, "NVIDIA H100
    // 80GB HBM3"); nullptr when no line names it: it is left as it is.
    const GpuLayout* for_gpu(const GpuIdentity& gpu, std::string_view model) const;

    // The file's canonical text: one line per entry, counts folded.
    std::string render() const;

  private:
    std::string source_;
    std::vector<Entry> entries_;
};

// Whether the layout's model NAME (spaces written as '_') names the
// driver's `model`; without regard to case.
bool layout_model_matches(std::string_view name, std::string_view model);

// The GPU-instance profile a compute-instance profile belongs in: "1c.3g.40gb"
// -> "3g.40gb"; a full-size CI is named as its GI. The slices it takes of
// its GI: 1 for "1c.", its GI's count for a full one. nullopt: not a CI of
// a GI with `gi_profile`.
std::optional<unsigned> ci_slices_in(std::string_view ci_profile, std::string_view gi_profile);
// The compute slices of a GI profile: 3 for "3g.40gb"; 0 when not a GI profile.
unsigned gi_slices(std::string_view gi_profile);

} // namespace gpuinit::mig
