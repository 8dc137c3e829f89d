// Users and groups, resolved from the root's /etc/passwd and /etc/group by
// parsing them (works in a static binary and under --root). On the real
// root, names not in the files fall back to NSS, so LDAP and SSSD groups
// work: getgrnam_r in a dynamic build, getent(1) in the static one.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <chrono>
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

    // An all-digit name is the id itself (account_number), found or not:
    // a directory service's group the files do not hold can be named so.
    std::optional<gid_t> group(std::string_view name) const;
    std::optional<uid_t> user(std::string_view name) const;
    // The user's primary group from the root's /etc/passwd (files only).
    std::optional<gid_t> primary_group(std::string_view user) const;

  private:
    std::optional<unsigned> ask_nss(bool is_group, std::string_view name) const;
    void parse_line(std::string_view line, std::string_view source, size_t number, bool is_group,
                    Diagnostics& diagnostics);

    std::unordered_map<std::string, unsigned> users_;
    std::unordered_map<std::string, unsigned> groups_;
    std::unordered_map<std::string, unsigned> primary_groups_;
    // On the running system: names the files do not hold are asked of NSS
    // (getgrnam_r, or getent in the static build), each once.
    bool use_nss_ = false;
    mutable std::unordered_map<std::string, std::optional<unsigned>> nss_cache_[2];
    mutable bool nss_unanswered_ = false; // getent was killed at its timeout
};

// getent(1), which the static build asks for names that only NSS serves
// (it has no NSS of its own), and how long it may take.
inline constexpr std::string_view kGetentPath = "/usr/bin/getent";
inline constexpr std::chrono::milliseconds kGetentTimeout{5000};

// The id that `program` (getent) gives `name` in `database` ("group" or
// "passwd"): run only when it is root's alone (exec_trusted_program), with
// an empty environment, killed after `timeout`; its one line must name
// `name`. nullopt when it cannot run, fails, is late or answers otherwise;
// `late`, when given, says whether it was killed at the timeout.
std::optional<unsigned> getent_id(const std::string& program, std::string_view database,
                                  std::string_view name, std::chrono::milliseconds timeout,
                                  bool* late = nullptr);

// "1234" -> 1234: an all-digit name in the policy is a uid or gid, without a
// leading zero and below 4294967295 ((uid_t)-1 means "no change" to chown).
std::optional<unsigned> account_number(std::string_view name);

// True when `name` is acceptable as a user or group name (no ':', ',',
// whitespace or control characters, not empty, not all digits).
bool valid_account_name(std::string_view name);

} // namespace gpuinit
