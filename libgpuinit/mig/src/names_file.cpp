#include "gpuinit/mig/names_file.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/mig/leases.hpp"

#include <unistd.h>

namespace gpuinit {

namespace {

constexpr std::string_view kUnknown = "-";
constexpr mode_t kNamesMode = 0444;

std::string_view or_unknown(const std::string& value) {
    return value.empty() ? kUnknown : std::string_view(value);
}

} // namespace

std::string render_mig_names_file(const std::vector<MigInstance>& instances,
                                  std::string_view source) {
    std::string text = "# gpu-mig names: written by gpu-mig sync from " + std::string(source) +
                       "\n# GPU-UUID GI CI PROFILE MIG-UUID ('-': unknown)\n";
    for (const MigInstance& instance : instances) {
        if (instance.gpu_uuid.empty()) {
            continue; // nothing to join it by
        }
        text += format("%s %u %u ", instance.gpu_uuid.c_str(), instance.gi, instance.ci) +
                std::string(or_unknown(instance.profile)) + " " +
                std::string(or_unknown(instance.uuid)) + "\n";
    }
    return text;
}

Result<MigNames> parse_mig_names_file(std::string_view text, std::string_view source) {
    MigNames names{std::string(source)};
    for (const auto& [number, words] : word_lines(text)) {
        if (words.size() != 5) {
            return parse_error(source, number, "expected 'GPU-UUID GI CI PROFILE MIG-UUID'");
        }
        auto gi = parse_decimal(words[1], 1u << 16);
        auto ci = parse_decimal(words[2], 1u << 16);
        if (!gi || !ci) {
            return parse_error(source, number, "the GI and CI ids must be numbers");
        }
        // A copy: clang (the fuzz build) cannot capture a structured binding.
        size_t line = number;
        auto at_line = [&](const Diagnostic& failure) {
            return parse_error(source, line, failure.message);
        };
        if (words[3] != kUnknown) {
            if (auto added = names.add_profile(words[0], static_cast<unsigned>(*gi),
                                               static_cast<unsigned>(*ci), words[3]);
                !added) {
                return at_line(added.error());
            }
        }
        if (words[4] != kUnknown) {
            if (auto added = names.add_uuid(words[0], static_cast<unsigned>(*gi),
                                            static_cast<unsigned>(*ci), words[4]);
                !added) {
                return at_line(added.error());
            }
        }
    }
    return names;
}

Status write_mig_names_file(const Sysroot& root, std::string_view text) {
    auto dir = SafeDir::open(root, kMigLeaseDir);
    if (!dir) {
        return dir.error();
    }
    auto st = dir->stat_self();
    if (!st) {
        return st.error();
    }
    if (st->st_uid != ::geteuid() || (st->st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return error(format("%s is owned by uid %u with mode %s: not what gpu-mig sync makes; "
                            "remove it and rerun",
                            dir->path().c_str(), st->st_uid,
                            format_mode(st->st_mode & 07777).c_str()),
                     EPERM);
    }
    return dir->write_atomic(std::string(kMigNamesFile), text, kNamesMode);
}

Result<std::optional<MigNames>> read_mig_names_file(const Sysroot& root) {
    auto dir = LeaseDir::open(root);
    if (!dir) {
        if (dir.error().reason == static_cast<int>(LeaseFailure::Missing)) {
            return std::optional<MigNames>();
        }
        return dir.error();
    }
    auto text = dir->read_file(kMigNamesFile, kMigNamesFileLimit);
    if (!text) {
        return text.error();
    }
    if (!*text) {
        return std::optional<MigNames>();
    }
    auto names = parse_mig_names_file(**text, dir->path_of(kMigNamesFile));
    if (!names) {
        return names.error();
    }
    return std::optional<MigNames>(std::move(*names));
}

bool mig_names_cover(const MigNames& names, const std::vector<MigInstance>& instances) {
    for (const MigInstance& instance : instances) {
        const MigName* name = names.find(instance.gpu_uuid, instance.gi, instance.ci);
        if (name == nullptr || name->profile.empty() || name->uuid.empty()) {
            return false;
        }
    }
    return true;
}

} // namespace gpuinit
