#include "gpuinit/host/accounts.hpp"

#include "gpuinit/base/text.hpp"

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

AccountDb AccountDb::load(const Sysroot& root) {
    AccountDb db;
    if (auto passwd = root.read_file("etc/passwd")) {
        db.parse(*passwd, root.display("etc/passwd"), false);
    }
    if (auto group = root.read_file("etc/group")) {
        db.parse(*group, root.display("etc/group"), true);
    }
    db.use_nss_ = GPUINIT_USE_NSS && root.is_host();
    return db;
}

AccountDb AccountDb::from_text(std::string_view passwd, std::string_view group) {
    AccountDb db;
    db.parse(passwd, "passwd", false);
    db.parse(group, "group", true);
    return db;
}

void AccountDb::parse(std::string_view text, std::string_view source, bool is_group) {
    auto& table = is_group ? groups_ : users_;
    size_t line_number = 0;
    for (std::string_view line : split_lines(text)) {
        ++line_number;
        if (trim(line).empty() || line.front() == '#') {
            continue;
        }
        // name:password:id:...; only the first three fields matter here.
        size_t first = line.find(':');
        size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
        size_t third = second == std::string_view::npos ? second : line.find(':', second + 1);
        if (third == std::string_view::npos) {
            third = line.size();
        }
        if (second == std::string_view::npos) {
            warnings_.push_back(format("%.*s:%zu: malformed line skipped",
                                       static_cast<int>(source.size()), source.data(),
                                       line_number));
            continue;
        }
        std::string_view name = line.substr(0, first);
        auto id = parse_decimal(line.substr(second + 1, third - second - 1), kMaxId);
        if (!valid_account_name(name) || !id) {
            warnings_.push_back(format("%.*s:%zu: malformed line skipped",
                                       static_cast<int>(source.size()), source.data(),
                                       line_number));
            continue;
        }
        // The first entry wins, as in getgrnam(3) over files.
        table.emplace(std::string(name), static_cast<unsigned>(*id));
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

} // namespace gpuinit
