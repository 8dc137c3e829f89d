#include "gpuinit/host/accounts.hpp"

#include "gpuinit/base/process.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef GPUINIT_USE_NSS
#define GPUINIT_USE_NSS 0
#endif

#if GPUINIT_USE_NSS
#include <grp.h>
#include <pwd.h>
#include <type_traits>
#include <vector>
#endif

namespace gpuinit {

namespace {

constexpr uint64_t kMaxId = 0xfffffffeu; // (uid_t)-1 means "no change" to chown

#if GPUINIT_USE_NSS
// getgrnam_r(3) and getpwnam_r(3) with a buffer that grows on ERANGE: a
// directory service's group with thousands of members needs far more than a
// first guess, and "too small" must not read as "no such group". Bounded as
// a line of /etc/group is.
template <typename Entry, typename Lookup>
std::optional<unsigned> nss_lookup(const std::string& name, Lookup lookup) {
    std::vector<char> buffer(16384);
    while (true) {
        Entry entry{};
        Entry* found = nullptr;
        int failed = lookup(name.c_str(), &entry, buffer.data(), buffer.size(), &found);
        if (failed == ERANGE && buffer.size() < kMaxAccountLine) {
            buffer.resize(buffer.size() * 2);
            continue;
        }
        if (failed != 0 || found == nullptr) {
            return std::nullopt;
        }
        if constexpr (std::is_same_v<Entry, struct group>) {
            return found->gr_gid;
        } else {
            return found->pw_uid;
        }
    }
}

std::optional<unsigned> nss_group(const std::string& name) {
    return nss_lookup<struct group>(name, getgrnam_r);
}

std::optional<unsigned> nss_user(const std::string& name) {
    return nss_lookup<struct passwd>(name, getpwnam_r);
}
#endif

// getent's answer: "name:password:id:..."; the id of `name`, or nullopt.
std::optional<unsigned> id_from_getent(std::string_view line, std::string_view name) {
    if (!line.starts_with(name) || line.size() <= name.size() || line[name.size()] != ':') {
        return std::nullopt;
    }
    size_t password_end = line.find(':', name.size() + 1);
    if (password_end == std::string_view::npos) {
        return std::nullopt;
    }
    size_t id_end = line.find_first_of(":\n", password_end + 1);
    if (id_end == std::string_view::npos) {
        return std::nullopt;
    }
    auto id = parse_decimal(line.substr(password_end + 1, id_end - password_end - 1), kMaxId);
    if (!id) {
        return std::nullopt;
    }
    return static_cast<unsigned>(*id);
}

} // namespace

std::optional<unsigned> getent_id(const std::string& program, std::string_view database,
                                  std::string_view name, std::chrono::milliseconds timeout,
                                  bool* late) {
    // What getent prints up to the id fits in this; a group with many
    // members is cut there, and the rest is not needed.
    constexpr size_t kMaxAnswer = 4096;
    int fds[2];
    if (name.empty() || ::pipe2(fds, O_CLOEXEC) != 0) {
        return std::nullopt;
    }
    UniqueFd read_end(fds[0]);
    UniqueFd write_end(fds[1]);
    std::string database_arg(database);
    std::string name_arg(name);
    pid_t pid = ::fork();
    if (pid < 0) {
        return std::nullopt;
    }
    if (pid == 0) {
        // The tools are single-threaded here, so the child may allocate
        // before the exec. "--": a name starting with '-' is not an option.
        int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null < 0 || ::dup2(null, STDIN_FILENO) < 0 ||
            ::dup2(write_end.get(), STDOUT_FILENO) < 0 || ::dup2(null, STDERR_FILENO) < 0) {
            ::_exit(127);
        }
        char getent[] = "getent";
        char end_of_options[] = "--";
        char* argv[] = {getent, database_arg.data(), end_of_options, name_arg.data(), nullptr};
        char* envp[] = {nullptr};
        (void)exec_trusted_program(program, argv, envp);
        ::_exit(127);
    }
    write_end.reset();
    std::string answer;
    bool finished = false;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (answer.size() < kMaxAnswer) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        struct pollfd ready = {read_end.get(), POLLIN, 0};
        int polled = left.count() > 0 ? ::poll(&ready, 1, static_cast<int>(left.count())) : 0;
        if (polled < 0 && errno == EINTR) {
            continue;
        }
        if (polled <= 0) {
            break; // late: killed below, and its answer not taken
        }
        char buffer[512];
        ssize_t got = ::read(read_end.get(), buffer, sizeof buffer);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            finished = true;
            break;
        }
        answer.append(buffer, static_cast<size_t>(got));
    }
    bool cut = !finished && answer.size() >= kMaxAnswer;
    if (late != nullptr) {
        *late = !finished && !cut;
    }
    if (!finished) {
        ::kill(pid, SIGKILL);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    bool succeeded = finished && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!succeeded && !cut) {
        return std::nullopt;
    }
    return id_from_getent(answer, name);
}

std::optional<unsigned> account_number(std::string_view name) {
    if (name.empty() || (name.size() > 1 && name.front() == '0')) {
        return std::nullopt;
    }
    auto id = parse_decimal(name, kMaxId);
    if (!id) {
        return std::nullopt;
    }
    return static_cast<unsigned>(*id);
}

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
    // Never under another root: its names are its own files' alone.
    db.use_nss_ = root.is_host();
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
    if (auto gid = account_number(name)) {
        return static_cast<gid_t>(*gid);
    }
    if (auto it = groups_.find(std::string(name)); it != groups_.end()) {
        return static_cast<gid_t>(it->second);
    }
    if (use_nss_) {
        if (auto gid = ask_nss(true, name)) {
            return static_cast<gid_t>(*gid);
        }
    }
    if (name == "root") {
        return 0;
    }
    return std::nullopt;
}

std::optional<uid_t> AccountDb::user(std::string_view name) const {
    if (auto uid = account_number(name)) {
        return static_cast<uid_t>(*uid);
    }
    if (auto it = users_.find(std::string(name)); it != users_.end()) {
        return static_cast<uid_t>(it->second);
    }
    if (use_nss_) {
        if (auto uid = ask_nss(false, name)) {
            return static_cast<uid_t>(*uid);
        }
    }
    if (name == "root") {
        return 0;
    }
    return std::nullopt;
}

std::optional<unsigned> AccountDb::ask_nss(bool is_group, std::string_view name) const {
    auto& cache = nss_cache_[is_group ? 1 : 0];
    std::string key(name);
    if (auto it = cache.find(key); it != cache.end()) {
        return it->second;
    }
#if GPUINIT_USE_NSS
    std::optional<unsigned> id = is_group ? nss_group(key) : nss_user(key);
#else
    // A directory service that did not answer in time is not asked again in
    // this run: with a name per GPU, a hung LDAP server would otherwise cost
    // every name its timeout, past udev's event timeout.
    if (nss_unanswered_) {
        return std::nullopt;
    }
    bool late = false;
    std::optional<unsigned> id = getent_id(std::string(kGetentPath), is_group ? "group" : "passwd",
                                           name, kGetentTimeout, &late);
    nss_unanswered_ = late;
#endif
    cache.emplace(std::move(key), id);
    return id;
}

std::optional<gid_t> AccountDb::primary_group(std::string_view user) const {
    if (auto it = primary_groups_.find(std::string(user)); it != primary_groups_.end()) {
        return static_cast<gid_t>(it->second);
    }
    return std::nullopt;
}

} // namespace gpuinit
