// The MigControl over nvidia-smi. The commands and the lines read back are
// nvidia-smi's as NVIDIA's MIG User Guide (docs.nvidia.com/datacenter/tesla/
// mig-user-guide, "Getting Started with MIG") prints them, which the
// stand-in nvidia-smi (tests/fixture/standin_nvidia_smi.c) reproduces:
//   Successfully created GPU instance ID  9 on GPU  0 using profile MIG 1g.10gb (ID 19)
//   Successfully created compute instance ID  0 on GPU  0 GPU instance ID  9 using ...
#include "gpuinit/mig/apply_smi.hpp"

#include "gpuinit/base/spawn.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/mig/names.hpp"

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

SmiMigControl::SmiMigControl(std::string program, std::vector<GpuIdentity> gpus,
                             std::chrono::milliseconds timeout)
    : program_(std::move(program)), gpus_(std::move(gpus)), timeout_(timeout) {}

Result<std::vector<MigGpuState>> SmiMigControl::gpus() {
    return error("reading the GPUs' MIG state through nvidia-smi is not supported yet: load "
                 "NVML (libnvidia-ml.so.1) for gpu-mig apply",
                 ENOTSUP);
}

Result<unsigned> SmiMigControl::index_of(const GpuIdentity& gpu) const {
    for (size_t i = 0; i < gpus_.size(); ++i) {
        if ((!gpu.uuid.empty() && same_uuid(gpus_[i].uuid, gpu.uuid)) ||
            (gpu.uuid.empty() && !gpu.bdf.empty() && gpus_[i].bdf == gpu.bdf)) {
            return static_cast<unsigned>(i);
        }
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
