#include "gpuinit/status/probes.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/mig/commands.hpp"
#include "gpuinit/mig/names_file.hpp"
#include "gpuinit/persist/client.hpp"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace gpuinit::status {

namespace {

constexpr std::string_view kLimitRunDir = "run/gpu-limit";
constexpr std::string_view kLimitSocket = "run/gpu-limit/daemon.sock";

// Whether the gpu-limit daemon accepts a connection on its socket (the
// registration protocol's SOCK_SEQPACKET; nothing is sent).
Status connect_limit_daemon(const Sysroot& root) {
    std::string path = root.path(kLimitSocket);
    sockaddr_un address{};
    if (path.size() >= sizeof(address.sun_path)) {
        return error(root.display(kLimitSocket) + ": path too long for a unix socket",
                     ENAMETOOLONG);
    }
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.data(), path.size());
    UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
        return errno_error("socket");
    }
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        return errno_error("cannot connect to " + root.display(kLimitSocket));
    }
    return {};
}

bool listed_in(const Sysroot& root, std::string_view dir, std::string_view name,
               bool prefix_match) {
    auto names = root.list_dir(dir);
    if (!names) {
        return false;
    }
    for (const std::string& entry : *names) {
        // rc2.d/S01gpu-persist: S, two digits, the script's name.
        if (prefix_match
                ? entry.size() == name.size() + 3 && entry[0] == 'S' && entry.ends_with(name)
                : entry == name) {
            return true;
        }
    }
    return false;
}

} // namespace

std::string daemon_configured_by(const Sysroot& root, std::string_view unit,
                                 std::string_view sysv_name, std::string_view run_dir) {
    constexpr std::string_view kWants = "etc/systemd/system/multi-user.target.wants";
    if (listed_in(root, kWants, unit, false)) {
        return root.display(std::string(kWants) + "/" + std::string(unit));
    }
    if (!sysv_name.empty() && listed_in(root, "etc/rc2.d", sysv_name, true)) {
        return root.display("etc/rc2.d") + "/S??" + std::string(sysv_name);
    }
    if (auto there = root.exists(run_dir); there && *there) {
        return root.display(run_dir) + " (it ran since boot)";
    }
    return {};
}

Section probe_driver(const Sysroot& root) {
    Diagnostics diagnostics;
    auto check = check_driver(root, diagnostics);
    return assemble_driver(check, diagnostics);
}

Section probe_nodes(const Sysroot& root) {
    MknodOptions options;
    options.dry_run = true;
    return assemble_nodes(run_mknod(root, options));
}

Section probe_persist(const Sysroot& root, std::chrono::milliseconds timeout) {
    PersistFacts facts;
    // Within the probe's deadline, so that a daemon that does not answer is
    // said as such (ETIMEDOUT) rather than as a killed probe.
    auto reply = persist_request(root, ControlRequest{}, static_cast<int>(timeout.count() * 3 / 4));
    if (reply) {
        facts.reply = std::move(reply->reply);
    } else {
        facts.error = reply.error();
    }
    facts.configured_by = daemon_configured_by(root, "gpu-persist.service", "",
                                               std::string(kPersistRunDir) + "/status");
    facts.configured = !facts.configured_by.empty();
    return assemble_persist(facts);
}

Section probe_mig(const Sysroot& root) {
    MigFacts facts;
    // No MIG on this machine (no capability tree): nothing to list.
    auto minors = root.exists("proc/driver/nvidia-caps/mig-minors");
    if (minors && !*minors) {
        facts.uses = InstanceUses{};
        return assemble_mig(facts);
    }
    auto uses = mig::list(root, "", facts.diagnostics);
    if (uses) {
        facts.uses = std::move(*uses);
    } else {
        facts.error = uses.error();
    }
    auto names = read_mig_names_file(root);
    if (names) {
        facts.names_file = std::move(*names);
    } else {
        facts.names_error = names.error();
    }
    return assemble_mig(facts);
}

Section probe_limit(const Sysroot& root) {
    LimitFacts facts;
    if (auto up = connect_limit_daemon(root); up) {
        facts.daemon_up = true;
    } else {
        facts.daemon_error = up.error().message;
    }
    facts.configured =
        !daemon_configured_by(root, "gpu-limit-daemon.service", "gpu-limit-daemon", kLimitSocket)
             .empty();
    auto groups =
        limit::read_status(root.path(kLimitRunDir), std::nullopt, ::geteuid(), facts.diagnostics);
    if (groups) {
        facts.groups = std::move(*groups);
    } else {
        facts.groups_error = groups.error();
    }
    return assemble_limit(facts);
}

Report run_status(const Sysroot& root, const StatusOptions& options) {
    Report report;
    report.timestamp = static_cast<int64_t>(::time(nullptr));
    auto timeout = options.probe_timeout;
    report.sections.push_back(run_with_deadline(
        "driver", [&] { return probe_driver(root); }, timeout));
    report.sections.push_back(run_with_deadline(
        "nodes", [&] { return probe_nodes(root); }, timeout));
    report.sections.push_back(run_with_deadline(
        "persist", [&] { return probe_persist(root, timeout); }, timeout));
    report.sections.push_back(run_with_deadline(
        "mig", [&] { return probe_mig(root); }, timeout));
    report.sections.push_back(run_with_deadline(
        "limit", [&] { return probe_limit(root); }, timeout));
    return report;
}

Status write_textfile(const std::string& file, std::string_view text) {
    size_t slash = file.rfind('/');
    std::string leaf = slash == std::string::npos ? file : file.substr(slash + 1);
    std::string dir = slash == std::string::npos ? "" : file.substr(0, slash);
    if (leaf.empty() || leaf == "." || leaf == "..") {
        return error("--prometheus " + quote(file) + ": name a file", EINVAL);
    }
    bool absolute = file.starts_with('/');
    auto base = Sysroot::open(absolute ? "/" : ".");
    if (!base) {
        return base.error();
    }
    auto directory = SafeDir::open(*base, dir);
    if (!directory) {
        return directory.error();
    }
    return directory->write_atomic(leaf, text, 0644);
}

} // namespace gpuinit::status
