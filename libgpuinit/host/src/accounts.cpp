#include "gpuinit/host/accounts.hpp"

#include "gpuinit/base/text.hpp"

#include <cerrno>

#ifndef GPUINIT_USE_NSS
#define GPUINIT_USE_NSS 0
#endif

#if GPUINIT_USE_NSS
#include <grp.h>
#include <pwd.h>
#include <vector>
#endif

namespace gpuinit {

namespace {

constexpr uint64_t kMaxId = 0xfffffffeu; // (uid_t)-1 means "no change" to chown

#if GPUINIT_USE_NSS
std::optional<unsigned> nss_group(const std::string& name) {
    std::vector<char> buffer(16384);
    struct group entry {};
    struct group* found = nullptr;
    if (getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
        found == nullptr) {
        return std::nullopt;
    }
    return found->gr_gid;
}

std::optional<unsigned> nss_user(const std::string& name) {
    std::vector<char> buffer(16384);
    struct passwd entry {};
    struct passwd* found = nullptr;
    if (getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
        found == nullptr) {
        return std::nullopt;
    }
    return found->pw_uid;
}
#endif

} // namespace

bool valid_account_name(std::string_view name) {
    if (name.empty() || name.size() > 256) {
        return false;
    }
    bool all_digits = true;
    for (unsigned char c : name) {
        if (c <= 0x20 || c == ':' || c == 0x7f || c == ',') {
            return false;
        }
        all_digits = all_digits && c >= '0' && c <= '9';
    }
    return !all_digits;
}

Result<AccountDb> AccountDb::load(const Sysroot& root, Diagnostics& diagnostics) {
    AccountDb db;
    for (bool is_group : {false, true}) {
        const char* rel = is_group ? "etc/group" : "etc/passwd";
        std::string source = root.display(rel);
        Status read = root.for_each_line(
            rel, kMaxAccountLine, [&](std::string_view line, size_t number) -> Status {
                db.parse_line(line, source, number, is_group, diagnostics);
                return {};
            });
        if (!read && read.error().code != ENOENT) {
            Diagnostic failed = read.error();
            failed.message += "; users and groups cannot be resolved, so no node is changed to"
                              " them (fix the file and rerun)";
            return failed;
        }
    }
    db.use_nss_ = GPUINIT_USE_NSS && root.is_host();
    return db;
}

AccountDb AccountDb::from_text(std::string_view passwd, std::string_view group,
                               Diagnostics& diagnostics) {
    AccountDb db;
    for (bool is_group : {false, true}) {
        size_t number = 0;
        for (std::string_view line : split_lines(is_group ? group : passwd)) {
            db.parse_line(line, is_group ? "group" : "passwd", ++number, is_group, diagnostics);
        }
    }
    return db;
}

void AccountDb::parse_line(std::string_view line, std::string_view source, size_t number,
                           bool is_group, Diagnostics& diagnostics) {
    if (trim(line).empty() || line.front() == '#') {
        return;
    }
    // name:password:id:...; only the first three fields matter here.
    size_t first = line.find(':');
    size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    size_t third = second == std::string_view::npos ? second : line.find(':', second + 1);
    if (third == std::string_view::npos) {
        third = line.size();
    }
    std::optional<uint64_t> id;
    std::string_view name;
    if (second != std::string_view::npos) {
        name = line.substr(0, first);
        id = parse_decimal(line.substr(second + 1, third - second - 1), kMaxId);
    }
    if (!id || !valid_account_name(name)) {
        diagnostics.warning("malformed line skipped",
                            Location::in_file(std::string(source), number));
        return;
    }
    // The first entry wins, as in getgrnam(3) over files.
    (is_group ? groups_ : users_).emplace(std::string(name), static_cast<unsigned>(*id));
    if (!is_group && third < line.size()) {
        size_t fourth = line.find(':', third + 1);
        std::string_view gid_text =
            line.substr(third + 1, fourth == std::string_view::npos ? std::string_view::npos
                                                                    : fourth - third - 1);
        if (auto gid = parse_decimal(gid_text, kMaxId)) {
            primary_groups_.emplace(std::string(name), static_cast<unsigned>(*gid));
        }
    }
}

std::optional<gid_t> AccountDb::group(std::string_view name) const {
    if (auto it = groups_.find(std::string(name)); it != groups_.end()) {
        return static_cast<gid_t>(it->second);
    }
#if GPUINIT_USE_NSS
    if (use_nss_) {
        if (auto gid = nss_group(std::string(name))) {
            return static_cast<gid_t>(*gid);
        }
    }
#endif
    if (name == "root") {
        return 0;
    }
    return std::nullopt;
}

std::optional<uid_t> AccountDb::user(std::string_view name) const {
    if (auto it = users_.find(std::string(name)); it != users_.end()) {
        return static_cast<uid_t>(it->second);
    }
#if GPUINIT_USE_NSS
    if (use_nss_) {
        if (auto uid = nss_user(std::string(name))) {
            return static_cast<uid_t>(*uid);
        }
    }
#endif
    if (name == "root") {
        return 0;
    }
    return std::nullopt;
}

std::optional<gid_t> AccountDb::primary_group(std::string_view user) const {
    if (auto it = primary_groups_.find(std::string(user)); it != primary_groups_.end()) {
        return static_cast<gid_t>(it->second);
    }
    return std::nullopt;
}

} // namespace gpuinit
