#include "gpuinit/host/mig_topology.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/kv_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <optional>
#include <tuple>

namespace gpuinit {

namespace {

// Driver limits: 32 GPUs x 15 GIs x 8 CIs (mig-minors has about 4300
// lines); the caps' minors fit the 20-bit minor space.
constexpr unsigned kMaxMigGpuMinor = 253;
constexpr unsigned kMaxMigInstanceId = 255;
constexpr unsigned kMaxCapMinor = (1u << 20) - 1;
constexpr size_t kMigMinorsLimit = 1u << 20;

// "gpu12" with prefix "gpu" -> 12; no sign, no leading zero, no junk.
std::optional<unsigned> numbered(std::string_view name, std::string_view prefix, unsigned max) {
    if (name.substr(0, prefix.size()) != prefix) {
        return std::nullopt;
    }
    std::string_view digits = name.substr(prefix.size());
    if (digits.empty() || (digits.size() > 1 && digits.front() == '0')) {
        return std::nullopt;
    }
    auto value = parse_decimal(digits, max);
    if (!value) {
        return std::nullopt;
    }
    return static_cast<unsigned>(*value);
}

// A mig-minors name: config, monitor, gpuN/giG or gpuN/giG/ciC.
bool valid_cap_key(std::string_view key) {
    if (key == "config" || key == "monitor") {
        return true;
    }
    std::vector<std::string_view> parts = split_fields(key, '/');
    if (parts.size() < 2 || parts.size() > 3) {
        return false;
    }
    return numbered(parts[0], "gpu", kMaxMigGpuMinor) &&
           numbered(parts[1], "gi", kMaxMigInstanceId) &&
           (parts.size() == 2 || numbered(parts[2], "ci", kMaxMigInstanceId));
}

Result<std::vector<std::string>> list_numbered(const Sysroot& root, const std::string& dir,
                                               std::string_view prefix, unsigned max,
                                               Diagnostics& diagnostics) {
    auto names = root.list_dir(dir);
    if (!names) {
        return names.error();
    }
    std::vector<std::string> kept;
    for (const std::string& name : *names) {
        if (numbered(name, prefix, max)) {
            kept.push_back(name);
        } else if (name.substr(0, prefix.size()) == prefix) {
            diagnostics.warning("unexpected entry " + quote(name) + " in " + root.display(dir) +
                                    "; ignored",
                                Location::in_file(root.display(dir)));
        }
    }
    return kept;
}

} // namespace

std::string MigCap::key() const {
    switch (kind) {
    case Kind::Config:
        return "config";
    case Kind::Monitor:
        return "monitor";
    case Kind::GpuInstance:
        return format("gpu%u/gi%u", gpu_minor, gi);
    case Kind::ComputeInstance:
        return format("gpu%u/gi%u/ci%u", gpu_minor, gi, ci);
    }
    return "config";
}

std::string MigCap::subject() const {
    switch (kind) {
    case Kind::Config:
        return "mig config";
    case Kind::Monitor:
        return "mig monitor";
    case Kind::GpuInstance:
        return format("MIG GPU %u GI %u", gpu_minor, gi);
    case Kind::ComputeInstance:
        return format("MIG GPU %u GI %u CI %u", gpu_minor, gi, ci);
    }
    return key();
}

bool MigTopology::has_instances() const {
    return std::any_of(caps.begin(), caps.end(),
                       [](const MigCap& cap) { return cap.kind == MigCap::Kind::GpuInstance; });
}

Result<std::map<std::string, unsigned>> parse_mig_minors(std::string_view text,
                                                         std::string_view source) {
    std::map<std::string, unsigned> table;
    std::map<unsigned, std::string> by_minor;
    size_t number = 0;
    for (std::string_view line : split_lines(text)) {
        ++number;
        if (trim(line).empty()) {
            continue;
        }
        std::vector<std::string_view> fields = split_words(line);
        if (fields.size() != 2) {
            return parse_error(source, number, "expected 'NAME MINOR', got " + quote(line));
        }
        std::string_view name = fields[0];
        constexpr std::string_view kAccess = "/access";
        if (name.size() > kAccess.size() && name.substr(name.size() - kAccess.size()) == kAccess) {
            name.remove_suffix(kAccess.size());
        } else if (name != "config" && name != "monitor") {
            return parse_error(source, number, quote(fields[0]) + " is not a MIG capability name");
        }
        if (!valid_cap_key(name)) {
            return parse_error(source, number, quote(fields[0]) + " is not a MIG capability name");
        }
        auto minor = parse_decimal(fields[1], kMaxCapMinor);
        if (!minor) {
            return parse_error(source, number,
                               "minor " + quote(fields[1]) +
                                   format(" is not a number 0..%u", kMaxCapMinor));
        }
        auto unsigned_minor = static_cast<unsigned>(*minor);
        if (!table.emplace(std::string(name), unsigned_minor).second) {
            return parse_error(source, number, quote(name) + " is listed twice");
        }
        if (auto [it, added] = by_minor.emplace(unsigned_minor, std::string(name)); !added) {
            return parse_error(source, number,
                               format("minor %u is listed for both ", unsigned_minor) +
                                   quote(it->second) + " and " + quote(name));
        }
    }
    return table;
}

Result<MigCap> parse_mig_access(std::string_view text, std::string_view source) {
    auto entries = read_key_values(text, source, KeyStyle::Identifier);
    if (!entries) {
        return entries.error();
    }
    size_t last = entries->empty() ? 1 : entries->back().line;
    MigCap cap;
    const KeyValue* minor = find_key(*entries, "DeviceFileMinor");
    const KeyValue* mode = find_key(*entries, "DeviceFileMode");
    const KeyValue* modify = find_key(*entries, "DeviceFileModify");
    if (minor == nullptr || mode == nullptr || modify == nullptr) {
        return parse_error(source, last,
                           "needs DeviceFileMinor, DeviceFileMode and DeviceFileModify lines");
    }
    auto minor_value = parse_decimal(minor->value, kMaxCapMinor);
    if (!minor_value) {
        return parse_error(source, minor->line,
                           "DeviceFileMinor " + quote(minor->value) +
                               format(" is not a number 0..%u", kMaxCapMinor));
    }
    // The driver prints the mode in decimal: 292 is 0444.
    auto mode_value = parse_decimal(mode->value, 0777);
    if (!mode_value) {
        return parse_error(source, mode->line,
                           "DeviceFileMode " + quote(mode->value) +
                               " is not a decimal mode 0..511 (0777)");
    }
    if (modify->value != "0" && modify->value != "1") {
        return parse_error(source, modify->line,
                           "DeviceFileModify " + quote(modify->value) + " is not 0 or 1");
    }
    cap.minor = static_cast<unsigned>(*minor_value);
    cap.mode = static_cast<unsigned>(*mode_value);
    cap.modify = modify->value == "1";
    return cap;
}

Result<MigTopology> read_mig_topology(const Sysroot& root, Diagnostics& diagnostics) {
    MigTopology topology;
    std::string base(kMigCapabilitiesPath);
    auto present = root.exists(base);
    if (!present) {
        return present.error();
    }
    if (!*present) {
        return topology;
    }
    auto minors_text = root.read_file(kMigMinorsPath, kMigMinorsLimit);
    if (!minors_text) {
        return minors_text.error();
    }
    auto table = parse_mig_minors(*minors_text, root.display(kMigMinorsPath));
    if (!table) {
        return table.error();
    }

    // One cap: read, parse, check its minor against the table.
    auto add = [&](MigCap cap, const std::string& access) {
        auto text = root.read_file(access);
        if (!text) {
            if (text.error().code == ENOENT) {
                return; // destroyed while we looked
            }
            diagnostics.add(text.error());
            return;
        }
        auto parsed = parse_mig_access(*text, root.display(access));
        if (!parsed) {
            diagnostics.add(parsed.error());
            return;
        }
        cap.minor = parsed->minor;
        cap.mode = parsed->mode;
        cap.modify = parsed->modify;
        cap.access = access;
        auto listed = table->find(cap.key());
        if (listed == table->end()) {
            diagnostics.error(cap.subject() + ": " + root.display(kMigMinorsPath) +
                                  " does not list " + quote(cap.key()) + "; no node is made for it",
                              Location::in_file(root.display(access)));
            return;
        }
        if (listed->second != cap.minor) {
            diagnostics.error(format("%s: DeviceFileMinor %u disagrees with %s (%u); no node is "
                                     "made for it",
                                     cap.subject().c_str(), cap.minor,
                                     root.display(kMigMinorsPath).c_str(), listed->second),
                              Location::in_file(root.display(access)));
            return;
        }
        topology.caps.push_back(std::move(cap));
    };

    for (auto [name, kind] :
         {std::pair{"config", MigCap::Kind::Config}, std::pair{"monitor", MigCap::Kind::Monitor}}) {
        std::string access = base + "/mig/" + name;
        auto exists = root.exists(access);
        if (exists && *exists) {
            MigCap cap;
            cap.kind = kind;
            add(cap, access);
        }
    }
    auto gpu_dirs = list_numbered(root, base, "gpu", kMaxMigGpuMinor, diagnostics);
    if (!gpu_dirs) {
        return gpu_dirs.error();
    }
    for (const std::string& gpu_dir : *gpu_dirs) {
        unsigned gpu = *numbered(gpu_dir, "gpu", kMaxMigGpuMinor);
        std::string mig = base + "/" + gpu_dir + "/mig";
        auto has_mig = root.exists(mig);
        if (!has_mig || !*has_mig) {
            continue;
        }
        topology.gpus_with_mig_dir.push_back(gpu);
        auto gis = list_numbered(root, mig, "gi", kMaxMigInstanceId, diagnostics);
        if (!gis) {
            diagnostics.add(gis.error());
            continue;
        }
        for (const std::string& gi_dir : *gis) {
            MigCap gi_cap;
            gi_cap.kind = MigCap::Kind::GpuInstance;
            gi_cap.gpu_minor = gpu;
            gi_cap.gi = *numbered(gi_dir, "gi", kMaxMigInstanceId);
            std::string gi_path = mig + "/" + gi_dir;
            add(gi_cap, gi_path + "/access");
            auto cis = list_numbered(root, gi_path, "ci", kMaxMigInstanceId, diagnostics);
            if (!cis) {
                if (cis.error().code != ENOENT) {
                    diagnostics.add(cis.error());
                }
                continue;
            }
            for (const std::string& ci_dir : *cis) {
                MigCap ci_cap = gi_cap;
                ci_cap.kind = MigCap::Kind::ComputeInstance;
                ci_cap.ci = *numbered(ci_dir, "ci", kMaxMigInstanceId);
                add(ci_cap, gi_path + "/" + ci_dir + "/access");
            }
        }
    }
    std::sort(topology.gpus_with_mig_dir.begin(), topology.gpus_with_mig_dir.end());
    std::stable_sort(topology.caps.begin(), topology.caps.end(),
                     [](const MigCap& a, const MigCap& b) {
                         return std::tuple(a.kind > MigCap::Kind::Monitor, a.gpu_minor, a.gi,
                                           a.kind == MigCap::Kind::ComputeInstance, a.ci) <
                                std::tuple(b.kind > MigCap::Kind::Monitor, b.gpu_minor, b.gi,
                                           b.kind == MigCap::Kind::ComputeInstance, b.ci);
                     });
    return topology;
}

} // namespace gpuinit
