// Slurm's gres.conf for the GPUs and MIG instances, without NVML: what a
// site without the NVML plugin (Debian's slurm-wlm ships none) must write
// by hand, and gets wrong. Per MIG instance:
//   Name=gpu Type=<type> MultipleFiles=/dev/nvidia<minor>,<GI cap>,<CI cap>
// and per GPU without instances:
//   Name=gpu Type=<type> File=/dev/nvidia<minor>
// The files are what a job must open; slurmd stat()s them, and cgroups
// constrain exactly the files gres.conf lists.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/mig/instances.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

// The largest gres.conf (or --type-map file) read.
inline constexpr size_t kGresConfLimit = 4u << 20;

enum class GresTypeStyle {
    // As Slurm's NVML autodetect names them ("nvidia_a100_80gb_pcie_1g.10gb",
    // "nvidia_a100-sxm4-80gb"), so a site can switch to AutoDetect=nvml
    // later without renaming its types. The default.
    Autodetect,
    // The short profile ("1g.10gb"); GPUs without MIG keep the autodetect name.
    Profile,
};

// --type-map FILE: "GENERATED SITE" per line ('#' comments): a site's own
// names for the generated types.
using GresTypeMap = std::map<std::string, std::string, std::less<>>;
Result<GresTypeMap> parse_gres_type_map(std::string_view text, std::string_view source);

struct GresRecord {
    std::string type;
    std::vector<std::string> files; // one (File=) or three (MultipleFiles=)
    std::string subject;            // "GPU 0 (0000:17:00.0)", "MIG gpu1/gi7/ci0"
};

struct GresPlan {
    std::vector<GresRecord> records;        // GPU minor, then GI and CI order
    std::map<std::string, unsigned> counts; // type -> records
};

// Slurm's AutoDetect=nvml type (23.02.6 and later): the model lowercased,
// spaces to '_'; for a MIG instance cut at the first '-', then '_' and the
// profile lowercased ("NVIDIA RTX PRO 6000 Blackwell Server Edition",
// "1g.24gb-me" -> "nvidia_rtx_pro_6000_blackwell_server_edition_1g.24gb-me").
std::string autodetect_gres_type(std::string_view model, std::string_view profile = {});

// Every GPU the driver lists: with MIG instances, one record per compute
// instance (a GPU with instances gets no whole-GPU record); without, one
// record. Fails, naming what to give, when a type cannot be named: a
// GPU's model or an instance's profile is unknown.
Result<GresPlan> plan_gres(const Machine& machine, const std::vector<MigInstance>& instances,
                           GresTypeStyle style, const GresTypeMap* type_map);

// gres.conf lines (NodeName=<node> first when `node` is given), with a
// header comment saying what wrote them.
std::string render_gres_conf(const GresPlan& plan, std::string_view node);
// slurm.conf's "Gres=gpu:<type>:<count>,..." for the node.
std::string render_slurm_gres(const GresPlan& plan);

// The number at the end of a device path after `prefix`:
// ("/dev/nvidia12", "/dev/nvidia") -> 12; nullopt when the rest is not a
// plain decimal number.
std::optional<unsigned> device_path_number(std::string_view path, std::string_view prefix);

// A Slurm host list ("gpu07", "gpu[01-04,07],login1"): whether it names
// `host`. Fails on forms it does not understand (two [..] in one name).
Result<bool> host_list_includes(std::string_view list, std::string_view host);

// One device of an existing gres.conf's Name=gpu lines, in file order: each
// path of File= (brackets expanded) is one device, each MultipleFiles= line
// one. That order is Slurm's device index (SLURM_JOB_GPUS, SLURM_STEP_GPUS)
// for a gres.conf without AutoDetect.
struct GresConfRecord {
    std::vector<std::string> files;
    std::string type;
    size_t line = 0;
};
// With `node`, lines whose NodeName= does not include it are skipped.
// Malformed lines fail with source:line.
Result<std::vector<GresConfRecord>> parse_gres_conf(std::string_view text, std::string_view source,
                                                    std::string_view node);

// --check: an existing gres.conf against the machine.
struct GresFinding {
    enum class Kind {
        MissingFile,  // a listed file does not exist (slurmd skips it)
        WrongDevice,  // /dev/nvidiaN that is not a minor the driver has (an nvidia-smi index?)
        GoneInstance, // a cap file of no existing instance
        NoCapFiles,   // a MIG GPU given as File=/dev/nvidiaN: cgroups constrain nothing
        NotListed,    // a GPU or instance the file lacks
        CountChange,  // a type's count differs: the node must be drained to change it
    };
    Kind kind = Kind::NotListed;
    size_t line = 0; // 0: not about one line
    std::string message;
};
// Lines not for `node` (NodeName= another) are skipped when `node` is given.
// Malformed lines fail with file:line.
Result<std::vector<GresFinding>> check_gres_conf(std::string_view text, std::string_view source,
                                                 const GresPlan& expected, const Sysroot& root,
                                                 const Machine& machine, std::string_view node);

const char* gres_finding_name(GresFinding::Kind kind);

} // namespace gpuinit
