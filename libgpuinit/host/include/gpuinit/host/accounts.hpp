// Users and groups, resolved from the root's /etc/passwd and /etc/group by
// parsing them (works in a static binary and under --root). On the real root
// of a dynamic build, names not in the files fall back to NSS, so LDAP and
// SSSD groups work.
#pragma once

#include "gpuinit/fs/sysroot.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <unordered_map>
#include <vector>

namespace gpuinit {

class AccountDb {
  public:
    // Never fails: a missing file is an empty table, a malformed line is
    // skipped and reported in warnings().
    static AccountDb load(const Sysroot& root);
    // For tests: parse the given texts; NSS is never consulted.
    static AccountDb from_text(std::string_view passwd, std::string_view group);

    std::optional<gid_t> group(std::string_view name) const;
    std::optional<uid_t> user(std::string_view name) const;
    const std::vector<std::string>& warnings() const { return warnings_; }

  private:
    void parse(std::string_view text, std::string_view source, bool is_group);

    std::unordered_map<std::string, unsigned> users_;
    std::unordered_map<std::string, unsigned> groups_;
    std::vector<std::string> warnings_;
    bool use_nss_ = false;
};

// True when `name` is acceptable as a user or group name (no ':', no
// whitespace or control characters, not empty, not all digits).
bool valid_account_name(std::string_view name);

} // namespace gpuinit
