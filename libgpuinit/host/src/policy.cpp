#include "gpuinit/host/policy.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/accounts.hpp"
#include "gpuinit/host/gpu_information.hpp"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>

namespace gpuinit {

namespace {

constexpr std::string_view kMinorPlaceholder = "{minor}";

// One key=value of a rule. Handlers return an error message, or "" when
// the value is taken.
struct KeyHandler {
    std::string_view key;
    bool names_subject; // gpu= and control=: exactly one per rule
    std::string (*apply)(std::string_view value, Policy::Entry& entry);
};

std::string apply_gpu(std::string_view value, Policy::Entry& entry) {
    if (value == "*") {
        entry.subject = Policy::Subject::AnyGpu;
        return {};
    }
    auto selector = GpuSelector::parse(value);
    if (!selector) {
        return "gpu=" + shorten(value) + " is not a minor (0-253), a PCI address, a GPU UUID or *";
    }
    entry.subject = Policy::Subject::Gpu;
    entry.gpu = std::move(*selector);
    return {};
}

std::string apply_control(std::string_view value, Policy::Entry& entry) {
    if (value == "*") {
        entry.subject = Policy::Subject::AnyControl;
        return {};
    }
    for (std::string_view node : kControlNodes) {
        if (node == value) {
            entry.subject = Policy::Subject::Control;
            entry.control = value;
            return {};
        }
    }
    return "control=" + shorten(value) +
           " is not nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset or *";
}

std::string apply_group(std::string_view value, Policy::Entry& entry) {
    if (account_number(value)) {
        entry.rule.group = value;
        return {};
    }
    std::string check(value);
    if (size_t at = check.find(kMinorPlaceholder); at != std::string::npos) {
        if (check.find(kMinorPlaceholder, at + 1) != std::string::npos) {
            return "group=" + shorten(value) + ": {minor} may appear once";
        }
        // Checked as the widest name it can become: a name that fits with
        // minor 0 could be too long with minor 253.
        check.replace(at, kMinorPlaceholder.size(), std::to_string(kMaxGpuMinor));
    }
    if (!valid_account_name(check)) {
        return "group=" + shorten(value) +
               " is not a valid group name or gid (a number from 0 to 4294967294)";
    }
    entry.rule.group = value;
    return {};
}

std::string apply_mode(std::string_view value, Policy::Entry& entry) {
    auto mode = parse_octal(value, 0777);
    if (!mode || value.size() < 3 || value.front() != '0') {
        return "mode=" + shorten(value) + " is not an octal mode 0000-0777 (such as 0660)";
    }
    entry.rule.mode = static_cast<unsigned>(*mode);
    return {};
}

std::string apply_owner(std::string_view value, Policy::Entry& entry) {
    if (!valid_account_name(value) && !account_number(value)) {
        return "owner=" + shorten(value) +
               " is not a valid user name or uid (a number from 0 to 4294967294)";
    }
    entry.rule.owner = value;
    return {};
}

// GPU-instance and compute-instance ids: the driver has gi0..14, ci0..7.
constexpr unsigned kMaxMigGi = 14;
constexpr unsigned kMaxMigCi = 7;

std::string apply_gi(std::string_view value, Policy::Entry& entry) {
    auto gi = parse_decimal(value, kMaxMigGi);
    if (!gi || (value.size() > 1 && value.front() == '0')) {
        return "gi=" + shorten(value) + " is not a GPU-instance id 0-14";
    }
    entry.gi = static_cast<unsigned>(*gi);
    return {};
}

std::string apply_ci(std::string_view value, Policy::Entry& entry) {
    auto ci = parse_decimal(value, kMaxMigCi);
    if (!ci || (value.size() > 1 && value.front() == '0')) {
        return "ci=" + shorten(value) + " is not a compute-instance id 0-7";
    }
    entry.ci = static_cast<unsigned>(*ci);
    return {};
}

constexpr KeyHandler kKeys[] = {
    {"gpu", true, apply_gpu},    {"control", true, apply_control}, {"group", false, apply_group},
    {"mode", false, apply_mode}, {"owner", false, apply_owner},    {"gi", false, apply_gi},
    {"ci", false, apply_ci},
};

constexpr size_t key_index(std::string_view key) {
    for (size_t i = 0; i < std::size(kKeys); ++i) {
        if (kKeys[i].key == key) {
            return i;
        }
    }
    return std::size(kKeys);
}

bool is_gpu_rule(const Policy::Entry& entry) {
    return entry.subject == Policy::Subject::Gpu || entry.subject == Policy::Subject::AnyGpu;
}

bool is_mig_rule(const Policy::Entry& entry) {
    return entry.gi.has_value();
}

// How specifically `entry` names `gpu`: 0 not at all, 1 gpu=*, 2 minor,
// 3 PCI address, 4 UUID.
int specificity(const Policy::Entry& entry, const GpuIdentity& gpu) {
    if (entry.subject == Policy::Subject::AnyGpu) {
        return 1;
    }
    if (entry.subject != Policy::Subject::Gpu || !entry.gpu->matches(gpu)) {
        return 0;
    }
    switch (entry.gpu->kind()) {
    case GpuSelector::Kind::Uuid:
        return 4;
    case GpuSelector::Kind::Bdf:
        return 3;
    case GpuSelector::Kind::Minor:
        return 2;
    }
    return 0;
}

bool same_subject(const Policy::Entry& a, const Policy::Entry& b) {
    if (a.subject != b.subject) {
        return false;
    }
    if (a.gi != b.gi || a.ci != b.ci) {
        return false;
    }
    if (a.subject == Policy::Subject::Gpu) {
        return a.gpu->same_as(*b.gpu);
    }
    return a.control == b.control;
}

std::string expand_group(const std::string& group, unsigned minor) {
    size_t at = group.find(kMinorPlaceholder);
    if (at == std::string::npos) {
        return group;
    }
    return group.substr(0, at) + std::to_string(minor) +
           group.substr(at + kMinorPlaceholder.size());
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
        auto words = split_words(raw_line.substr(0, raw_line.find('#')));
        if (words.empty()) {
            continue;
        }
        auto fail = [&](std::string what) {
            return parse_error(source, line_number, std::move(what));
        };
        if (words[0].starts_with(kMigLeasesKey) && words[0].size() > kMigLeasesKey.size() &&
            words[0][kMigLeasesKey.size()] == '=') {
            if (words.size() != 1) {
                return fail(std::string(kMigLeasesKey) + "= stands on a line of its own");
            }
            if (policy.mig_leases_per_user_) {
                return fail(format("%s= given twice (also line %zu)",
                                   std::string(kMigLeasesKey).c_str(), policy.mig_leases_line_));
            }
            auto limit =
                parse_decimal(words[0].substr(kMigLeasesKey.size() + 1), kMaxMigLeasesPerUser);
            if (!limit || *limit == 0) {
                return fail(format("%s takes a number of instances from 1 to %u",
                                   quote(words[0]).c_str(), kMaxMigLeasesPerUser));
            }
            policy.mig_leases_per_user_ = static_cast<unsigned>(*limit);
            policy.mig_leases_line_ = line_number;
            continue;
        }
        Entry entry;
        entry.line = line_number;
        entry.rule.origin = policy.source_ + ":" + std::to_string(line_number);
        bool seen[std::size(kKeys)] = {};
        bool have_subject = false;
        for (std::string_view word : words) {
            size_t equals = word.find('=');
            if (equals == std::string_view::npos || equals == 0 || equals + 1 == word.size()) {
                return fail(quote(word) + " is not key=value");
            }
            std::string_view key = word.substr(0, equals);
            const KeyHandler* handler = nullptr;
            for (const KeyHandler& candidate : kKeys) {
                handler = candidate.key == key ? &candidate : handler;
            }
            if (handler == nullptr) {
                return fail("unknown key " + quote(key) +
                            " (expected gpu=, control=, group=, mode=, owner=, gi=, ci=)");
            }
            bool& seen_key = seen[handler - kKeys];
            if (handler->names_subject && have_subject) {
                return fail("a rule names one gpu= or control=, not two");
            }
            if (seen_key) {
                return fail(std::string(key) + "= given twice");
            }
            seen_key = true;
            have_subject = have_subject || handler->names_subject;
            if (std::string problem = handler->apply(word.substr(equals + 1), entry);
                !problem.empty()) {
                return fail(std::move(problem));
            }
        }
        if (!have_subject) {
            return fail("rule names no gpu= or control=");
        }
        if (entry.rule.group.empty()) {
            return fail("rule has no group=");
        }
        if (!is_gpu_rule(entry) && entry.rule.group.find(kMinorPlaceholder) != std::string::npos) {
            return fail("{minor} is only meaningful in gpu= rules");
        }
        if (entry.ci && !entry.gi) {
            return fail("ci= needs the gi= of its GPU instance");
        }
        if (entry.gi && !is_gpu_rule(entry)) {
            return fail("gi= and ci= belong to gpu= rules (a MIG instance of that GPU)");
        }
        if (!seen[key_index("mode")]) {
            entry.rule.mode = is_mig_rule(entry)   ? kDefaultMigMode
                              : is_gpu_rule(entry) ? kDefaultGpuMode
                                                   : kDefaultControlMode;
        }
        for (const Entry& earlier : policy.entries_) {
            if (same_subject(earlier, entry)) {
                return fail(format("same selector as line %zu; keep one of the two", earlier.line));
            }
        }
        policy.entries_.push_back(std::move(entry));
    }
    return policy;
}

Result<Policy> Policy::load(const Sysroot& root) {
    auto present = root.exists(kPolicyPath);
    if (!present) {
        return present.error();
    }
    if (!*present) {
        return classic();
    }
    auto text = root.read_file(kPolicyPath, kMaxPolicyBytes);
    if (!text) {
        return text.error();
    }
    return parse(*text, root.display(kPolicyPath));
}

Result<Policy> Policy::load_file(const std::string& path) {
    // Root may be asked to check a user's file, a symlink to anything: the
    // open of a device acts by itself (/dev/watchdog arms a reboot, a tape
    // rewinds, a FIFO's writer goes on). So the file is looked at through
    // O_PATH, which opens nothing, and only a regular one is then opened,
    // that same inode through /proc/self/fd.
    UniqueFd where(::open(path.c_str(), O_PATH | O_CLOEXEC));
    if (!where.valid()) {
        return errno_error("cannot open the policy " + path);
    }
    struct stat st {};
    if (::fstat(where.get(), &st) != 0) {
        return errno_error("cannot stat the policy " + path);
    }
    if (!S_ISREG(st.st_mode)) {
        return error("the policy " + path + " is not a regular file; name the policy file itself",
                     EINVAL);
    }
    std::string reopen = "/proc/self/fd/" + std::to_string(where.get());
    UniqueFd fd(::open(reopen.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd.valid()) {
        return errno_error("cannot open the policy " + path + " (through " + reopen +
                           ": is /proc mounted?)");
    }
    auto text = read_all(fd.get(), kMaxPolicyBytes, path);
    if (!text) {
        return text.error();
    }
    return parse(*text, path);
}

AccessRule Policy::rule_for_gpu(const GpuIdentity& gpu) const {
    const Entry* best = nullptr;
    int best_rank = 0;
    for (const Entry& entry : entries_) {
        int rank = is_mig_rule(entry) ? 0 : specificity(entry, gpu);
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

std::optional<AccessRule> Policy::rule_for_mig(const GpuIdentity& gpu, unsigned gi,
                                               std::optional<unsigned> ci) const {
    const Entry* best = nullptr;
    int best_rank = 0;
    for (const Entry& entry : entries_) {
        if (entry.gi != gi || (entry.ci && entry.ci != ci)) {
            continue;
        }
        int gpu_rank = specificity(entry, gpu);
        int rank = gpu_rank * 2 + (entry.ci ? 1 : 0);
        if (gpu_rank > 0 && rank > best_rank) {
            best = &entry;
            best_rank = rank;
        }
    }
    if (best == nullptr) {
        return std::nullopt;
    }
    AccessRule rule = best->rule;
    rule.group = expand_group(rule.group, gpu.minor);
    return rule;
}

AccessRule Policy::rule_for_control(std::string_view node) const {
    const Entry* best = nullptr;
    for (const Entry& entry : entries_) {
        if (entry.subject == Subject::Control && entry.control == node) {
            best = &entry;
            break;
        }
        if (entry.subject == Subject::AnyControl) {
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

void Policy::report_unmatched(const std::vector<GpuIdentity>& present,
                              Diagnostics& diagnostics) const {
    for (const Entry& entry : entries_) {
        if (entry.subject != Subject::Gpu) {
            continue;
        }
        bool matched = false;
        for (const GpuIdentity& gpu : present) {
            matched = matched || entry.gpu->matches(gpu);
        }
        if (!matched) {
            diagnostics.warning("gpu=" + entry.gpu->text() +
                                    " matches no GPU the driver has; check the rule",
                                Location::in_file(source_, entry.line));
        }
    }
}

void Policy::report_mig_without_instances(const std::vector<GpuIdentity>& present,
                                          const std::vector<unsigned>& with_instances,
                                          Diagnostics& diagnostics) const {
    for (const Entry& entry : entries_) {
        if (!is_mig_rule(entry)) {
            continue;
        }
        std::string without;
        bool any_with = false;
        for (const GpuIdentity& gpu : present) {
            if (specificity(entry, gpu) == 0) {
                continue;
            }
            bool has = std::find(with_instances.begin(), with_instances.end(), gpu.minor) !=
                       with_instances.end();
            any_with = any_with || has;
            if (!has) {
                without += (without.empty() ? "" : ", ") + std::to_string(gpu.minor);
            }
        }
        if (!any_with && !without.empty()) {
            diagnostics.warning("MIG rule: no MIG instance on GPU " + without +
                                    " (MIG is off, or none was made yet), so the rule applies to"
                                    " nothing now; check gpu= and gi=",
                                Location::in_file(source_, entry.line));
        }
    }
}

} // namespace gpuinit
