// MIG profile names ("1g.10gb", "1c.3g.40gb") and MIG UUIDs ("MIG-<uuid>"),
// which /proc does not have. They come from NVML (nvml.hpp) or from
// nvidia-smi's output (below), and are joined to the instances of
// instances.hpp by GPU UUID, GI id and CI id: never by nvidia-smi's GPU
// index, which need not be the device minor. What is not known stays empty;
// no id is ever made up (the old "MIG-GPU-<uuid>/<gi>/<ci>" form is refused:
// drivers from R470 on reject it).
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/mig/instances.hpp"

#include <cerrno>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace gpuinit {

// "MIG-" and a UUID (8-4-4-4-12 hex digits). The old
// "MIG-GPU-<uuid>/<gi>/<ci>" form is not one.
bool valid_mig_uuid(std::string_view text);
// The old form, to refuse it by name.
bool old_mig_uuid_form(std::string_view text);
// A profile name as NVML and nvidia-smi give it, GPU instance or compute
// instance: [<n>c.]<n>g.<n>gb, then suffixes, each '+' or '-' and a word of
// ASCII letters and digits that starts with a letter, with single dots
// inside: "1g.10gb", "1c.3g.40gb", "1g.10gb+me", "1g.24gb+me.all",
// "1g.24gb+gfx", "1g.24gb-me". At most 32 bytes. The forms are nvml.h's
// NVML_GPU_INSTANCE_PROFILE_* (_REV1: +me, _ALL_ME: +me.all, _GFX: +gfx,
// _NO_ME: -me), named as NVIDIA's go-nvlib spells them and as nvidia-smi mig
// -lgip prints them (tests/fixture/captures).
bool valid_mig_profile(std::string_view text);

struct MigNameKey {
    std::string gpu_uuid; // "GPU-...", lowercase
    unsigned gi = 0;
    unsigned ci = 0;
    // Spelled out: clang-tidy misreads a defaulted operator<=> (use-nullptr).
    friend bool operator<(const MigNameKey& a, const MigNameKey& b) {
        return std::tie(a.gpu_uuid, a.gi, a.ci) < std::tie(b.gpu_uuid, b.gi, b.ci);
    }
    friend bool operator==(const MigNameKey& a, const MigNameKey& b) {
        return std::tie(a.gpu_uuid, a.gi, a.ci) == std::tie(b.gpu_uuid, b.gi, b.ci);
    }
};

struct MigName {
    std::string profile; // empty: unknown
    std::string uuid;    // empty: unknown
};

// What the source says about one GPU (for messages and `gpu-mig list`).
struct MigNameGpu {
    std::optional<unsigned> index; // nvidia-smi's (= NVML's) index
    std::optional<unsigned> minor; // the device minor, when the source says
    std::string name;              // "NVIDIA A100-SXM4-80GB"
};

// Names from one source. Add through add_profile/add_uuid/add_gpu: they
// check every value and refuse a second, different value for one key.
class MigNames {
  public:
    explicit MigNames(std::string source = {}) : source_(std::move(source)) {}

    // For messages: "NVML", "nvidia-smi output in /root/smi".
    const std::string& source() const { return source_; }

    Status add_profile(std::string_view gpu_uuid, unsigned gi, unsigned ci,
                       std::string_view profile);
    Status add_uuid(std::string_view gpu_uuid, unsigned gi, unsigned ci, std::string_view uuid);
    Status add_gpu(std::string_view gpu_uuid, MigNameGpu gpu);
    // A GPU instance's own profile (`nvidia-smi mig -lgi`): not a CI's, which
    // may be smaller ("1c.3g.40gb" in a "3g.40gb" GI).
    Status add_gi_profile(std::string_view gpu_uuid, unsigned gi, std::string_view profile);

    const MigName* find(std::string_view gpu_uuid, unsigned gi, unsigned ci) const;
    const MigNameGpu* gpu(std::string_view gpu_uuid) const;
    // "" when unknown.
    std::string gi_profile(std::string_view gpu_uuid, unsigned gi) const;

    const std::map<MigNameKey, MigName>& instances() const { return instances_; }
    const std::map<std::string, MigNameGpu>& gpus() const { return gpus_; }
    bool empty() const { return instances_.empty(); }

  private:
    std::string source_;
    std::map<MigNameKey, MigName> instances_;
    std::map<std::string, MigNameGpu> gpus_;
    std::map<std::pair<std::string, unsigned>, std::string> gi_profiles_;
    std::map<std::string, MigNameKey> uuid_owners_; // a MIG UUID names one instance
};

// Fills `profile` and `uuid` of every instance the names know, by GPU UUID,
// GI and CI. Instances left without a profile or UUID are reported once, in
// one short warning that says which and how to give them (with `why`, when
// given: why no better source answered); names of instances the driver
// does not list (output older than the last `nvidia-smi mig` change) are
// reported once too and not used.
void apply_mig_names(std::vector<MigInstance>& instances, const MigNames& names,
                     Diagnostics& diagnostics, std::string_view why = {});

// How to give names when none answered, as the warnings end.
inline constexpr std::string_view kGiveMigNames =
    "give saved nvidia-smi output with --nvidia-smi-output DIR (gpu-mig(8), NAMES)";

// ---- nvidia-smi's output, as text ----------------------------------------
// Every parser reads line by line, takes only the forms below, and names
// source:line in its errors.

// `nvidia-smi -L`:
//   GPU 1: NVIDIA A100 80GB PCIe (UUID: GPU-558ce121-...)
//     MIG 1g.10gb     Device  0: (UUID: MIG-3c4c5a27-...)
// MIG lines list devices by MIG device index, not by GI or CI id.
struct SmiListMig {
    unsigned device = 0; // MIG device index on its GPU
    std::string profile;
    std::string uuid;
    size_t line = 0;
};
struct SmiListGpu {
    unsigned index = 0;
    std::string name;
    std::string uuid;
    size_t line = 0;
    std::vector<SmiListMig> migs;
};
Result<std::vector<SmiListGpu>> parse_nvidia_smi_list(std::string_view text,
                                                      std::string_view source);

// `nvidia-smi mig -lgi`: one row per GPU instance,
//   |   1  MIG 1g.10gb       19        7          0:1     |
struct SmiGpuInstance {
    unsigned gpu_index = 0;
    std::string profile;
    unsigned profile_id = 0;
    unsigned gi = 0;
    size_t line = 0;
};
Result<std::vector<SmiGpuInstance>> parse_nvidia_smi_lgi(std::string_view text,
                                                         std::string_view source);

// `nvidia-smi mig -lci`: one row per compute instance, with its own
// profile ("1c.3g.40gb" when the CI is smaller than its GI),
//   |   1      7       MIG 1g.10gb          0         0          0:1     |
struct SmiComputeInstance {
    unsigned gpu_index = 0;
    unsigned gi = 0;
    std::string profile;
    unsigned profile_id = 0;
    unsigned ci = 0;
    size_t line = 0;
};
Result<std::vector<SmiComputeInstance>> parse_nvidia_smi_lci(std::string_view text,
                                                             std::string_view source);

// `nvidia-smi mig -lgipp`: each GPU-instance profile's possible
// placements, as starts and a size in memory slices:
//   GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
//   GPU  0 Profile ID  5 Placement : {0}:4
struct SmiPlacements {
    unsigned gpu_index = 0;
    unsigned profile_id = 0;
    std::vector<unsigned> starts;
    unsigned size = 0;
    size_t line = 0;
};
Result<std::vector<SmiPlacements>> parse_nvidia_smi_lgipp(std::string_view text,
                                                          std::string_view source);

// `nvidia-smi mig -lgip`: each GPU's GPU-instance profiles, name and id,
// with how many more of each fit now (Free) and on the empty GPU (Total):
//   |   0  MIG 1g.10gb         19     7/7        9.75       No     16     1     0   |
//   |                                                               1     1     0   |
// The second line of a row (CE, JPEG, OFA) is checked and not kept. Profile
// ids differ between GPU models (1g.10gb is 19 on an H100, 1g.5gb on an
// A100), so a name is turned into an id per GPU, never by a fixed table.
struct SmiGiProfile {
    unsigned gpu_index = 0;
    std::string profile; // "1g.10gb+me"
    unsigned profile_id = 0;
    unsigned free = 0;
    unsigned total = 0;
    size_t line = 0;
};
Result<std::vector<SmiGiProfile>> parse_nvidia_smi_lgip(std::string_view text,
                                                        std::string_view source);
// The row of `profile` on GPU `gpu_index`, or null.
const SmiGiProfile* find_gi_profile(const std::vector<SmiGiProfile>& rows, unsigned gpu_index,
                                    std::string_view profile);

// `nvidia-smi -q -x`, only what joins a MIG device index to its GI and CI:
// per <gpu>, <uuid>, <minor_number>, <product_name> and
// <mig_devices><mig_device><index>, <gpu_instance_id>, <compute_instance_id>;
// and what gpu-mig apply needs: <mig_mode><current_mig>, <pending_mig>
// ("Enabled", "Disabled"; "N/A" on a GPU without MIG), <pci><pci_bus_id>
// ("00000000:17:00.0") and the <processes><process_info><pid> of the
// processes on the GPU. The <gpu>s come in nvidia-smi's index order.
// Read line by line as nvidia-smi writes it (one element per line).
struct SmiQueryMig {
    unsigned index = 0;
    unsigned gi = 0;
    unsigned ci = 0;
    size_t line = 0;
};
inline constexpr int kSmiProcessNameCode = EBADMSG;
struct SmiQueryGpu {
    std::string uuid;
    std::optional<unsigned> minor;
    std::string name;
    size_t line = 0;
    std::vector<SmiQueryMig> migs;
    std::string bdf;                 // canonical: "0000:17:00.0"; empty: not given
    std::optional<bool> mig_current; // nullopt: N/A or not given
    std::optional<bool> mig_pending;
    bool mig_not_supported = false; // <current_mig> is N/A: a GPU without MIG
    std::vector<unsigned> pids;
    // (GI, CI) of each process whose <gpu_instance_id> and
    // <compute_instance_id> are given (not N/A).
    std::vector<std::pair<unsigned, unsigned>> process_instances;
};
// A process's <process_name> is text its user chooses, which nvidia-smi
// prints unescaped: on its line it is only a name; spread over lines, the
// output is refused with code kSmiProcessNameCode. No two <gpu>s are the same GPU (UUID, PCI
// address, minor). `attached`, when given, gets <attached_gpus>, read only before the first <gpu>,
// where no text a user chooses comes: a caller that ran -q -x for every GPU checks that as many
// <gpu>s came.
Result<std::vector<SmiQueryGpu>>
parse_nvidia_smi_query_xml(std::string_view text, std::string_view source,
                           std::optional<unsigned>* attached = nullptr);

// The texts of one machine; an absent one is nullopt. `*_source` name them
// in messages.
struct NvidiaSmiTexts {
    std::optional<std::string> list;      // -L (needed for anything)
    std::optional<std::string> lgi;       // mig -lgi
    std::optional<std::string> lci;       // mig -lci
    std::optional<std::string> query_xml; // -q -x
    std::string list_source = "nvidia-smi -L";
    std::string lgi_source = "nvidia-smi mig -lgi";
    std::string lci_source = "nvidia-smi mig -lci";
    std::string query_source = "nvidia-smi -q -x";
};

// Joins the texts:
// - GPU index -> GPU UUID and name from -L (every other text names GPUs by
//   index, so -L is required);
// - MIG UUID and profile of (GPU UUID, GI, CI): -L's MIG device index joined
//   with -q -x's <mig_device> (index -> GI, CI) of the same GPU UUID; -L's
//   name is NVML's, the one Slurm's AutoDetect=nvml types are made of;
// - profile of (GPU UUID, GI, CI) from -lci (the CI's own profile) where -L
//   cannot be joined (no -q -x), and a GI's profile from -lgi.
// A text that does not parse fails the whole; a GPU or instance one text
// has and another lacks is a warning, and its names are left out.
Result<MigNames> mig_names_from_nvidia_smi(const NvidiaSmiTexts& texts, Diagnostics& diagnostics,
                                           std::string source = "nvidia-smi output");

// `--nvidia-smi-output DIR`: the saved outputs, by fixed names, each at most
// 4 MiB:
//   DIR/L.txt         nvidia-smi -L              (required)
//   DIR/q.xml         nvidia-smi -q -x           (for MIG UUIDs)
//   DIR/mig-lgi.txt   nvidia-smi mig -lgi        (optional)
//   DIR/mig-lci.txt   nvidia-smi mig -lci        (for CI profiles: 1c.3g.40gb)
// Saved as root, e.g.:
//   nvidia-smi -L > DIR/L.txt; nvidia-smi -q -x > DIR/q.xml
//   nvidia-smi mig -lgi > DIR/mig-lgi.txt; nvidia-smi mig -lci > DIR/mig-lci.txt
inline constexpr std::string_view kSmiListFile = "L.txt";
inline constexpr std::string_view kSmiQueryFile = "q.xml";
inline constexpr std::string_view kSmiLgiFile = "mig-lgi.txt";
inline constexpr std::string_view kSmiLciFile = "mig-lci.txt";
inline constexpr size_t kSmiOutputLimit = 4u << 20;
Result<MigNames> load_nvidia_smi_output(const std::string& dir, Diagnostics& diagnostics);

// Runs nvidia-smi itself (-L, -q -x, mig -lgi, mig -lci) when `program` is
// given, or else when "nvidia-smi" is found on PATH (an absolute directory
// of PATH only), and joins what it prints. A command whose output passes
// kSmiOutputLimit, or that has not finished within `timeout` (each command
// its own; nvidia-smi hangs when the driver is wedged), is killed and
// refused. Fails when nvidia-smi is not found or -L fails; the other
// commands failing (mig -lci needs root) only leave their names out, with a
// warning.
inline constexpr std::chrono::milliseconds kSmiTimeout{30000};
Result<MigNames> run_nvidia_smi(Diagnostics& diagnostics, const std::string& program = {},
                                std::chrono::milliseconds timeout = kSmiTimeout);
// The path of "nvidia-smi" on $PATH, or an error that says it is not there.
Result<std::string> find_nvidia_smi();

} // namespace gpuinit
