// gpu-persist's start-up and accounts, its signals, what it publishes, and
// run_persist_daemon: the pieces around the loop.
#include "daemon_internal.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/host/accounts.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/host/privileges.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

namespace gpuinit {

namespace persist_daemon {

bool Daemon::refuse_coherent_memory() {
    auto names = root_.list_dir(kDriverGpusPath);
    if (!names) {
        return false;
    }
    for (const std::string& name : *names) {
        std::string rel = std::string(kDriverGpusPath) + "/" + name + "/numa_status";
        auto present = root_.exists(rel);
        if (present && *present) {
            log_.error(format("%s exists: this GPU's memory is onlined as NUMA memory, which "
                              "gpu-persist does not do; use nvidia-persistenced on this machine",
                              root_.display(rel).c_str()));
            return true;
        }
    }
    return false;
}

bool Daemon::resolve_accounts() {
    uid_ = ::geteuid();
    gid_ = ::getegid();
    if (options_.user.empty() && options_.admin_group.empty()) {
        return true;
    }
    Diagnostics diagnostics;
    auto accounts = AccountDb::load(root_, diagnostics);
    if (!accounts) {
        log_.diagnostic(accounts.error());
        return false;
    }
    if (!options_.user.empty()) {
        auto uid = accounts->user(options_.user);
        if (!uid) {
            log_.error("--user " + quote(options_.user) + ": no such user in " +
                       root_.display("etc/passwd") + "; create it (a system user, no login)");
            return false;
        }
        std::optional<gid_t> gid;
        if (!options_.group.empty()) {
            gid = accounts->group(options_.group);
            if (!gid) {
                log_.error("--group " + quote(options_.group) + ": no such group in " +
                           root_.display("etc/group"));
                return false;
            }
        } else {
            gid = accounts->primary_group(options_.user);
            if (!gid) {
                log_.error("--user " + quote(options_.user) + ": its primary group is not in " +
                           root_.display("etc/passwd") + "; give --group");
                return false;
            }
        }
        // nobody is everyone's: what NFS squashes to, and the uid every
        // unmapped uid of a user namespace shows as, so a container's files
        // and processes can be "nobody's" too.
        if (*uid == kOverflowUid || options_.user == "nobody") {
            log_.error("--user " + quote(options_.user) +
                       ": an account others share (nobody, uid 65534) could replace "
                       "gpu-persist's sockets and state; create a system user of its own "
                       "(e.g. gpu-persist)");
            return false;
        }
        uid_ = *uid;
        gid_ = *gid;
        drop_root_ = *uid != ::geteuid();
    }
    if (!options_.admin_group.empty()) {
        admin_gid_ = accounts->group(options_.admin_group);
        if (!admin_gid_) {
            log_.error("--admin-group " + quote(options_.admin_group) + ": no such group in " +
                       root_.display("etc/group"));
            return false;
        }
    }
    return true;
}

// The directories and sockets are --user's: any process of that uid can
// replace the sockets (so answer root's `gpu-persist` and nvidia-smi in the
// daemon's place) and write the state. A uid shared with other programs
// (nobody above all) hands that to them: said at start, with who they are.
void Daemon::warn_shared_user() {
    if (!drop_root_) {
        return;
    }
    auto pids = root_.list_dir("proc");
    if (!pids) {
        return;
    }
    std::vector<std::string> others;
    size_t count = 0;
    const std::string self = std::to_string(::getpid());
    for (const std::string& pid : *pids) {
        if (!parse_decimal(pid) || pid == self) {
            continue;
        }
        auto status = root_.read_file("proc/" + pid + "/status", 8192);
        if (!status) {
            continue;
        }
        for (std::string_view line : split_lines(*status)) {
            if (line.substr(0, 4) != "Uid:") {
                continue;
            }
            // Real, effective, saved, filesystem: any of them.
            for (std::string_view field : split_words(line.substr(4))) {
                auto uid = parse_decimal(field);
                if (uid && *uid == uid_) {
                    ++count;
                    if (others.size() < 3) {
                        auto comm = root_.read_file("proc/" + pid + "/comm", 64);
                        others.push_back(pid + " (" +
                                         (comm ? printable(trim(*comm)) : std::string("?")) + ")");
                    }
                    break;
                }
            }
            break;
        }
    }
    if (count == 0) {
        return;
    }
    std::string listed;
    for (const std::string& other : others) {
        listed += (listed.empty() ? "" : ", ") + other;
    }
    log_.warning(format("--user %s (uid %u) runs %zu other process(es) (%s%s): each can replace "
                        "gpu-persist's sockets and state, and answer root and nvidia-smi in its "
                        "place; give gpu-persist a user of its own",
                        quote(options_.user).c_str(), static_cast<unsigned>(uid_), count,
                        listed.c_str(), count > others.size() ? ", ..." : ""));
}

bool Daemon::prepare_directories() {
    for (auto [rel, slot] :
         {std::pair{kPersistRunDir, &run_dir_}, {kPersistStateDir, &state_dir_}}) {
        auto dir = SafeDir::open(root_, rel, 0755);
        if (!dir) {
            log_.diagnostic(dir.error());
            return false;
        }
        auto st = dir->stat_self();
        if (!st) {
            log_.diagnostic(st.error());
            return false;
        }
        // Only root can create entries in /run and /var/lib: the owner may be
        // root or an earlier daemon's --user, but nobody else may write here.
        if ((st->st_mode & 0022) != 0) {
            log_.error(format("%s has mode %s: writable by others than its owner; remove it",
                              dir->path().c_str(), format_mode(st->st_mode & 07777).c_str()));
            return false;
        }
        slot->emplace(std::move(*dir));
    }
    return true;
}

bool Daemon::take_pid_lock() {
    auto lock = service::PidLock::acquire(*run_dir_, kPersistPidName, uid_, gid_);
    if (!lock) {
        if (lock.error().code == EWOULDBLOCK) {
            log_.error("gpu-persist is " + lock.error().message + "; `gpu-persist status` asks it");
        } else {
            log_.diagnostic(lock.error());
        }
        return false;
    }
    pid_lock_.emplace(std::move(*lock));
    return true;
}

// After the pid lock: a running daemon's directories are never taken over.
bool Daemon::own_directories() {
    for (const std::optional<SafeDir>* dir : {&run_dir_, &state_dir_}) {
        auto st = (*dir)->stat_self();
        if (st && (st->st_uid != uid_ || st->st_gid != gid_)) {
            // The daemon keeps writing here after it dropped root.
            if (auto owned = (*dir)->chown_self(uid_, gid_); !owned) {
                log_.diagnostic(owned.error());
                return false;
            }
        }
    }
    return true;
}

// A process counts as nvidia-persistenced only when root made it so: its
// name is anyone's to choose (prctl PR_SET_NAME, or a link named
// nvidia-persistenced to any program), so besides the name, its executable
// must be a root-owned file nobody else can write, and the process must be
// root's, or be the one the pid file names that nvidia-persistenced writes
// after it dropped to its --user, in the directory root made and gave that
// user (NVIDIA/nvidia-persistenced 595.71.05, nvidia-persistenced.c: mkdir
// NVPD_VAR_RUNTIME_DATA_PATH, chown to --user, setuid, then the pid file and
// the socket).
bool Daemon::counts_as_nvidia_persistenced(const std::string& pid, int proc_fd) {
    struct stat exe {};
    if (proc_fd < 0 || ::fstatat(proc_fd, (pid + "/exe").c_str(), &exe, 0) != 0 ||
        !S_ISREG(exe.st_mode) || exe.st_uid != 0 || (exe.st_mode & 0022) != 0) {
        return false;
    }
    auto status = root_.read_file("proc/" + pid + "/status", 8192);
    if (!status) {
        return false;
    }
    // Real, effective, saved and filesystem uid: all one, or it is not counted.
    std::optional<uid_t> uid;
    for (std::string_view line : split_lines(*status)) {
        if (line.substr(0, 4) != "Uid:") {
            continue;
        }
        std::optional<uint64_t> common;
        bool same = true;
        for (std::string_view field : split_words(line.substr(4))) {
            auto value = parse_decimal(field);
            if (!value || (common && *common != *value)) {
                same = false;
                break;
            }
            common = value;
        }
        if (same && common) {
            uid = static_cast<uid_t>(*common);
        }
        break;
    }
    if (!uid) {
        return false;
    }
    if (*uid == 0) {
        return true;
    }
    auto dir = SafeDir::open(root_, kCompatDir);
    if (!dir) {
        return false;
    }
    auto owner = dir->stat_self();
    auto pid_file = dir->inspect(std::string(kCompatPidName));
    if (!owner || owner->st_uid != *uid || !pid_file || !pid_file->exists ||
        !S_ISREG(pid_file->st.st_mode) || pid_file->st.st_uid != *uid ||
        pid_file->st.st_nlink != 1) {
        return false;
    }
    auto text = root_.read_file(std::string(kCompatDir) + "/" + std::string(kCompatPidName), 64);
    return text && trim(*text) == pid;
}

std::optional<std::string> Daemon::nvidia_persistenced_pid() {
    auto pids = root_.list_dir("proc");
    if (!pids) {
        return std::nullopt;
    }
    auto proc = root_.open_dir("proc");
    for (const std::string& pid : *pids) {
        if (!parse_decimal(pid)) {
            continue;
        }
        auto comm = root_.read_file("proc/" + pid + "/comm", 256);
        if (!comm || trim(*comm) != "nvidia-persiste") {
            continue;
        }
        if (!counts_as_nvidia_persistenced(pid, proc ? proc->get() : -1)) {
            log_.info("process " + pid +
                      " is named nvidia-persistenced, but root did not start it as "
                      "nvidia-persistenced (its executable or owner): not counted");
            continue;
        }
        return pid;
    }
    return std::nullopt;
}

void Daemon::start_compat() {
    if (!options_.nvidia_smi_compat) {
        compat_state_ = "off (--no-nvidia-smi-compat)";
        return;
    }
    // nvidia-persistenced already answers nvidia-smi: leave it its socket.
    if (auto pid = nvidia_persistenced_pid()) {
        auto dir = SafeDir::open(root_, kCompatDir);
        if (dir && service::connect_at(*dir, kCompatSocketName, SOCK_STREAM, true)) {
            compat_state_ = "off (nvidia-persistenced runs as pid " + *pid + ")";
            log_.warning("nvidia-persistenced runs (pid " + *pid +
                         "): not answering nvidia-smi's persistence RPC; stop and disable "
                         "nvidia-persistenced, then restart gpu-persist");
            return;
        }
        log_.warning("nvidia-persistenced runs (pid " + *pid + "), but nothing answers on " +
                     root_.display(std::string(kCompatDir) + "/" + std::string(kCompatSocketName)) +
                     ": answering nvidia-smi's persistence RPC there");
    }
    auto dir = SafeDir::open(root_, kCompatDir, 0755);
    if (!dir) {
        compat_state_ = "off (" + dir.error().message + ")";
        log_.warning("nvidia-smi compatibility off: " + dir.error().text());
        return;
    }
    if (auto st = dir->stat_self(); st && (st->st_uid != uid_ || st->st_gid != gid_)) {
        (void)dir->chown_self(uid_, gid_);
    }
    // Anyone's nvidia-smi may ask (gets); only the host's root may set.
    service::ListenOptions options = kCompatRoom;
    options.mode = 0666;
    options.owner = uid_;
    options.group = gid_;
    auto listener = service::Listener::bind_at(*dir, kCompatSocketName, options);
    if (!listener) {
        compat_state_ = "off (" + listener.error().message + ")";
        log_.warning("nvidia-smi compatibility off: " + listener.error().text());
        return;
    }
    compat_dir_.emplace(std::move(*dir));
    compat_listen_.emplace(std::move(*listener));
    compat_state_ = "on";
}

void Daemon::on_signal(const signalfd_siginfo& info) {
    switch (info.ssi_signo) {
    case SIGTERM:
    case SIGINT:
        log_.info(format("signal %u: releasing every GPU and stopping", info.ssi_signo));
        stopping_ = true;
        break;
    case SIGHUP:
        log_.info("SIGHUP: reading the state file and the driver's GPUs again");
        load_choices();
        rescan();
        break;
    case SIGCHLD:
        if (drop_root_) {
            log_.error("the privileged helper exited: GPUs cannot be opened any more; "
                       "restart gpu-persist");
        }
        break;
    default:
        break;
    }
}

void Daemon::publish() {
    if (!dirty_) {
        return;
    }
    dirty_ = false;
    std::string status = format_control_reply(snapshot(0, {}));
    if (auto written = run_dir_->write_atomic(std::string(kStatusName), status, 0644); !written) {
        log_.warning(written.error().text());
    }
    update_inotify();
    // RPC calls waiting for their GPU to settle.
    std::vector<uint64_t> waiting;
    for (const Connection& connection : connections_) {
        if (connection.pending) {
            waiting.push_back(connection.id);
        }
    }
    for (uint64_t id : waiting) {
        serve_rpc(id);
    }
    update_held_checks();
    // Clients waiting for their change to settle.
    if (table_.settled()) {
        std::vector<uint64_t> ids;
        for (Connection& connection : connections_) {
            if (connection.awaiting_settle) {
                connection.awaiting_settle = false;
                connection.out = format_control_reply(snapshot(0, {}));
                connection.close_after_write = true;
                ids.push_back(connection.id);
            }
        }
        for (uint64_t id : ids) {
            if (Connection* connection = find(id)) {
                flush(*connection);
            }
        }
    }
    std::string line = format("STATUS=holding %zu of %zu GPU(s)", table_.count(HoldState::Held),
                              table_.gpus().size());
    size_t failed = table_.count(HoldState::Failed) + table_.count(HoldState::Lost);
    if (failed > 0) {
        line += format(", %zu failed", failed);
    }
    if (!table_.settled()) {
        line += format(", %zu initializing", table_.count(HoldState::Opening));
    }
    if (!ready_sent_ && table_.settled()) {
        ready_sent_ = true;
        log_.info(line.substr(7));
        (void)notifier_.send("READY=1\n" + line);
        service::report_ready(ready_, partial() ? 2 : 0);
        return;
    }
    (void)notifier_.send(line);
}

bool Daemon::start(UniqueFd ready) {
    ready_ = std::move(ready);
    if (refuse_coherent_memory() || !resolve_accounts() || !prepare_directories() ||
        !take_pid_lock() || !own_directories()) {
        return false;
    }
    warn_shared_user();
    auto notifier = Notifier::from_environment();
    if (!notifier) {
        log_.diagnostic(notifier.error());
        return false;
    }
    notifier_ = std::move(*notifier);
    // Peers are the kernel's processes whatever --root says: the real /proc.
    if (auto host = Sysroot::open("/")) {
        if (auto proc = host->open_dir("proc")) {
            proc_ = std::move(*proc);
        }
    }

    if (auto opened = loop_.open({SIGTERM, SIGINT, SIGHUP, SIGCHLD},
                                 [this](const signalfd_siginfo& info) { on_signal(info); });
        !opened) {
        log_.diagnostic(opened.error());
        return false;
    }
    held_check_timer_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    int pipe[2];
    if (!held_check_timer_.valid() || ::pipe2(pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        log_.error(std::string("cannot set up the event loop: ") + std::strerror(errno));
        return false;
    }
    completion_read_.reset(pipe[0]);
    completion_write_.reset(pipe[1]);
    // The waiter threads block on their write only if the pipe is full,
    // which 64 KiB of 16-byte messages for at most 254 GPUs never is.

    // The control socket: root:admin-group 0660; everyone else reads the
    // status file beside it.
    service::ListenOptions control_options = kControlRoom;
    control_options.mode = 0660;
    control_options.owner = uid_;
    control_options.group = admin_gid_.value_or(0);
    auto control = service::Listener::bind_at(*run_dir_, kPersistSocketName, control_options);
    if (!control) {
        log_.diagnostic(control.error());
        return false;
    }
    control_listen_.emplace(std::move(*control));
    start_compat();

    if (options_.hotplug) {
        auto udev_running = root_.exists("run/udev/control");
        auto source = udev_running && *udev_running ? UeventSource::Udev : UeventSource::Kernel;
        auto monitor = UeventMonitor::open(source);
        if (!monitor && source == UeventSource::Udev) {
            // The root says udevd runs but libudev, which looks at the real
            // /run and /dev, would hear nothing from it (a --root tree):
            // the kernel's events, and the node waited for.
            log_.warning(monitor.error().text() + "; listening to the kernel's uevents");
            monitor = UeventMonitor::open(UeventSource::Kernel);
        }
        if (monitor) {
            monitor_.emplace(std::move(*monitor));
        } else {
            log_.warning(monitor.error().text() +
                         "; GPUs bound later are taken on SIGHUP or `gpu-persist enable GPU`");
        }
    }

    if (drop_root_) {
        auto helper = HelperOpener::start(root_);
        if (!helper) {
            log_.diagnostic(helper.error());
            return false;
        }
        opener_ = std::move(*helper);
        if (auto dropped = drop_privileges(uid_, gid_, {}); !dropped) {
            log_.error("cannot drop to --user " + options_.user + ": " + dropped.error().text());
            return false;
        }
        log_.info(format("running as uid %u gid %u without supplementary groups or "
                         "capabilities; a privileged helper opens the GPUs",
                         static_cast<unsigned>(uid_), static_cast<unsigned>(gid_)));
    } else {
        opener_ = std::make_unique<DirectOpener>(root_);
        log_.info("running as root (no --user)");
    }

    (void)loop_.watch(completion_read_.get(), EPOLLIN, [this](uint32_t) { on_completions(); });
    (void)loop_.watch(control_listen_->fd(), EPOLLIN,
                      [this](uint32_t) { on_accept(*control_listen_, false); });
    (void)loop_.watch(held_check_timer_.get(), EPOLLIN, [this](uint32_t) {
        uint64_t expirations = 0;
        (void)::read(held_check_timer_.get(), &expirations, sizeof(expirations));
        check_held();
    });
    if (compat_listen_) {
        (void)loop_.watch(compat_listen_->fd(), EPOLLIN,
                          [this](uint32_t) { on_accept(*compat_listen_, true); });
    }
    if (monitor_) {
        (void)loop_.watch(monitor_->fd(), EPOLLIN, [this](uint32_t) { on_uevents(); });
    }
    load_choices();
    rescan();
    if (table_.gpus().empty()) {
        log_.warning("the driver lists no GPU (" + root_.display(kDriverGpusPath) +
                     "): holding none until one is bound");
    }
    return true;
}

void Daemon::run() {
    while (!stopping_) {
        publish();
        if (auto done = loop_.run_once(); !done) {
            log_.diagnostic(done.error());
            return;
        }
    }
}

void Daemon::stop() {
    (void)notifier_.send("STOPPING=1");
    for (Connection& connection : connections_) {
        connection.listener->release(connection.peer);
        loop_.forget(connection.fd.get());
        loop_.clear_deadline(connection.id);
    }
    connections_.clear();
    control_listen_.reset();
    compat_listen_.reset();
    (void)run_dir_->unlink(std::string(kPersistSocketName));
    (void)run_dir_->unlink(std::string(kStatusName));
    if (compat_dir_) {
        (void)compat_dir_->unlink(std::string(kCompatSocketName));
    }
    run_actions(table_.release_all());
    if (pid_lock_) {
        pid_lock_->remove();
    }
    log_.info("stopped");
}

} // namespace persist_daemon

DaemonOutcome run_persist_daemon(const PersistOptions& options) {
    Log early("gpu-persist", options.use_syslog || options.daemonize, options.verbosity);
    auto root = Sysroot::open(options.root);
    if (!root) {
        early.diagnostic(root.error());
        return DaemonOutcome::StartFailed;
    }
    UniqueFd ready;
    if (options.daemonize) {
        auto detached = service::detach(ready);
        if (!detached) {
            early.diagnostic(detached.error());
            return DaemonOutcome::StartFailed;
        }
        if (*detached) {
            // The parent: the daemon holds its GPUs, or failed.
            return **detached == 0   ? DaemonOutcome::Stopped
                   : **detached == 2 ? DaemonOutcome::Partial
                                     : DaemonOutcome::StartFailed;
        }
    }
    PersistOptions effective = options;
    effective.use_syslog = options.use_syslog || options.daemonize;
    persist_daemon::Daemon daemon(effective, std::move(*root));
    // Until it has started, a --daemon's errors also reach the caller's terminal.
    daemon.log().set_also_stderr(options.daemonize);
    bool detached = ready.valid();
    bool started = daemon.start(std::move(ready));
    if (options.daemonize) {
        daemon.log().set_also_stderr(false);
        service::close_stdio();
    }
    if (!started) {
        if (detached) {
            daemon.report_failed();
            ::_exit(3);
        }
        return DaemonOutcome::StartFailed;
    }
    daemon.run();
    daemon.stop();
    if (options.daemonize) {
        ::_exit(0);
    }
    return DaemonOutcome::Stopped;
}

} // namespace gpuinit
