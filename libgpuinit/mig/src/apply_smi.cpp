// The MigControl over nvidia-smi. The commands and the lines read back are
// nvidia-smi's as NVIDIA's MIG User Guide (docs.nvidia.com/datacenter/tesla/
// mig-user-guide, "Getting Started with MIG") prints them, which the
// stand-in nvidia-smi (tests/fixture/standin_nvidia_smi.c) reproduces:
//   Successfully created GPU instance ID  9 on GPU  0 using profile MIG 1g.10gb (ID 19)
//   Successfully created compute instance ID  0 on GPU  0 GPU instance ID  9 using ...
#include "gpuinit/mig/apply_smi.hpp"

#include "gpuinit/base/spawn.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/mig/layout.hpp"
#include "gpuinit/mig/names.hpp"

#include <algorithm>
#include <cerrno>

namespace gpuinit::mig {

namespace {

constexpr size_t kOutputLimit = 1u << 20;

// The id after `prefix` on the first line that starts with it.
std::optional<unsigned> id_after(std::string_view output, std::string_view prefix) {
    for (std::string_view line : split_lines(output)) {
        line = trim(line);
        if (!line.starts_with(prefix)) {
            continue;
        }
        std::vector<std::string_view> words = split_words(line.substr(prefix.size()));
        if (words.empty()) {
            return std::nullopt;
        }
        auto id = parse_decimal(words[0], 255);
        return id ? std::optional<unsigned>(static_cast<unsigned>(*id)) : std::nullopt;
    }
    return std::nullopt;
}

// The line that says why, for a message: the first "Unable ..." line, else
// the first line.
std::string why(std::string_view output) {
    std::vector<std::string_view> lines = split_lines(output);
    for (std::string_view line : lines) {
        if (trim(line).starts_with("Unable")) {
            return quote(trim(line), 160);
        }
    }
    for (std::string_view line : lines) {
        if (!trim(line).empty()) {
            return quote(trim(line), 160);
        }
    }
    return "no output";
}

} // namespace

std::optional<unsigned> ci_profile_id(std::string_view profile) {
    size_t digits = 0;
    while (digits < profile.size() && digits < 2 && profile[digits] >= '0' &&
           profile[digits] <= '9') {
        ++digits;
    }
    if (digits == 0 || digits == profile.size() || !valid_mig_profile(profile) ||
        (profile[digits] != 'c' && profile[digits] != 'g')) {
        return std::nullopt;
    }
    auto slices = parse_decimal(profile.substr(0, digits), 8);
    // nvml.h's NVML_COMPUTE_INSTANCE_PROFILE_<N>_SLICE, by N.
    static constexpr int kIds[] = {-1, 0, 1, 2, 3, -1, 6, 4, 5};
    if (!slices || kIds[*slices] < 0) {
        return std::nullopt;
    }
    return static_cast<unsigned>(kIds[*slices]);
}

SmiMigControl::SmiMigControl(std::string program, std::chrono::milliseconds timeout)
    : program_(std::move(program)), timeout_(timeout) {}

SmiMigControl::SmiMigControl(std::string program, std::vector<GpuIdentity> gpus,
                             std::chrono::milliseconds timeout)
    : program_(std::move(program)), gpus_(std::move(gpus)), timeout_(timeout) {}

Result<std::string> SmiMigControl::run_all(const std::vector<std::string>& args,
                                           bool none_is_empty) const {
    std::vector<std::string> argv{program_};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string output;
    SpawnRequest request{argv, {}, &output};
    request.output_limit = kOutputLimit;
    request.timeout = timeout_;
    auto status = run_program(request);
    std::string shown = "nvidia-smi";
    for (const std::string& arg : args) {
        shown += " " + arg;
    }
    if (!status) {
        Diagnostic failure = status.error();
        failure.message = shown + ": " + failure.message;
        return failure;
    }
    if (*status == 0) {
        return output;
    }
    if (none_is_empty) {
        // What nvidia-smi prints when there is nothing to list. 580.159.04
        // exits with 0 after the first (captures/h100-580.159.04); no
        // driver's status after the others is published, so any is taken.
        bool only_none = true;
        for (std::string_view line : split_lines(output)) {
            line = trim(line);
            only_none = only_none && (line.empty() || line == "No MIG-enabled devices found." ||
                                      line == "No GPU instances found: Not Found" ||
                                      line == "No compute instances found: Not Found");
        }
        if (only_none && !trim(output).empty()) {
            return std::string();
        }
    }
    return error(format("%s exited with status %d: ", shown.c_str(), *status) + why(output), EIO);
}

namespace {

// The outputs of one gpus() call disagree: what to say.
Diagnostic disagree(const std::string& what) {
    return error("nvidia-smi's outputs disagree (" + what +
                     "): the GPUs changed while they were read; run it again",
                 EAGAIN);
}

} // namespace

Result<std::vector<MigGpuState>> SmiMigControl::gpus() {
    auto xml = run_all({"-q", "-x"}, false);
    if (!xml) {
        return xml.error();
    }
    std::optional<unsigned> attached;
    auto query = parse_nvidia_smi_query_xml(*xml, program_ + " -q -x", &attached);
    if (!query) {
        return query.error();
    }
    // A GPU's index is its place in this listing, and what -i and mig -lgi
    // use: one <gpu> more or less (a process's name can write one) would
    // give every later GPU another's index.
    if (!attached || *attached != query->size()) {
        return error(format("nvidia-smi -q -x lists %zu GPUs where its <attached_gpus> says ",
                            query->size()) +
                         (attached ? std::to_string(*attached) : std::string("nothing")) +
                         ": the GPUs' indices cannot be trusted (a process name that spans "
                         "lines can do this); run nvidia-smi -q -x and look",
                     EIO);
    }
    std::vector<MigGpuState> states;
    std::vector<GpuIdentity> order;
    bool any_mig = false;
    for (size_t index = 0; index < query->size(); ++index) {
        const SmiQueryGpu& gpu = (*query)[index];
        if (!gpu.minor || gpu.bdf.empty()) {
            return error(format("nvidia-smi -q -x gives GPU %zu (", index) + quote(gpu.uuid, 80) +
                             ") no <minor_number> or <pci_bus_id>: gpu-mig apply needs both "
                             "(is the driver's device file missing?)",
                         EIO);
        }
        MigGpuState state;
        state.gpu = {*gpu.minor, gpu.bdf, gpu.uuid};
        state.model = gpu.name;
        if (gpu.mig_not_supported) {
            state.mig = false;
            state.mig_after = false;
            state.mig_capable = false;
        } else {
            state.mig = gpu.mig_current;
            state.mig_after = gpu.mig_pending;
        }
        any_mig = any_mig || state.mig.value_or(false);
        state.pids = gpu.pids;
        state.used = gpu.process_instances;
        std::sort(state.pids.begin(), state.pids.end());
        state.pids.erase(std::unique(state.pids.begin(), state.pids.end()), state.pids.end());
        order.push_back(state.gpu);
        states.push_back(std::move(state));
    }
    // Instances and placements matter only on a GPU with MIG on; with none,
    // the mig commands are not run (on a machine without MIG they fail).
    if (any_mig) {
        std::vector<std::string> texts;
        for (const char* list : {"-lgi", "-lci", "-lgip", "-lgipp"}) {
            auto text = run_all({"mig", list}, true);
            if (!text) {
                return text.error();
            }
            texts.push_back(std::move(*text));
        }
        auto lgi = parse_nvidia_smi_lgi(texts[0], program_ + " mig -lgi");
        if (!lgi) {
            return lgi.error();
        }
        auto lci = parse_nvidia_smi_lci(texts[1], program_ + " mig -lci");
        if (!lci) {
            return lci.error();
        }
        auto lgip = parse_nvidia_smi_lgip(texts[2], program_ + " mig -lgip");
        if (!lgip) {
            return lgip.error();
        }
        auto lgipp = parse_nvidia_smi_lgipp(texts[3], program_ + " mig -lgipp");
        if (!lgipp) {
            return lgipp.error();
        }
        for (const SmiGpuInstance& row : *lgi) {
            if (row.gpu_index >= states.size() || !states[row.gpu_index].mig.value_or(false)) {
                return disagree(format("mig -lgi lists GI %u on GPU %u, which -q -x gives no "
                                       "MIG",
                                       row.gi, row.gpu_index));
            }
            states[row.gpu_index].gis.push_back({row.gi, row.profile, {}});
        }
        for (const SmiComputeInstance& row : *lci) {
            std::vector<GiState>* gis =
                row.gpu_index < states.size() ? &states[row.gpu_index].gis : nullptr;
            auto gi = gis == nullptr
                          ? std::vector<GiState>::iterator()
                          : std::find_if(gis->begin(), gis->end(),
                                         [&](const GiState& g) { return g.id == row.gi; });
            if (gis == nullptr || gi == gis->end()) {
                return disagree(format("mig -lci lists CI %u of GI %u on GPU %u, which mig -lgi "
                                       "does not list",
                                       row.ci, row.gi, row.gpu_index));
            }
            // A CI as large as its GI is named as the GI, as the layout
            // names it: nvidia-smi spells the one of a 1g.10gb+me GI
            // "1g.10gb".
            std::string profile = row.profile;
            if (ci_slices_in(profile, gi->profile) == gi_slices(gi->profile)) {
                profile = gi->profile;
            }
            gi->cis.push_back({row.ci, std::move(profile)});
        }
        for (const SmiPlacements& row : *lgipp) {
            if (row.gpu_index >= states.size()) {
                return disagree(
                    format("mig -lgipp lists GPU %u, which -q -x does not", row.gpu_index));
            }
            const SmiGiProfile* profile = nullptr;
            for (const SmiGiProfile& named : *lgip) {
                if (named.gpu_index == row.gpu_index && named.profile_id == row.profile_id) {
                    profile = &named;
                }
            }
            if (profile == nullptr) {
                return disagree(format("mig -lgipp lists profile %u of GPU %u, which mig -lgip "
                                       "does not name",
                                       row.profile_id, row.gpu_index));
            }
            states[row.gpu_index].placements.push_back({profile->profile, row.size, row.starts});
        }
        for (MigGpuState& state : states) {
            std::sort(state.gis.begin(), state.gis.end(),
                      [](const GiState& a, const GiState& b) { return a.id < b.id; });
            for (GiState& gi : state.gis) {
                std::sort(gi.cis.begin(), gi.cis.end(),
                          [](const CiState& a, const CiState& b) { return a.id < b.id; });
            }
        }
    }
    gpus_ = std::move(order);
    return states;
}

Result<unsigned> SmiMigControl::index_of(const GpuIdentity& gpu) const {
    for (size_t i = 0; i < gpus_.size(); ++i) {
        if ((!gpu.uuid.empty() && same_uuid(gpus_[i].uuid, gpu.uuid)) ||
            (gpu.uuid.empty() && !gpu.bdf.empty() && gpus_[i].bdf == gpu.bdf)) {
            return static_cast<unsigned>(i);
        }
    }
    if (gpus_.empty()) {
        return error("nvidia-smi's GPUs are not known yet: read them (gpus()) before changing "
                     "one",
                     ENODEV);
    }
    return error("nvidia-smi does not list this GPU (" +
                     quote(gpu.uuid.empty() ? gpu.bdf : gpu.uuid, 80) +
                     "): run nvidia-smi -L to see what it lists",
                 ENODEV);
}

Result<std::string> SmiMigControl::run(const GpuIdentity& gpu,
                                       std::vector<std::string> args) const {
    auto index = index_of(gpu);
    if (!index) {
        return index.error();
    }
    std::vector<std::string> argv{program_};
    for (std::string& arg : args) {
        argv.push_back(std::move(arg));
    }
    argv.push_back("-i");
    argv.push_back(std::to_string(*index));
    std::string output;
    SpawnRequest request{argv, {}, &output};
    request.output_limit = kOutputLimit;
    request.timeout = timeout_;
    auto status = run_program(request);
    std::string shown;
    for (size_t i = 1; i < argv.size(); ++i) {
        shown += (i == 1 ? "" : " ") + argv[i];
    }
    if (!status) {
        Diagnostic failure = status.error();
        failure.message = "nvidia-smi " + shown + ": " + failure.message;
        return failure;
    }
    if (*status != 0) {
        return error(format("nvidia-smi %s exited with status %d: ", shown.c_str(), *status) +
                         why(output),
                     EIO);
    }
    return output;
}

Status SmiMigControl::destroy_ci(const GpuIdentity& gpu, unsigned gi, unsigned ci) {
    auto output = run(gpu, {"mig", "-dci", "-ci", std::to_string(ci), "-gi", std::to_string(gi)});
    return output ? Status() : Status(output.error());
}

Status SmiMigControl::destroy_gi(const GpuIdentity& gpu, unsigned gi) {
    auto output = run(gpu, {"mig", "-dgi", "-gi", std::to_string(gi)});
    return output ? Status() : Status(output.error());
}

Status SmiMigControl::set_mig_mode(const GpuIdentity& gpu, bool on) {
    auto output = run(gpu, {"-mig", on ? "1" : "0"});
    return output ? Status() : Status(output.error());
}

Status SmiMigControl::reset(const GpuIdentity& gpu) {
    auto output = run(gpu, {"-r"});
    return output ? Status() : Status(output.error());
}

Result<unsigned> SmiMigControl::create_gi(const GpuIdentity& gpu, std::string_view profile,
                                          std::optional<unsigned> start) {
    if (!valid_mig_profile(profile)) {
        return error("not a MIG profile name: " + quote(profile), EINVAL);
    }
    // nvidia-smi mig --help: "a profile name or ID and an optional placement
    // specifier, which consists of a colon and a placement start index".
    std::string spec(profile);
    if (start) {
        spec += ":" + std::to_string(*start);
    }
    auto output = run(gpu, {"mig", "-cgi", spec});
    if (!output) {
        return output.error();
    }
    auto id = id_after(*output, "Successfully created GPU instance ID");
    if (!id) {
        return error("nvidia-smi mig -cgi " + spec +
                         " did not say which GPU instance it made: " + why(*output),
                     EIO);
    }
    return *id;
}

Result<unsigned> SmiMigControl::create_ci(const GpuIdentity& gpu, unsigned gi,
                                          std::string_view profile) {
    auto id = ci_profile_id(profile);
    if (!id) {
        return error("not a compute-instance profile name: " + quote(profile), EINVAL);
    }
    auto output = run(gpu, {"mig", "-cci", std::to_string(*id), "-gi", std::to_string(gi)});
    if (!output) {
        return output.error();
    }
    auto ci = id_after(*output, "Successfully created compute instance ID");
    if (!ci) {
        return error(format("nvidia-smi mig -cci %u -gi %u did not say which compute instance "
                            "it made: ",
                            *id, gi) +
                         why(*output),
                     EIO);
    }
    return *ci;
}

} // namespace gpuinit::mig
