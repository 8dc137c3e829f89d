#include "gpuinit/mig/gres.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/devnodes/node_plan.hpp"

#include <algorithm>
#include <cctype>
#include <set>

namespace gpuinit {

namespace {

std::string lower(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

std::string join(const std::vector<std::string>& parts, char separator) {
    std::string out;
    for (const std::string& part : parts) {
        out += (out.empty() ? "" : std::string(1, separator)) + part;
    }
    return out;
}

// Slurm's bracket form at the end of a path: "/dev/nvidia[0-1,3]".
Result<std::vector<std::string>> expand_brackets(const std::string& path, std::string_view source,
                                                 size_t line) {
    size_t open = path.find('[');
    if (open == std::string::npos) {
        return std::vector<std::string>{path};
    }
    if (path.back() != ']' || path.find('[', open + 1) != std::string::npos) {
        return parse_error(source, line,
                           quote(path) + ": only one [..] range at the end is checked");
    }
    std::string prefix = path.substr(0, open);
    std::vector<std::string> out;
    for (std::string_view piece :
         split_fields(std::string_view(path).substr(open + 1, path.size() - open - 2), ',')) {
        size_t dash = piece.find('-');
        auto first = parse_decimal(piece.substr(0, dash), 1u << 20);
        auto last =
            dash == std::string::npos ? first : parse_decimal(piece.substr(dash + 1), 1u << 20);
        if (!first || !last || *last < *first || *last - *first > 4096) {
            return parse_error(source, line,
                               quote(path) + ": " + quote(piece) + " is not N or N-M");
        }
        for (uint64_t n = *first; n <= *last; ++n) {
            out.push_back(prefix + std::to_string(n));
        }
    }
    return out;
}

// One host-list item: "gpu07", "gpu[01-04,07]", "rack1-n[1-8]-ib".
Result<bool> host_item_includes(std::string_view item, std::string_view host) {
    size_t open = item.find('[');
    if (open == std::string_view::npos) {
        return item == host;
    }
    size_t close = item.find(']', open);
    if (close == std::string_view::npos || item.find('[', close) != std::string_view::npos) {
        return error(quote(item) + ": only one [..] range per host name is understood");
    }
    std::string_view prefix = item.substr(0, open);
    std::string_view suffix = item.substr(close + 1);
    if (host.size() <= prefix.size() + suffix.size() || !host.starts_with(prefix) ||
        !host.ends_with(suffix)) {
        return false;
    }
    std::string_view digits =
        host.substr(prefix.size(), host.size() - prefix.size() - suffix.size());
    auto value = parse_decimal(digits, UINT32_MAX);
    for (std::string_view piece : split_fields(item.substr(open + 1, close - open - 1), ',')) {
        size_t dash = piece.find('-');
        std::string_view first_text = piece.substr(0, dash);
        auto first = parse_decimal(first_text, UINT32_MAX);
        auto last = dash == std::string_view::npos
                        ? first
                        : parse_decimal(piece.substr(dash + 1), UINT32_MAX);
        if (!first || !last || *last < *first) {
            return error(quote(item) + ": " + quote(piece) + " is not N or N-M");
        }
        // "01-10" names gpu01..gpu10: a leading zero fixes the width.
        bool padded = first_text.size() > 1 && first_text.front() == '0';
        bool width_ok =
            padded ? digits.size() == first_text.size() : value && digits == std::to_string(*value);
        if (value && width_ok && *value >= *first && *value <= *last) {
            return true;
        }
    }
    return false;
}

} // namespace

Result<bool> host_list_includes(std::string_view list, std::string_view host) {
    size_t depth = 0;
    size_t start = 0;
    for (size_t i = 0; i <= list.size(); ++i) {
        if (i < list.size() && list[i] == '[') {
            ++depth;
        } else if (i < list.size() && list[i] == ']' && depth > 0) {
            --depth;
        } else if (i == list.size() || (list[i] == ',' && depth == 0)) {
            auto includes = host_item_includes(list.substr(start, i - start), host);
            if (!includes || *includes) {
                return includes;
            }
            start = i + 1;
        }
    }
    return false;
}

Result<std::vector<GresConfRecord>> parse_gres_conf(std::string_view text, std::string_view source,
                                                    std::string_view node) {
    std::vector<GresConfRecord> records;
    for (const auto& [number, words] : word_lines(text)) {
        std::map<std::string, std::string> keys;
        for (std::string_view word : words) {
            size_t equals = word.find('=');
            if (equals == std::string_view::npos || equals == 0) {
                return parse_error(source, number, quote(word) + " is not Key=Value");
            }
            keys[lower(word.substr(0, equals))] = std::string(word.substr(equals + 1));
        }
        if (keys.count("autodetect") != 0 && keys.size() == 1) {
            continue;
        }
        if (lower(keys["name"]) != "gpu") {
            continue;
        }
        if (!node.empty() && keys.count("nodename") != 0) {
            auto includes = host_list_includes(keys["nodename"], node);
            if (!includes) {
                return parse_error(source, number, includes.error().message);
            }
            if (!*includes) {
                continue;
            }
        }
        GresConfRecord record;
        record.line = number;
        record.type = keys["type"];
        bool has_file = keys.count("file") != 0;
        bool multiple = keys.count("multiplefiles") != 0;
        if (has_file == multiple) {
            return parse_error(source, number,
                               "a Name=gpu line needs File= or MultipleFiles=, not both");
        }
        // An empty path names no device: slurmd would skip it, and the
        // devices after it would get other indices than the job was given.
        const std::string& files = has_file ? keys["file"] : keys["multiplefiles"];
        if (files.empty() || files.front() == ',' || files.back() == ',' ||
            files.find(",,") != std::string::npos) {
            return parse_error(source, number,
                               std::string(has_file ? "File=" : "MultipleFiles=") +
                                   " has an empty path; name each device file");
        }
        if (has_file) {
            auto expanded = expand_brackets(keys["file"], source, number);
            if (!expanded) {
                return expanded.error();
            }
            for (std::string& path : *expanded) {
                records.push_back({{std::move(path)}, record.type, number});
            }
        } else {
            for (std::string_view file : split_fields(keys["multiplefiles"], ',')) {
                record.files.emplace_back(file);
            }
            records.push_back(std::move(record));
        }
    }
    return records;
}

// "/dev/nvidia12" -> 12; "/dev/nvidia-caps/nvidia-cap7" -> 7.
std::optional<unsigned> device_path_number(std::string_view path, std::string_view prefix) {
    if (!path.starts_with(prefix)) {
        return std::nullopt;
    }
    std::string_view digits = path.substr(prefix.size());
    auto value = parse_decimal(digits, (1u << 20) - 1);
    if (!value || std::to_string(*value) != digits) {
        return std::nullopt;
    }
    return static_cast<unsigned>(*value);
}

// As SchedMD/slurm src/plugins/gpu/nvml/gpu_nvml.c names types (checked at
// tag slurm-26-05-3-1 and master 284c3b95; the same since slurm-23-02-6-1,
// commit 04f0e4c3): _nvml_get_device_name() passes every NVML name through
// gpu_common_underscorify_tolower() (src/plugins/gpu/common/gpu_common.c:
// tolower each byte, ' ' -> '_', nothing else); a GPU without MIG is that
// name; a MIG device is the GPU's name cut at its first '-', then the MIG
// device's own name from its "mig_" on, less the "mig" ("_1g.10gb+me",
// "_1c.3g.40gb", "_1g.24gb-me": '+', '-' and '.' are kept). Slurm before
// 23.02.6 made the MIG part from nvmlDeviceGetAttributes instead, without
// the +me/-me/+gfx suffixes.
std::string autodetect_gres_type(std::string_view model, std::string_view profile) {
    std::string type = lower(model);
    std::replace(type.begin(), type.end(), ' ', '_');
    if (profile.empty()) {
        return type;
    }
    if (size_t dash = type.find('-'); dash != std::string::npos) {
        type.resize(dash);
    }
    std::string suffix = lower(profile);
    std::replace(suffix.begin(), suffix.end(), ' ', '_');
    return type + "_" + suffix;
}

Result<GresTypeMap> parse_gres_type_map(std::string_view text, std::string_view source) {
    GresTypeMap map;
    for (const auto& [number, words] : word_lines(text)) {
        if (words.size() != 2) {
            return parse_error(source, number, "expected 'GENERATED-TYPE SITE-TYPE'");
        }
        for (std::string_view word : words) {
            bool clean = std::all_of(word.begin(), word.end(), [](char c) {
                return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ||
                       c == '.' || c == '+';
            });
            if (!clean) {
                return parse_error(source, number,
                                   quote(word) + " is not a gres type (letters, digits, _ - . +)");
            }
        }
        if (!map.emplace(std::string(words[0]), std::string(words[1])).second) {
            return parse_error(source, number, quote(words[0]) + " is mapped twice");
        }
    }
    return map;
}

Result<GresPlan> plan_gres(const Machine& machine, const std::vector<MigInstance>& instances,
                           GresTypeStyle style, const GresTypeMap* type_map) {
    GresPlan plan;
    auto name = [&](std::string type) {
        if (type_map != nullptr) {
            if (auto mapped = type_map->find(type); mapped != type_map->end()) {
                return mapped->second;
            }
        }
        return type;
    };
    for (const Gpu& gpu : machine.gpus) {
        std::string node = "/dev/" + gpu_node_name(gpu.minor);
        bool has_instances = false;
        for (const MigInstance& instance : instances) {
            if (instance.gpu_minor != gpu.minor) {
                continue;
            }
            has_instances = true;
            if (instance.profile.empty()) {
                return error("MIG " + instance.key() +
                             " has no known profile, so its gres type "
                             "cannot be named: give nvidia-smi's output (--nvidia-smi-output DIR) "
                             "or run where NVML is installed");
            }
            if (gpu.model.empty()) {
                return error(gpu.subject() + " has no model name in the driver's information "
                                             "file, so its gres type cannot be named");
            }
            std::string type = style == GresTypeStyle::Profile
                                   ? instance.profile
                                   : autodetect_gres_type(gpu.model, instance.profile);
            plan.records.push_back({name(type),
                                    {node, "/dev/" + cap_node_name(instance.gi_cap_minor),
                                     "/dev/" + cap_node_name(instance.ci_cap_minor)},
                                    "MIG " + instance.key()});
        }
        if (!has_instances) {
            if (gpu.model.empty()) {
                return error(gpu.subject() + " has no model name in the driver's information "
                                             "file, so its gres type cannot be named");
            }
            plan.records.push_back({name(autodetect_gres_type(gpu.model)), {node}, gpu.subject()});
        }
    }
    for (const GresRecord& record : plan.records) {
        ++plan.counts[record.type];
    }
    return plan;
}

std::string render_gres_conf(const GresPlan& plan, std::string_view node) {
    std::string out = "# gres.conf written by gpu-mig gres: one line per GPU or MIG instance.\n"
                      "# Rerun it after MIG changes; a changed count needs the node drained.\n";
    std::string prefix = node.empty() ? "" : "NodeName=" + std::string(node) + " ";
    for (const GresRecord& record : plan.records) {
        out += prefix + "Name=gpu Type=" + record.type +
               (record.files.size() == 1 ? " File=" : " MultipleFiles=") + join(record.files, ',') +
               "  # " + record.subject + "\n";
    }
    return out;
}

std::string render_slurm_gres(const GresPlan& plan) {
    std::vector<std::string> parts;
    for (const auto& [type, count] : plan.counts) {
        parts.push_back("gpu:" + type + ":" + std::to_string(count));
    }
    return "Gres=" + join(parts, ',');
}

const char* gres_finding_name(GresFinding::Kind kind) {
    switch (kind) {
    case GresFinding::Kind::MissingFile:
        return "missing-file";
    case GresFinding::Kind::WrongDevice:
        return "wrong-device";
    case GresFinding::Kind::GoneInstance:
        return "gone-instance";
    case GresFinding::Kind::NoCapFiles:
        return "no-cap-files";
    case GresFinding::Kind::NotListed:
        return "not-listed";
    case GresFinding::Kind::CountChange:
        return "count-change";
    }
    return "?";
}

Result<std::vector<GresFinding>> check_gres_conf(std::string_view text, std::string_view source,
                                                 const GresPlan& expected, const Sysroot& root,
                                                 const Machine& machine, std::string_view node) {
    auto configured = parse_gres_conf(text, source, node);
    if (!configured) {
        return configured.error();
    }
    std::set<unsigned> gpu_minors;
    for (const Gpu& gpu : machine.gpus) {
        gpu_minors.insert(gpu.minor);
    }
    std::set<unsigned> cap_minors;
    for (const MigCap& cap : machine.mig.caps) {
        cap_minors.insert(cap.minor);
    }
    std::set<unsigned> mig_gpus;
    for (const GresRecord& record : expected.records) {
        if (record.files.size() > 1) {
            mig_gpus.insert(*device_path_number(record.files[0], "/dev/nvidia"));
        }
    }
    std::vector<GresFinding> findings;
    auto at = [&](size_t line) { return std::string(source) + ":" + std::to_string(line) + ": "; };
    std::set<std::string> seen;
    std::map<std::string, unsigned> counts;
    for (const GresConfRecord& record : *configured) {
        ++counts[record.type];
        seen.insert(join(record.files, ','));
        // A minor the driver does not have is a wrong device (the mistake to
        // fix: the minor), whether or not a file of that name exists.
        for (const std::string& file : record.files) {
            if (auto minor = device_path_number(file, "/dev/nvidia");
                minor && !gpu_minors.count(*minor)) {
                findings.push_back({GresFinding::Kind::WrongDevice, record.line,
                                    at(record.line) + file +
                                        " is no GPU the driver lists (its minors: /proc/"
                                        "driver/nvidia/gpus/*/information; nvidia-smi's "
                                        "index is not the minor)"});
                continue;
            }
            if (auto minor = device_path_number(file, "/dev/nvidia-caps/nvidia-cap");
                minor && !cap_minors.count(*minor)) {
                findings.push_back(
                    {GresFinding::Kind::GoneInstance, record.line,
                     at(record.line) + file +
                         " belongs to no existing MIG instance: rerun gpu-mig gres"});
            }
            if (auto exists = root.exists(strip_slashes(file)); !exists || !*exists) {
                findings.push_back(
                    {GresFinding::Kind::MissingFile, record.line,
                     at(record.line) + file + " does not exist: slurmd skips this device"});
            }
        }
        if (record.files.size() == 1) {
            if (auto minor = device_path_number(record.files[0], "/dev/nvidia");
                minor && mig_gpus.count(*minor)) {
                findings.push_back(
                    {GresFinding::Kind::NoCapFiles, record.line,
                     at(record.line) + record.files[0] +
                         " has MIG instances: list each with MultipleFiles= and its cap files, or "
                         "cgroups constrain nothing"});
            }
        }
    }
    for (const GresRecord& record : expected.records) {
        if (!seen.count(join(record.files, ','))) {
            findings.push_back({GresFinding::Kind::NotListed, 0,
                                std::string(source) + ": no line for " + record.subject + " (" +
                                    join(record.files, ',') + ")"});
        }
    }
    std::set<std::string> types;
    for (const auto& [type, count] : expected.counts) {
        types.insert(type);
    }
    for (const auto& [type, count] : counts) {
        types.insert(type);
    }
    for (const std::string& type : types) {
        unsigned want = expected.counts.count(type) ? expected.counts.at(type) : 0;
        unsigned have = counts.count(type) ? counts.at(type) : 0;
        if (want != have) {
            findings.push_back({GresFinding::Kind::CountChange, 0,
                                format("%s: type %s: %u listed, the machine has %u; changing the "
                                       "count needs the node drained",
                                       std::string(source).c_str(), type.c_str(), have, want)});
        }
    }
    return findings;
}

} // namespace gpuinit
