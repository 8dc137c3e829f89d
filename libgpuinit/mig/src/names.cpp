// MIG names: the model and its join with the instances.
//
// Where the names come from (read from public sources; no GPU here):
// - `nvidia-smi -L` lists each GPU (index, name, GPU UUID) and under it its
//   MIG devices by MIG device index with profile and UUID, not with GI/CI
//   ids. Before R470 the UUID was "MIG-GPU-<gpu-uuid>/<gi>/<ci>"; since
//   R470 it is "MIG-<uuid>" and the container stack rejects the old form.
// - `nvidia-smi -q -x` has, per <gpu> (with <uuid> and <minor_number>),
//   <mig_devices><mig_device> with <index>, <gpu_instance_id> and
//   <compute_instance_id> (seen in outputs of drivers 535 and 575 parsed by
//   gpustack's and others' tools); no MIG UUID. -L and -q -x of one GPU
//   joined on the MIG device index give (GPU UUID, GI, CI) -> MIG UUID.
// - `nvidia-smi mig -lgi` / `-lci` give GI and CI ids with profile names
//   ("MIG 1c.3g.40gb" for a CI smaller than its GI) by GPU index; as a user
//   they say "Insufficient Permissions" (root needed).
// - NVML: nvmlDeviceGetMigDeviceHandleByIndex (indices may have gaps: go-nvml
//   issue 60), nvmlDeviceGetUUID, nvmlDeviceGetGpuInstanceId,
//   nvmlDeviceGetComputeInstanceId; nvmlDeviceGetName on a MIG handle
//   "returns MIG device names" (nvml.h), which end in "MIG <profile>".
// - No `--query-*` form lists MIG devices with their GI/CI ids.
#include "gpuinit/mig/names.hpp"

#include "gpuinit/base/text.hpp"

#include <algorithm>
#include <cctype>

namespace gpuinit {

namespace {

bool hex_run(std::string_view text, size_t count) {
    return text.size() == count && std::all_of(text.begin(), text.end(), [](char c) {
               return std::isxdigit(static_cast<unsigned char>(c)) != 0;
           });
}

// 8-4-4-4-12 hex digits.
bool canonical_uuid(std::string_view text) {
    constexpr size_t kRuns[] = {8, 4, 4, 4, 12};
    for (size_t i = 0; i < std::size(kRuns); ++i) {
        size_t dash = i + 1 < std::size(kRuns) ? text.find('-') : text.size();
        if (dash == std::string_view::npos || !hex_run(text.substr(0, dash), kRuns[i])) {
            return false;
        }
        text.remove_prefix(std::min(text.size(), dash + 1));
    }
    return true;
}

std::string lower(std::string_view text) {
    std::string out(text);
    for (char& c : out) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return out;
}

bool ascii_digit(char c) {
    return c >= '0' && c <= '9';
}

bool ascii_letter(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// "<digits><letter>" at the start of `text`, consumed.
bool slices(std::string_view& text, char unit) {
    size_t digits = 0;
    while (digits < text.size() && digits < 3 && ascii_digit(text[digits])) {
        ++digits;
    }
    if (digits == 0 || digits >= text.size() || text[digits] != unit) {
        return false;
    }
    text.remove_prefix(digits + 1);
    return true;
}

bool valid_gpu_uuid_text(std::string_view uuid) {
    return uuid.size() > 4 && (uuid.starts_with("GPU-") || uuid.starts_with("gpu-")) &&
           canonical_uuid(uuid.substr(4));
}

std::string instance_list(const std::vector<std::string>& keys) {
    std::string text;
    for (size_t i = 0; i < keys.size() && i < 8; ++i) {
        text += (i == 0 ? "" : ", ") + keys[i];
    }
    if (keys.size() > 8) {
        text += format(" and %zu more", keys.size() - 8);
    }
    return text;
}

} // namespace

bool valid_mig_uuid(std::string_view text) {
    return text.size() == 40 && text.starts_with("MIG-") && canonical_uuid(text.substr(4));
}

bool old_mig_uuid_form(std::string_view text) {
    return text.starts_with("MIG-GPU-") ||
           (text.starts_with("MIG-") && text.find('/') != text.npos);
}

bool valid_mig_profile(std::string_view text) {
    if (text.empty() || text.size() > 32) {
        return false;
    }
    std::string_view rest = text;
    std::string_view probe = rest;
    if (slices(probe, 'c') && !probe.empty() && probe[0] == '.') {
        rest = probe.substr(1);
    }
    if (!slices(rest, 'g') || rest.empty() || rest[0] != '.') {
        return false;
    }
    rest.remove_prefix(1);
    size_t digits = 0;
    while (digits < rest.size() && ascii_digit(rest[digits])) {
        ++digits;
    }
    if (digits == 0 || digits > 4 || rest.substr(digits, 2) != "gb") {
        return false;
    }
    rest.remove_prefix(digits + 2);
    // Suffixes: "+me", "+me.all", "+gfx", "-me". NVIDIA prints one, but a
    // later driver may combine them; what keeps hostile text out is the
    // alphabet, not the list of today's words.
    while (!rest.empty()) {
        if (rest[0] != '+' && rest[0] != '-') {
            return false;
        }
        rest.remove_prefix(1);
        if (rest.empty() || !ascii_letter(rest[0])) {
            return false;
        }
        size_t word = 1;
        while (word < rest.size() &&
               (ascii_letter(rest[word]) || ascii_digit(rest[word]) ||
                (rest[word] == '.' && word + 1 < rest.size() &&
                 (ascii_letter(rest[word + 1]) || ascii_digit(rest[word + 1]))))) {
            ++word;
        }
        rest.remove_prefix(word);
    }
    return true;
}

Status MigNames::add_profile(std::string_view gpu_uuid, unsigned gi, unsigned ci,
                             std::string_view profile) {
    if (!valid_gpu_uuid_text(gpu_uuid)) {
        return error("not a GPU UUID: " + quote(gpu_uuid));
    }
    if (!valid_mig_profile(profile)) {
        return error("not a MIG profile name: " + quote(profile));
    }
    MigName& name = instances_[MigNameKey{lower(gpu_uuid), gi, ci}];
    if (!name.profile.empty() && name.profile != profile) {
        return error(
            format("GI %u CI %u of %s: two profile names, ", gi, ci, quote(gpu_uuid).c_str()) +
            quote(name.profile) + " and " + quote(profile));
    }
    name.profile = std::string(profile);
    return {};
}

Status MigNames::add_uuid(std::string_view gpu_uuid, unsigned gi, unsigned ci,
                          std::string_view uuid) {
    if (!valid_gpu_uuid_text(gpu_uuid)) {
        return error("not a GPU UUID: " + quote(gpu_uuid));
    }
    if (old_mig_uuid_form(uuid)) {
        return error("MIG UUID " + quote(uuid, 96) +
                     " is in the old MIG-GPU-<uuid>/<gi>/<ci> form, which drivers from R470 on "
                     "reject; upgrade the driver (R470 or later), whose nvidia-smi -L prints "
                     "MIG-<uuid>");
    }
    if (!valid_mig_uuid(uuid)) {
        return error("not a MIG UUID (MIG-<uuid>): " + quote(uuid));
    }
    MigNameKey key{lower(gpu_uuid), gi, ci};
    auto [owner, added] = uuid_owners_.emplace(lower(uuid), key);
    if (!added && owner->second != key) {
        return error("MIG UUID " + quote(uuid) + " is given to two instances");
    }
    MigName& name = instances_[key];
    if (!name.uuid.empty() && name.uuid != uuid) {
        return error(format("GI %u CI %u of %s: two MIG UUIDs, ", gi, ci, quote(gpu_uuid).c_str()) +
                     quote(name.uuid) + " and " + quote(uuid));
    }
    name.uuid = std::string(uuid);
    return {};
}

Status MigNames::add_gpu(std::string_view gpu_uuid, MigNameGpu gpu) {
    if (!valid_gpu_uuid_text(gpu_uuid)) {
        return error("not a GPU UUID: " + quote(gpu_uuid));
    }
    auto [it, added] = gpus_.emplace(lower(gpu_uuid), gpu);
    if (!added) {
        MigNameGpu& known = it->second;
        if ((known.index && gpu.index && *known.index != *gpu.index) ||
            (known.minor && gpu.minor && *known.minor != *gpu.minor)) {
            return error("GPU " + quote(gpu_uuid) + " is listed twice with different indices");
        }
        known.index = known.index ? known.index : gpu.index;
        known.minor = known.minor ? known.minor : gpu.minor;
        if (known.name.empty()) {
            known.name = std::move(gpu.name);
        }
    }
    return {};
}

Status MigNames::add_gi_profile(std::string_view gpu_uuid, unsigned gi, std::string_view profile) {
    if (!valid_gpu_uuid_text(gpu_uuid)) {
        return error("not a GPU UUID: " + quote(gpu_uuid));
    }
    if (!valid_mig_profile(profile)) {
        return error("not a MIG profile name: " + quote(profile));
    }
    auto [it, added] = gi_profiles_.emplace(std::pair{lower(gpu_uuid), gi}, std::string(profile));
    if (!added && it->second != profile) {
        return error(format("GI %u of %s: two profile names, ", gi, quote(gpu_uuid).c_str()) +
                     quote(it->second) + " and " + quote(profile));
    }
    return {};
}

std::string MigNames::gi_profile(std::string_view gpu_uuid, unsigned gi) const {
    auto it = gi_profiles_.find(std::pair{lower(gpu_uuid), gi});
    return it == gi_profiles_.end() ? std::string() : it->second;
}

const MigName* MigNames::find(std::string_view gpu_uuid, unsigned gi, unsigned ci) const {
    auto it = instances_.find(MigNameKey{lower(gpu_uuid), gi, ci});
    return it == instances_.end() ? nullptr : &it->second;
}

const MigNameGpu* MigNames::gpu(std::string_view gpu_uuid) const {
    auto it = gpus_.find(lower(gpu_uuid));
    return it == gpus_.end() ? nullptr : &it->second;
}

void apply_mig_names(std::vector<MigInstance>& instances, const MigNames& names,
                     Diagnostics& diagnostics, std::string_view why) {
    std::vector<std::string> no_profile;
    std::vector<std::string> no_uuid;
    std::vector<MigNameKey> used;
    for (MigInstance& instance : instances) {
        const MigName* name = instance.gpu_uuid.empty()
                                  ? nullptr
                                  : names.find(instance.gpu_uuid, instance.gi, instance.ci);
        if (name != nullptr) {
            used.push_back({lower(instance.gpu_uuid), instance.gi, instance.ci});
            instance.profile = name->profile;
            instance.uuid = name->uuid;
        }
        if (instance.profile.empty()) {
            no_profile.push_back(instance.key());
        }
        if (instance.uuid.empty()) {
            no_uuid.push_back(instance.key());
        }
    }
    std::string source = names.source().empty() ? std::string("no source") : names.source();
    if (!no_profile.empty() || !no_uuid.empty()) {
        // One line: how many lack what, the first of them, why, the fix.
        std::string what;
        if (no_profile == no_uuid) {
            what = format("%zu MIG instances have no profile name or MIG UUID", no_uuid.size());
        } else if (!no_profile.empty() && !no_uuid.empty()) {
            what = format("%zu MIG instances have no profile name, %zu no MIG UUID",
                          no_profile.size(), no_uuid.size());
        } else {
            what = no_profile.empty()
                       ? format("%zu MIG instances have no MIG UUID", no_uuid.size())
                       : format("%zu MIG instances have no profile name", no_profile.size());
        }
        const std::vector<std::string>& keys =
            no_profile.size() >= no_uuid.size() ? no_profile : no_uuid;
        what += " (" + keys.front() + (keys.size() > 1 ? ", ...)" : ")");
        if (!names.source().empty()) {
            what += " in " + names.source();
        }
        if (!why.empty()) {
            what += ": " + std::string(why);
        }
        if (no_profile.empty()) {
            what += "; q.xml (nvidia-smi -q -x) has the MIG UUIDs";
        } else if (no_uuid.empty()) {
            what += "; mig-lci.txt (nvidia-smi mig -lci, as root) has the profiles";
        }
        diagnostics.warning(what + "; " + std::string(kGiveMigNames));
    }
    std::sort(used.begin(), used.end());
    std::vector<std::string> stale;
    for (const auto& [key, name] : names.instances()) {
        if (!std::binary_search(used.begin(), used.end(), key)) {
            stale.push_back(format("GI %u CI %u of ", key.gi, key.ci) + quote(key.gpu_uuid, 48));
        }
    }
    if (!stale.empty()) {
        diagnostics.warning(format("%zu MIG instances named by ", stale.size()) + source +
                            " are not in the driver's capability files, so not used (" +
                            instance_list(stale) +
                            "): take the output again after the last nvidia-smi mig change");
    }
}

} // namespace gpuinit
