// Users and groups, resolved from the root's /etc/passwd and /etc/group by
// parsing them (works in a static binary and under --root). On the real root
// of a dynamic build, names not in the files fall back to NSS, so LDAP and
// SSSD groups work.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <unordered_map>

namespace gpuinit {

// The longest /etc/group line taken (a group with very many members); the
// files themselves are streamed, so their size has no limit.
inline constexpr size_t kMaxAccountLine = 64u << 20;

class AccountDb {
  public:
    // A missing file is an empty table; one that cannot be read, or a line
    // over kMaxAccountLine, is an error naming the file (groups that exist
    // must not turn into "group does not exist"). Malformed lines are
    // skipped, each a warning.
    static Result<AccountDb> load(const Sysroot& root, Diagnostics& diagnostics);
    // For tests: parse the given texts; NSS is never consulted.
    static AccountDb from_text(std::string_view passwd, std::string_view group,
                               Diagnostics& diagnostics);

    std::optional<gid_t> group(std::string_view name) const;
    std::optional<uid_t> user(std::string_view name) const;
    // The user's primary group from the root's /etc/passwd (files only).
    std::optional<gid_t> primary_group(std::string_view user) const;

  private:
    void parse_line(std::string_view line, std::string_view source, size_t number, bool is_group,
                    Diagnostics& diagnostics);

    std::unordered_map<std::string, unsigned> users_;
    std::unordered_map<std::string, unsigned> groups_;
    std::unordered_map<std::string, unsigned> primary_groups_;
    bool use_nss_ = false;
};

// True when `name` is acceptable as a user or group name (no ':', ',',
// whitespace or control characters, not empty, not all digits).
bool valid_account_name(std::string_view name);

} // namespace gpuinit
