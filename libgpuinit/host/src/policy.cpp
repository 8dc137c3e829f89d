#include "gpuinit/host/policy.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/accounts.hpp"
#include "gpuinit/host/pci.hpp"
#include "gpuinit/host/procfs.hpp"

#include <cerrno>
#include <strings.h>

namespace gpuinit {

namespace {

constexpr std::string_view kMinorPlaceholder = "{minor}";

Error line_error(std::string_view source, size_t line, const std::string& what) {
    return Error{EINVAL, format("%.*s:%zu: %s", static_cast<int>(source.size()), source.data(),
                                line, what.c_str())};
}

bool same_uuid(std::string_view a, std::string_view b) {
    return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

std::string expand_group(const std::string& group, unsigned minor) {
    size_t at = group.find(kMinorPlaceholder);
    if (at == std::string::npos) {
        return group;
    }
    return group.substr(0, at) + std::to_string(minor) +
           group.substr(at + kMinorPlaceholder.size());
}

bool is_control_node(std::string_view name) {
    for (std::string_view node : kControlNodes) {
        if (node == name) {
            return true;
        }
    }
    return false;
}

// How specifically `entry` names `gpu`: 0 not at all, 1 gpu=*, 2 minor,
// 3 PCI address, 4 UUID.
int specificity(const Policy::Entry& entry, const GpuIdentity& gpu) {
    switch (entry.selector) {
    case Policy::Selector::Uuid:
        return !gpu.uuid.empty() && same_uuid(entry.key, gpu.uuid) ? 4 : 0;
    case Policy::Selector::Bdf:
        return entry.key == gpu.bdf ? 3 : 0;
    case Policy::Selector::Minor:
        return entry.minor == gpu.minor ? 2 : 0;
    case Policy::Selector::AnyGpu:
        return 1;
    default:
        return 0;
    }
}

std::string origin_of(const std::string& source, size_t line) {
    return source + ":" + std::to_string(line);
}

} // namespace

Policy Policy::classic() {
    return Policy();
}

Result<Policy> Policy::parse(std::string_view text, std::string_view source) {
    Policy policy;
    policy.source_ = std::string(source);
    policy.from_file_ = true;
    size_t line_number = 0;
    for (std::string_view raw_line : split_lines(text)) {
        ++line_number;
        std::string_view line = raw_line.substr(0, raw_line.find('#'));
        auto words = split_words(line);
        if (words.empty()) {
            continue;
        }
        Entry entry;
        entry.line = line_number;
        entry.rule.origin = origin_of(policy.source_, line_number);
        bool have_selector = false;
        bool have_group = false;
        bool have_mode = false;
        bool have_owner = false;
        for (std::string_view word : words) {
            size_t equals = word.find('=');
            if (equals == std::string_view::npos || equals == 0 || equals + 1 == word.size()) {
                return line_error(source, line_number,
                                  "'" + std::string(word) + "' is not key=value");
            }
            std::string_view key = word.substr(0, equals);
            std::string_view value = word.substr(equals + 1);
            if (key == "gpu" || key == "control") {
                if (have_selector) {
                    return line_error(source, line_number,
                                      "a rule names one gpu= or control=, not two");
                }
                have_selector = true;
                if (key == "control") {
                    if (value == "*") {
                        entry.selector = Selector::AnyControl;
                    } else if (is_control_node(value)) {
                        entry.selector = Selector::Control;
                        entry.key = value;
                    } else {
                        return line_error(source, line_number,
                                          "control=" + std::string(value) +
                                              " is not nvidiactl, nvidia-uvm, nvidia-uvm-tools,"
                                              " nvidia-modeset or *");
                    }
                } else if (value == "*") {
                    entry.selector = Selector::AnyGpu;
                } else if (auto minor = parse_decimal(value, kMaxGpuMinor)) {
                    entry.selector = Selector::Minor;
                    entry.minor = static_cast<unsigned>(*minor);
                } else if (auto bdf = normalize_bdf(value)) {
                    entry.selector = Selector::Bdf;
                    entry.key = *bdf;
                } else if (starts_with(value, "GPU-") && value.size() > 4 && value.size() <= 64) {
                    entry.selector = Selector::Uuid;
                    entry.key = value;
                } else {
                    return line_error(source, line_number,
                                      "gpu=" + std::string(value) +
                                          " is not a minor (0-253), a PCI address, a GPU UUID"
                                          " or *");
                }
            } else if (key == "group") {
                std::string group(value);
                std::string check = group;
                if (size_t at = check.find(kMinorPlaceholder); at != std::string::npos) {
                    check.replace(at, kMinorPlaceholder.size(), "0");
                }
                if (have_group || !valid_account_name(check)) {
                    return line_error(source, line_number,
                                      have_group ? "group= given twice"
                                                 : "group=" + group + " is not a valid group name");
                }
                entry.rule.group = std::move(group);
                have_group = true;
            } else if (key == "mode") {
                auto mode = parse_octal(value, 0777);
                if (have_mode || !mode || value.size() < 3 || value.front() != '0') {
                    return line_error(source, line_number,
                                      have_mode ? "mode= given twice"
                                                : "mode=" + std::string(value) +
                                                      " is not an octal mode 0000-0777 (such as"
                                                      " 0660)");
                }
                entry.rule.mode = static_cast<unsigned>(*mode);
                have_mode = true;
            } else if (key == "owner") {
                if (have_owner || !valid_account_name(value)) {
                    return line_error(source, line_number,
                                      have_owner ? "owner= given twice"
                                                 : "owner=" + std::string(value) +
                                                       " is not a valid user name");
                }
                entry.rule.owner = value;
                have_owner = true;
            } else {
                return line_error(source, line_number,
                                  "unknown key '" + std::string(key) +
                                      "' (expected gpu=, control=, group=, mode=, owner=)");
            }
        }
        if (!have_selector) {
            return line_error(source, line_number, "rule names no gpu= or control=");
        }
        if (!have_group) {
            return line_error(source, line_number, "rule has no group=");
        }
        bool for_gpu =
            entry.selector != Selector::Control && entry.selector != Selector::AnyControl;
        if (!for_gpu && entry.rule.group.find(kMinorPlaceholder) != std::string::npos) {
            return line_error(source, line_number, "{minor} is only meaningful in gpu= rules");
        }
        if (!have_mode) {
            entry.rule.mode = for_gpu ? kDefaultGpuMode : kDefaultControlMode;
        }
        for (const Entry& earlier : policy.entries_) {
            // UUIDs match case-insensitively, so GPU-AAAA and GPU-aaaa are one selector.
            bool same_key = entry.selector == Selector::Uuid ? same_uuid(earlier.key, entry.key)
                                                             : earlier.key == entry.key;
            if (earlier.selector == entry.selector && same_key && earlier.minor == entry.minor) {
                return line_error(
                    source, line_number,
                    format("same selector as line %zu; keep one of the two", earlier.line));
            }
        }
        policy.entries_.push_back(std::move(entry));
    }
    return policy;
}

Result<Policy> Policy::load(const Sysroot& root) {
    if (!root.exists(kPolicyPath)) {
        return classic();
    }
    auto text = root.read_file(kPolicyPath, 1u << 20);
    if (!text) {
        return text.error();
    }
    return parse(*text, root.display(kPolicyPath));
}

AccessRule Policy::rule_for_gpu(const GpuIdentity& gpu) const {
    const Entry* best = nullptr;
    int best_rank = 0;
    for (const Entry& entry : entries_) {
        int rank = specificity(entry, gpu);
        if (rank > best_rank) {
            best = &entry;
            best_rank = rank;
        }
    }
    AccessRule rule;
    if (best == nullptr) {
        rule.group = "nvidia" + std::to_string(gpu.minor);
        rule.mode = kDefaultGpuMode;
        rule.origin = "built-in default";
        return rule;
    }
    rule = best->rule;
    rule.group = expand_group(rule.group, gpu.minor);
    return rule;
}

AccessRule Policy::rule_for_control(std::string_view node) const {
    const Entry* best = nullptr;
    for (const Entry& entry : entries_) {
        if (entry.selector == Selector::Control && entry.key == node) {
            best = &entry;
            break;
        }
        if (entry.selector == Selector::AnyControl) {
            best = &entry;
        }
    }
    if (best != nullptr) {
        return best->rule;
    }
    AccessRule rule;
    rule.group = "root";
    rule.mode = kDefaultControlMode;
    rule.origin = "built-in default";
    return rule;
}

std::vector<std::string> Policy::unmatched(const std::vector<GpuIdentity>& present) const {
    std::vector<std::string> messages;
    for (const Entry& entry : entries_) {
        if (entry.selector != Selector::Uuid && entry.selector != Selector::Bdf &&
            entry.selector != Selector::Minor) {
            continue;
        }
        bool matched = false;
        for (const GpuIdentity& gpu : present) {
            matched = matched || specificity(entry, gpu) > 0;
        }
        if (!matched) {
            std::string shown =
                entry.selector == Selector::Minor ? std::to_string(entry.minor) : entry.key;
            messages.push_back(entry.rule.origin + ": gpu=" + shown +
                               " matches no GPU the driver has; check the rule");
        }
    }
    return messages;
}

} // namespace gpuinit
