#include "gpuinit/persist/daemon.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/accounts.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/host/pci.hpp"
#include "gpuinit/host/privileges.hpp"
#include "gpuinit/persist/control.hpp"
#include "gpuinit/persist/gpu_open.hpp"
#include "gpuinit/persist/gpu_table.hpp"
#include "gpuinit/persist/rpc.hpp"
#include "gpuinit/persist/service.hpp"
#include "gpuinit/persist/uevent.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <list>
#include <map>
#include <memory>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace gpuinit {

namespace {

using Clock = std::chrono::steady_clock;

// A slow or stuck client is dropped after this; a client waiting for an
// enable to finish initializing a GPU gets its reply or this much later.
constexpr auto kRequestDeadline = std::chrono::seconds(5);
constexpr auto kSettleDeadline = std::chrono::seconds(120);
constexpr size_t kMaxConnections = 64;
// The RPC socket is every user's (0666): other users' connections to it
// get at most half of the above, one user at most a few, so that root's
// control requests and nvidia-smi, and the other users', still get in.
constexpr size_t kMaxUnprivilegedRpcConnections = kMaxConnections / 2;
constexpr size_t kMaxRpcConnectionsPerUser = 8;
constexpr size_t kMaxPendingOutput = size_t{256} << 10;
constexpr std::string_view kStatusName = "status";
constexpr std::string_view kCompatDir = "run/nvidia-persistenced";
constexpr std::string_view kCompatSocketName = "socket";

// epoll tags: the kind in the top byte, an id below.
enum Tag : uint64_t {
    kTagSignal = 1ULL << 56,
    kTagCompletion = 2ULL << 56,
    kTagControlListen = 3ULL << 56,
    kTagCompatListen = 4ULL << 56,
    kTagTimer = 5ULL << 56,
    kTagUevent = 6ULL << 56,
    kTagInotify = 7ULL << 56,
    kTagHeldCheck = 8ULL << 56,
    kTagConnection = 9ULL << 56,
};
constexpr uint64_t kTagMask = 0xffULL << 56;

struct Completion {
    uint64_t id;
    int32_t code;
    int32_t padding;
};

struct HeldFd {
    UniqueFd fd;
    unsigned minor = 0;
    uint64_t id = 0;
    bool waiting = false;         // an init waiter thread uses the fd
    bool close_when_done = false; // released while waiting
};

// An RPC call being answered: nvidia-persistenced answers a set once the
// GPU is open, so the call waits for the GPU to settle.
struct PendingRpc {
    RpcCall call;
    bool applied = false;   // its enable or disable has been carried out
    bool rescanned = false; // the GPUs were listed again for it
};

struct Connection {
    uint64_t id = 0;
    UniqueFd fd;
    bool rpc = false;
    PeerCredentials peer;
    std::string in;
    std::string out;
    RpcRecordReader reader;
    std::optional<PendingRpc> pending; // an RPC call waiting; the calls after it wait too
    bool peer_closed = false;          // an RPC client half-closed: answer, then close
    Clock::time_point deadline;
    bool awaiting_settle = false; // a change whose GPUs are still initializing
    bool close_after_write = false;
    bool want_write = false;
    bool reading = true;    // EPOLLIN is registered
    bool registered = true; // the fd is in epoll
};

PeerCredentials peer_of(int fd) {
    PeerCredentials peer;
    ucred credentials{};
    socklen_t size = sizeof(credentials);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) == 0) {
        peer.pid = credentials.pid;
        peer.uid = credentials.uid;
        peer.gid = credentials.gid;
    } else {
        peer.uid = static_cast<uid_t>(-1); // unknown: treated as nobody
        peer.gid = static_cast<gid_t>(-1);
    }
#ifdef SO_PEERGROUPS
    // ERANGE says how much room the peer's groups need: ask again with it.
    std::vector<gid_t> groups(64);
    for (int attempt = 0; attempt < 2; ++attempt) {
        auto length = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
        if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &length) == 0) {
            groups.resize(length / sizeof(gid_t));
            peer.groups = std::move(groups);
            break;
        }
        if (errno != ERANGE || length <= groups.size() * sizeof(gid_t)) {
            break;
        }
        groups.resize(length / sizeof(gid_t));
    }
#endif
    return peer;
}

class Daemon {
  public:
    Daemon(const PersistOptions& options, Sysroot root)
        : options_(options), root_(std::move(root)), log_("gpu-persist", options.use_syslog, options.verbosity) {}

    // Everything that needs root; false when it cannot start (reported).
    bool start(int ready_fd);
    void run();
    void stop();
    bool partial() const { return table_.count(HoldState::Failed) > 0; }
    const Log& log() const { return log_; }
    Log& log() { return log_; }

    Result<GpuTable::Actions> change(const ControlRequest& request);

  private:
    bool refuse_coherent_memory();
    bool resolve_accounts();
    bool prepare_directories();
    bool take_pid_lock();
    bool own_directories();
    Result<UniqueFd> listen_at(const SafeDir& dir, std::string_view name, mode_t mode, gid_t group);
    bool compat_socket_answers();
    void start_compat();
    void load_choices();
    void save_choices();
    void rescan();
    void run_actions(const GpuTable::Actions& actions);
    void open_gpu(const PersistAction& action);
    void close_gpus(const std::vector<std::string>& bdfs);
    void on_completions();
    void update_held_checks();
    void check_held();
    bool unbinding(const std::string& bdf) const;
    void on_signal();
    void on_uevents();
    void on_accept(int listen_fd, bool rpc);
    void on_connection(uint64_t id, uint32_t events);
    void handle_control_line(Connection& connection, std::string_view line);
    void serve_rpc(uint64_t id);
    bool answer_rpc(Connection& connection);
    const HeldGpu* rpc_gpu(const NvPciDevice& device) const;
    void flush(Connection& connection);
    void drop(uint64_t id);
    void on_timer();
    void arm_timer();
    void update_inotify();
    void publish();
    ControlReply snapshot(int code, std::string message) const;
    void add_epoll(int fd, uint64_t tag, uint32_t events);

    const PersistOptions& options_;
    Sysroot root_;
    Log log_;
    GpuTable table_;
    std::unique_ptr<GpuOpener> opener_;
    std::map<std::string, HeldFd, std::less<>> fds_;
    uint64_t next_id_ = 1;
    std::list<Connection> connections_;

    uid_t uid_ = 0;
    gid_t gid_ = 0;
    std::optional<gid_t> admin_gid_;
    bool drop_root_ = false;

    UniqueFd epoll_;
    UniqueFd signals_;
    UniqueFd completion_read_;
    UniqueFd completion_write_;
    UniqueFd control_listen_;
    UniqueFd compat_listen_;
    UniqueFd timer_;
    UniqueFd held_check_timer_;
    UniqueFd inotify_;
    UniqueFd pid_lock_;
    std::optional<UeventMonitor> monitor_;
    std::optional<SafeDir> run_dir_;
    std::optional<SafeDir> state_dir_;
    std::optional<SafeDir> compat_dir_;
    Notifier notifier_;
    std::string compat_state_ = "off";
    int ready_fd_ = -1;
    bool ready_sent_ = false;
    bool held_checks_armed_ = false;
    bool stopping_ = false;
    bool dirty_ = true;
};

void Daemon::add_epoll(int fd, uint64_t tag, uint32_t events) {
    epoll_event event{};
    event.events = events;
    event.data.u64 = tag;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event);
}

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

bool Daemon::take_pid_lock() {
    std::string leaf(kPersistPidName);
    UniqueFd fd(::openat(run_dir_->fd(), leaf.c_str(),
                         O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0644));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        log_.error("cannot open the pidfile " + run_dir_->path_of(leaf) + ": remove what is there");
        return false;
    }
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        char text[32] = {};
        ssize_t got = ::pread(fd.get(), text, sizeof(text) - 1, 0);
        log_.error(format("gpu-persist is already running (pid %s, %s is locked); "
                          "`gpu-persist status` asks it",
                          got > 0 ? std::string(trim(std::string_view(text))).c_str() : "?",
                          run_dir_->path_of(leaf).c_str()));
        return false;
    }
    std::string pid = format("%d\n", static_cast<int>(::getpid()));
    if (::ftruncate(fd.get(), 0) != 0 ||
        ::pwrite(fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
        log_.error("cannot write the pidfile " + run_dir_->path_of(leaf));
        return false;
    }
    ::fchown(fd.get(), uid_, gid_);
    pid_lock_ = std::move(fd);
    return true;
}

// Whether a daemon listens on nvidia-smi's socket now: connect() takes a
// path, so, as for bind, relative to the directory's fd (fchdir there).
bool Daemon::compat_socket_answers() {
    auto dir = SafeDir::open(root_, kCompatDir);
    if (!dir) {
        return false;
    }
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid() || ::fchdir(dir->fd()) != 0) {
        return false;
    }
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, kCompatSocketName.data(), kCompatSocketName.size());
    const int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
    const int code = errno;
    if (::fchdir(root_.fd()) != 0 && ::chdir("/") != 0) {
        return false;
    }
    // A full backlog (EAGAIN) is a listener too.
    return rc == 0 || code == EAGAIN || code == EINPROGRESS;
}

// bind() takes a path: bind the name relative to the directory's fd (fchdir
// there), so no symlink on the way is followed; the umask gives the mode.
Result<UniqueFd> Daemon::listen_at(const SafeDir& dir, std::string_view name, mode_t mode,
                                   gid_t group) {
    std::string leaf(name);
    auto existing = dir.inspect(leaf);
    if (existing && existing->exists) {
        if (!S_ISSOCK(existing->st.st_mode)) {
            return error(dir.path_of(leaf) + " exists and is not a socket: remove it", EEXIST);
        }
        if (auto removed = dir.unlink(leaf); !removed) {
            return removed.error();
        }
    }
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) {
        return errno_error("socket");
    }
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, leaf.data(), leaf.size());
    if (::fchdir(dir.fd()) != 0) {
        return errno_error("fchdir " + dir.path());
    }
    mode_t old_mask = ::umask(0777 & ~mode);
    int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
    int code = errno;
    ::umask(old_mask);
    if (::fchdir(root_.fd()) != 0 && ::chdir("/") != 0) {
        return errno_error("chdir /");
    }
    if (rc != 0) {
        return os_error(code, "cannot bind " + dir.path_of(leaf));
    }
    if (auto owned = dir.chown(leaf, uid_, group); !owned) {
        return owned.error();
    }
    if (::listen(fd.get(), 16) != 0) {
        return errno_error("listen on " + dir.path_of(leaf));
    }
    return fd;
}

void Daemon::start_compat() {
    if (!options_.nvidia_smi_compat) {
        compat_state_ = "off (--no-nvidia-smi-compat)";
        return;
    }
    // nvidia-persistenced already answers nvidia-smi: leave it its socket.
    // A process name is anyone's to choose (prctl PR_SET_NAME), so it counts
    // only while something listens on the socket, which only the owner of
    // that directory (root, or nvidia-persistenced's --user) can bind.
    if (auto pids = root_.list_dir("proc")) {
        for (const std::string& pid : *pids) {
            if (!parse_decimal(pid)) {
                continue;
            }
            auto comm = root_.read_file("proc/" + pid + "/comm", 256);
            if (!comm || trim(*comm) != "nvidia-persiste") {
                continue;
            }
            if (compat_socket_answers()) {
                compat_state_ = "off (nvidia-persistenced runs as pid " + pid + ")";
                log_.warning("nvidia-persistenced runs (pid " + pid +
                             "): not answering nvidia-smi's persistence RPC; stop and disable "
                             "nvidia-persistenced, then restart gpu-persist");
                return;
            }
            log_.warning(
                "a process named nvidia-persistenced (pid " + pid +
                ") runs, but nothing answers on " +
                root_.display(std::string(kCompatDir) + "/" + std::string(kCompatSocketName)) +
                ": answering nvidia-smi's persistence RPC there");
            break;
        }
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
    // Anyone's nvidia-smi may ask (gets); only root may set: SO_PEERCRED.
    auto fd = listen_at(*dir, kCompatSocketName, 0666, gid_);
    if (!fd) {
        compat_state_ = "off (" + fd.error().message + ")";
        log_.warning("nvidia-smi compatibility off: " + fd.error().text());
        return;
    }
    compat_dir_.emplace(std::move(*dir));
    compat_listen_ = std::move(*fd);
    compat_state_ = "on";
}

void Daemon::load_choices() {
    auto text = state_dir_->inspect(std::string(kPersistStateName));
    if (!text || !text->exists) {
        table_.load_choices({});
        return;
    }
    UniqueFd fd(::openat(state_dir_->fd(), std::string(kPersistStateName).c_str(),
                         O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    std::string shown = state_dir_->path_of(kPersistStateName);
    if (!fd.valid()) {
        log_.error("cannot read " + shown + ": " + std::strerror(errno) +
                   "; keeping the choices in memory");
        return;
    }
    auto content = read_all(fd.get(), kSmallFileLimit, shown);
    if (!content) {
        log_.diagnostic(content.error());
        return;
    }
    Diagnostics diagnostics;
    table_.load_choices(parse_choices(*content, shown, diagnostics));
    for (const Diagnostic& diagnostic : diagnostics.items()) {
        log_.diagnostic(diagnostic);
    }
}

void Daemon::save_choices() {
    auto written = state_dir_->write_atomic(std::string(kPersistStateName),
                                            format_choices(table_.choices()), 0644);
    if (!written) {
        log_.error(written.error().text() + "; the choice holds until gpu-persist restarts");
    }
}

void Daemon::rescan() {
    std::vector<GpuIdentity> present;
    Diagnostics diagnostics;
    auto view = read_driver_gpus(root_, diagnostics);
    if (!view) {
        log_.error(view.error().text() + "; keeping the GPUs as they are");
        return;
    }
    for (const Diagnostic& diagnostic : diagnostics.items()) {
        log_.diagnostic(diagnostic);
    }
    for (const UnusableGpu& unusable : view->unusable) {
        if (unusable.severity == Severity::Error) {
            log_.error("GPU " + unusable.bdf + " not held: " + unusable.reason);
        }
    }
    for (const Gpu& gpu : view->gpus) {
        present.push_back(gpu.identity());
    }
    GpuTable::Actions actions;
    std::vector<std::string> gone;
    for (const HeldGpu& gpu : table_.gpus()) {
        if (std::none_of(present.begin(), present.end(),
                         [&](const GpuIdentity& id) { return id.bdf == gpu.id.bdf; })) {
            gone.push_back(gpu.id.bdf);
        }
    }
    for (const std::string& bdf : gone) {
        log_.info("GPU " + bdf + " is no longer bound to the driver");
        auto more = table_.gpu_gone(bdf);
        actions.insert(actions.end(), more.begin(), more.end());
    }
    for (const GpuIdentity& id : present) {
        bool known = table_.find(id.bdf) != nullptr;
        auto more = table_.gpu_present(id);
        if (!known) {
            log_.info(format("GPU %u (%s) found", id.minor, id.bdf.c_str()));
        }
        actions.insert(actions.end(), more.begin(), more.end());
    }
    run_actions(actions);
}

void Daemon::run_actions(const GpuTable::Actions& actions) {
    std::vector<std::string> to_close;
    bool save = false;
    for (const PersistAction& action : actions) {
        switch (action.kind) {
        case PersistAction::Kind::Open:
            open_gpu(action);
            break;
        case PersistAction::Kind::Close:
            to_close.push_back(action.bdf);
            break;
        case PersistAction::Kind::SaveChoices:
            save = true;
            break;
        }
    }
    if (!to_close.empty()) {
        close_gpus(to_close);
    }
    if (save) {
        save_choices();
    }
    dirty_ = true;
}

void Daemon::open_gpu(const PersistAction& action) {
    auto fd = opener_->open(action.minor);
    if (!fd) {
        Diagnostic failure = fd.error();
        int code = failure.code != 0 ? failure.code : EIO;
        if (code == ENOENT) {
            log_.info(format("GPU %u (%s): waiting for /dev/nvidia%u", action.minor,
                             action.bdf.c_str(), action.minor));
        } else {
            log_.error(format("GPU %u (%s): ", action.minor, action.bdf.c_str()) + failure.text() +
                       "; `gpu-persist enable` retries");
        }
        run_actions(table_.open_failed(action.bdf, code, failure.text()));
        return;
    }
    HeldFd& held = fds_[action.bdf];
    held.fd = std::move(*fd);
    held.minor = action.minor;
    held.id = next_id_++;
    held.waiting = true;
    held.close_when_done = false;
    int raw = held.fd.get();
    int pipe = completion_write_.get();
    uint64_t id = held.id;
    unsigned minor = action.minor;
    // The ioctl blocks until the init is done; every GPU's init runs at once.
    std::thread([raw, pipe, id, minor] {
        Status done = wait_open_complete(raw, minor);
        Completion completion{id, done ? 0 : (done.error().code != 0 ? done.error().code : EIO), 0};
        // Under PIPE_BUF: one atomic write.
        while (::write(pipe, &completion, sizeof(completion)) < 0 && errno == EINTR) {
        }
    }).detach();
}

// The last close of a GPU runs the driver's whole teardown: close them at once.
void Daemon::close_gpus(const std::vector<std::string>& bdfs) {
    std::vector<UniqueFd> closing;
    for (const std::string& bdf : bdfs) {
        auto it = fds_.find(bdf);
        if (it == fds_.end()) {
            continue;
        }
        if (it->second.waiting) {
            it->second.close_when_done = true;
            continue;
        }
        log_.info(format("GPU %u (%s) released", it->second.minor, bdf.c_str()));
        closing.push_back(std::move(it->second.fd));
        fds_.erase(it);
    }
    if (closing.size() == 1) {
        closing.front().reset();
        return;
    }
    std::vector<std::thread> threads;
    threads.reserve(closing.size());
    for (UniqueFd& fd : closing) {
        threads.emplace_back([&fd] { fd.reset(); });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
}

void Daemon::on_completions() {
    Completion completion{};
    while (::read(completion_read_.get(), &completion, sizeof(completion)) ==
           static_cast<ssize_t>(sizeof(completion))) {
        auto it = std::find_if(fds_.begin(), fds_.end(),
                               [&](const auto& entry) { return entry.second.id == completion.id; });
        if (it == fds_.end()) {
            continue;
        }
        std::string bdf = it->first;
        HeldFd& held = it->second;
        held.waiting = false;
        if (held.close_when_done || completion.code != 0) {
            unsigned minor = held.minor;
            fds_.erase(it);
            if (completion.code != 0) {
                std::string message = format("GPU %u (%s): the driver failed to initialize it: %s",
                                             minor, bdf.c_str(), std::strerror(completion.code));
                log_.error(message + "; see the kernel log; `gpu-persist enable` retries");
                run_actions(table_.open_failed(bdf, completion.code, message));
            } else {
                run_actions(table_.open_succeeded(bdf));
            }
            continue;
        }
        log_.info(format("GPU %u (%s) held", held.minor, bdf.c_str()));
        run_actions(table_.open_succeeded(bdf));
    }
    dirty_ = true;
}

// A lost GPU's POLLHUP comes only to a poll, and a waiting unbind or
// removal shows only in sysfs (kHeldCheckInterval says why): a periodic
// timer while any GPU is held, and none otherwise. Rearmed only when that
// changes, so its period is kept.
void Daemon::update_held_checks() {
    bool wanted = !stopping_ && table_.needs_checks();
    if (wanted == held_checks_armed_) {
        return;
    }
    itimerspec spec{};
    if (wanted) {
        spec.it_value.tv_sec = static_cast<time_t>(kHeldCheckInterval.count());
        spec.it_interval = spec.it_value;
    }
    if (::timerfd_settime(held_check_timer_.get(), 0, &spec, nullptr) == 0) {
        held_checks_armed_ = wanted;
    }
}

// The device is in sysfs without its driver link: the kernel removes that
// link before it calls the driver's remove (drivers/base/dd.c
// __device_release_driver), which waits while we hold the GPU.
bool Daemon::unbinding(const std::string& bdf) const {
    std::string device = std::string(kPciDevicesPath) + "/" + bdf;
    auto present = root_.exists(device);
    auto bound = root_.exists(device + "/driver");
    return present && *present && bound && !*bound;
}

void Daemon::check_held() {
    std::vector<pollfd> polled;
    std::vector<std::string> bdfs;
    for (const HeldGpu& gpu : table_.gpus()) {
        auto it = fds_.find(gpu.id.bdf);
        // A file whose open is still in progress polls POLLERR: only held ones.
        if (gpu.state != HoldState::Held || it == fds_.end() || it->second.waiting) {
            continue;
        }
        polled.push_back({it->second.fd.get(), 0, 0});
        bdfs.push_back(gpu.id.bdf);
    }
    if (polled.empty() || ::poll(polled.data(), polled.size(), 0) < 0) {
        return;
    }
    GpuTable::Actions actions;
    for (size_t i = 0; i < polled.size(); ++i) {
        const std::string& bdf = bdfs[i];
        unsigned minor = table_.find(bdf)->id.minor;
        GpuTable::Actions more;
        if ((polled[i].revents & (POLLHUP | POLLERR)) != 0) {
            log_.error(format("GPU %u (%s): the driver reports it lost (%s); released. Check the "
                              "kernel log (Xid 79: fallen off the bus)",
                              minor, bdf.c_str(),
                              (polled[i].revents & POLLHUP) != 0 ? "POLLHUP" : "POLLERR"));
            more = table_.hangup(bdf);
        } else if (unbinding(bdf)) {
            log_.warning(format("GPU %u (%s): the kernel is unbinding or removing it, and the "
                                "driver waits until no file holds it; released. Run "
                                "`gpu-persist disable %s` before a remove, unbind or reset",
                                minor, bdf.c_str(), bdf.c_str()));
            more = table_.unbinding(bdf);
        }
        actions.insert(actions.end(), more.begin(), more.end());
    }
    if (!actions.empty()) {
        run_actions(actions);
    }
}

Result<GpuTable::Actions> Daemon::change(const ControlRequest& request) {
    auto apply = [&] {
        return request.kind == ControlRequest::Kind::Enable ? table_.enable(request.gpu)
                                                            : table_.disable(request.gpu);
    };
    auto actions = apply();
    if (!actions && actions.error().code == ENODEV) {
        // Bound since the last event we heard of (hotplug off or lost): look again.
        rescan();
        actions = apply();
    }
    if (!actions) {
        return actions;
    }
    run_actions(*actions);
    return actions;
}

// An unbind or remove forgets the GPU at once, even when a rescan would find
// it bound again by now: that is a new binding, to be opened again (a GPU
// that had failed included). A bind, or lost events, rescans.
void Daemon::on_uevents() {
    std::vector<Uevent> events;
    bool overflow = monitor_->drain(events);
    bool bound = overflow;
    GpuTable::Actions actions;
    for (const Uevent& event : events) {
        if (event.action == "bind") {
            bound = true;
            continue;
        }
        auto bdf = GpuSelector::parse(event.slot_name);
        if (bdf && bdf->kind() == GpuSelector::Kind::Bdf && table_.find(bdf->key()) != nullptr) {
            log_.info("GPU " + bdf->key() + " " + event.action + " (uevent)");
            auto more = table_.gpu_gone(bdf->key());
            actions.insert(actions.end(), more.begin(), more.end());
        }
    }
    run_actions(actions);
    if (bound) {
        rescan();
    }
}

void Daemon::on_signal() {
    signalfd_siginfo info{};
    while (::read(signals_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
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
}

void Daemon::on_accept(int listen_fd, bool rpc) {
    while (true) {
        UniqueFd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!fd.valid()) {
            return;
        }
        if (connections_.size() >= kMaxConnections) {
            continue; // closed: too many at once
        }
        PeerCredentials peer = peer_of(fd.get());
        if (rpc && peer.uid != 0) {
            size_t unprivileged = 0;
            size_t same_user = 0;
            for (const Connection& other : connections_) {
                if (other.rpc && other.peer.uid != 0) {
                    ++unprivileged;
                    same_user += other.peer.uid == peer.uid ? 1 : 0;
                }
            }
            if (unprivileged >= kMaxUnprivilegedRpcConnections ||
                same_user >= kMaxRpcConnectionsPerUser) {
                continue; // closed: that user, or other users, have enough
            }
        }
        Connection& connection = connections_.emplace_back();
        connection.id = next_id_++;
        connection.fd = std::move(fd);
        connection.rpc = rpc;
        connection.peer = std::move(peer);
        connection.deadline = Clock::now() + kRequestDeadline;
        add_epoll(connection.fd.get(), kTagConnection | connection.id, EPOLLIN | EPOLLRDHUP);
    }
}

ControlReply Daemon::snapshot(int code, std::string message) const {
    ControlReply reply;
    reply.code = code;
    reply.message = std::move(message);
    reply.daemon.pid = ::getpid();
    reply.daemon.uid = ::geteuid();
    reply.daemon.runs_as_root = ::geteuid() == 0;
    reply.daemon.compat = compat_state_;
    reply.daemon.hotplug = !monitor_                                  ? "off"
                           : monitor_->source() == UeventSource::Udev ? "udev"
                                                                      : "kernel";
    reply.gpus = table_.gpus();
    return reply;
}

void Daemon::handle_control_line(Connection& connection, std::string_view line) {
    auto request = parse_control_request(line);
    if (!request) {
        connection.out = format_control_reply(snapshot(EINVAL, request.error().message));
    } else if (request->changes() && !peer_may_change(connection.peer, admin_gid_)) {
        log_.warning(
            format("refused %s from uid %u (pid %d): changes need root%s",
                   std::string(trim(line)).c_str(), static_cast<unsigned>(connection.peer.uid),
                   static_cast<int>(connection.peer.pid), admin_gid_ ? " or the admin group" : ""));
        connection.out = format_control_reply(
            snapshot(EPERM, std::string("permission denied: changes need root") +
                                (admin_gid_ ? " or the group " + options_.admin_group
                                            : std::string(" (the daemon has no --admin-group)"))));
    } else if (request->changes()) {
        auto done = change(*request);
        if (!done) {
            connection.out =
                format_control_reply(snapshot(done.error().code, done.error().message));
        } else {
            log_.info(format("%s by uid %u", format_control_request(*request).c_str(),
                             static_cast<unsigned>(connection.peer.uid)));
            // Answer once the GPUs it opened have initialized.
            connection.awaiting_settle = true;
            connection.deadline = Clock::now() + kSettleDeadline;
            ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, connection.fd.get(), nullptr);
            return;
        }
    } else {
        connection.out = format_control_reply(snapshot(0, {}));
    }
    connection.close_after_write = true;
    flush(connection);
}

// nvidia-persistenced's table is matched by domain, bus and slot.
const HeldGpu* Daemon::rpc_gpu(const NvPciDevice& device) const {
    for (const HeldGpu& gpu : table_.gpus()) {
        if (rpc_device_matches(device, gpu.id.bdf)) {
            return &gpu;
        }
    }
    return nullptr;
}

// nvidia-smi's persistence RPC, answered as nvidia-persistenced does
// (NVIDIA/nvidia-persistenced 595.71.05, commit 410f354: command_server.c
// and nvidia-persistenced.c decide each answer, see plan_rpc_call() in
// rpc.cpp; nvpd_rpc_server.c and libtirpc the transport, see
// read_rpc_record()). svc_run() answers one call after the other: a call
// that waits for its GPU holds back the calls behind it on its connection.
void Daemon::serve_rpc(uint64_t id) {
    auto it = std::find_if(connections_.begin(), connections_.end(),
                           [&](const Connection& c) { return c.id == id; });
    if (it == connections_.end()) {
        return;
    }
    Connection& connection = *it;
    while (!connection.close_after_write) {
        if (connection.pending) {
            if (!answer_rpc(connection)) {
                // The GPU's init decides the answer: as long as the control
                // socket waits for one.
                connection.deadline = Clock::now() + kSettleDeadline;
                break;
            }
            connection.deadline = Clock::now() + kRequestDeadline;
            continue;
        }
        size_t used = connection.reader.feed(connection.in);
        connection.in.erase(0, used);
        if (connection.reader.state() == RpcRecordReader::State::Error) {
            connection.close_after_write = true;
            break;
        }
        if (connection.reader.state() != RpcRecordReader::State::Record) {
            break;
        }
        RpcIncoming incoming = read_rpc_record(connection.reader.take_record());
        switch (incoming.kind) {
        case RpcIncoming::Kind::Close:
            connection.close_after_write = true;
            break;
        case RpcIncoming::Kind::Reply:
            connection.out += frame_rpc_record(incoming.reply);
            // A connection that keeps calling stays; one that idles is dropped.
            connection.deadline = Clock::now() + kRequestDeadline;
            break;
        case RpcIncoming::Kind::Call:
            connection.pending = PendingRpc{std::move(incoming.call)};
            break;
        }
        if (connection.out.size() > kMaxPendingOutput) {
            drop(id); // it sends and never reads
            return;
        }
    }
    if (connection.peer_closed && !connection.pending) {
        connection.close_after_write = true;
    }
    flush(connection);
}

// Takes the pending call as far as it goes: false while it waits for its
// GPU, true once answered.
bool Daemon::answer_rpc(Connection& connection) {
    PendingRpc& pending = *connection.pending;
    const RpcCall& call = pending.call;
    while (true) {
        const HeldGpu* gpu = rpc_gpu(call.device);
        std::optional<RpcGpu> view;
        if (gpu != nullptr) {
            view = RpcGpu{gpu->state == HoldState::Held, gpu->state == HoldState::Opening,
                          gpu->wanted};
        }
        RpcStep step = plan_rpc_call(call, connection.peer.uid, view, pending.applied);
        if (step.kind == RpcStep::Kind::Answer && step.status == NvPdStatus::DeviceNotFound &&
            call.procedure != RpcProcedure::GetPersistenceMode && !pending.rescanned) {
            // Only root gets this far. Bound since the last event we heard
            // of (hotplug off or lost): look again, as a control request does.
            pending.rescanned = true;
            rescan();
            continue;
        }
        switch (step.kind) {
        case RpcStep::Kind::Wait:
            return false;
        case RpcStep::Kind::Answer:
            connection.out += frame_rpc_record(encode_rpc_answer(call, step.status, step.enabled));
            connection.pending.reset();
            return true;
        case RpcStep::Kind::Enable:
        case RpcStep::Kind::Disable: {
            bool enable = step.kind == RpcStep::Kind::Enable;
            std::string bdf = gpu->id.bdf; // `gpu` does not outlive the change
            ControlRequest request;
            request.kind = enable ? ControlRequest::Kind::Enable : ControlRequest::Kind::Disable;
            auto selector = GpuSelector::parse(bdf);
            Status done = selector ? Status() : Status(selector.error());
            if (selector) {
                request.gpu = std::move(*selector);
                if (auto changed = change(request); !changed) {
                    done = changed.error();
                }
            }
            pending.applied = true;
            if (!done) {
                log_.error("nvidia-smi's persistence mode " + std::string(enable ? "on" : "off") +
                           " for " + bdf + ": " + done.error().text());
                connection.out += frame_rpc_record(encode_rpc_answer(call, NvPdStatus::Unknown));
                connection.pending.reset();
                return true;
            }
            log_.info(format("nvidia-smi (uid 0, pid %d) set persistence mode %s for %s",
                             static_cast<int>(connection.peer.pid), enable ? "on" : "off",
                             bdf.c_str()));
            continue;
        }
        }
    }
}

void Daemon::flush(Connection& connection) {
    while (!connection.out.empty()) {
        ssize_t sent =
            ::send(connection.fd.get(), connection.out.data(), connection.out.size(), MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EAGAIN) {
                break;
            }
            if (errno == EINTR) {
                continue;
            }
            drop(connection.id);
            return;
        }
        connection.out.erase(0, static_cast<size_t>(sent));
    }
    if (connection.out.empty() && connection.close_after_write) {
        drop(connection.id);
        return;
    }
    bool want_write = !connection.out.empty();
    // An RPC connection stops being read while a call waits (its next
    // calls wait behind it) and once its client half-closed.
    bool reading = !connection.rpc || (!connection.pending && !connection.peer_closed);
    if (want_write != connection.want_write || reading != connection.reading) {
        connection.want_write = want_write;
        connection.reading = reading;
        epoll_event event{};
        event.events = (reading ? EPOLLIN | EPOLLRDHUP : 0U) | (want_write ? EPOLLOUT : 0U);
        event.data.u64 = kTagConnection | connection.id;
        if (connection.registered) {
            ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, connection.fd.get(), &event);
        } else if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, connection.fd.get(), &event) == 0) {
            connection.registered = true;
        }
    }
}

void Daemon::drop(uint64_t id) {
    connections_.remove_if([&](const Connection& c) { return c.id == id; });
}

void Daemon::on_connection(uint64_t id, uint32_t events) {
    auto it = std::find_if(connections_.begin(), connections_.end(),
                           [&](const Connection& c) { return c.id == id; });
    if (it == connections_.end()) {
        return;
    }
    Connection& connection = *it;
    if ((events & EPOLLOUT) != 0) {
        flush(connection);
        if (std::none_of(connections_.begin(), connections_.end(),
                         [&](const Connection& c) { return c.id == id; })) {
            return;
        }
    }
    if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) == 0) {
        return;
    }
    if (connection.rpc && connection.pending) {
        // Hung up while its call waits: epoll reports that on every wait,
        // and nothing is read before the call is answered. Unwatched until
        // then (flush() adds it back); the call is still carried out, as
        // nvidia-persistenced finishes a call whose client left.
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, connection.fd.get(), nullptr);
        connection.registered = false;
        connection.reading = false;
        connection.want_write = false;
        return;
    }
    char buffer[1024];
    ssize_t got = ::recv(connection.fd.get(), buffer, sizeof(buffer), 0);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;
    }
    if (got == 0 && connection.rpc) {
        // As libtirpc: the calls that came before the EOF are answered.
        connection.peer_closed = true;
        serve_rpc(id);
        return;
    }
    if (got <= 0) {
        // EOF: a half-closed control request still gets an answer.
        if (!connection.rpc && !connection.in.empty() && connection.out.empty()) {
            connection.out =
                format_control_reply(snapshot(EINVAL, "incomplete request: end it with a newline"));
            connection.close_after_write = true;
            flush(connection);
            return;
        }
        drop(id);
        return;
    }
    std::string_view data(buffer, static_cast<size_t>(got));
    if (connection.rpc) {
        // The deadline moves with whole calls only (serve_rpc): a record
        // trickled a byte at a time is dropped like an idle connection.
        connection.in.append(data);
        serve_rpc(id);
        return;
    }
    if (connection.close_after_write) {
        return; // one request per connection; the rest is ignored
    }
    connection.in.append(data);
    size_t newline = connection.in.find('\n');
    if (newline == std::string::npos) {
        if (connection.in.size() > kMaxControlRequest) {
            connection.out = format_control_reply(snapshot(EMSGSIZE, "request too long"));
            connection.close_after_write = true;
            flush(connection);
        }
        return;
    }
    std::string line = connection.in.substr(0, newline);
    handle_control_line(connection, line);
}

void Daemon::arm_timer() {
    itimerspec spec{};
    if (!connections_.empty()) {
        auto earliest = std::min_element(connections_.begin(), connections_.end(),
                                         [](const Connection& a, const Connection& b) {
                                             return a.deadline < b.deadline;
                                         })
                            ->deadline;
        auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(earliest - Clock::now());
        long long ns = std::max<long long>(wait.count(), 1'000'000);
        spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
        spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    }
    // Disarmed (all zero) when no client is connected: idle means idle.
    ::timerfd_settime(timer_.get(), 0, &spec, nullptr);
}

void Daemon::on_timer() {
    uint64_t expirations = 0;
    (void)::read(timer_.get(), &expirations, sizeof(expirations));
    auto now = Clock::now();
    std::vector<uint64_t> expired;
    for (Connection& connection : connections_) {
        if (connection.deadline <= now) {
            expired.push_back(connection.id);
        }
    }
    for (uint64_t id : expired) {
        auto it = std::find_if(connections_.begin(), connections_.end(),
                               [&](const Connection& c) { return c.id == id; });
        if (it != connections_.end() && it->awaiting_settle) {
            it->out = format_control_reply(
                snapshot(ETIMEDOUT, "the driver is still initializing a GPU; ask again later"));
            it->close_after_write = true;
            add_epoll(it->fd.get(), kTagConnection | it->id, EPOLLIN | EPOLLRDHUP);
            flush(*it);
        } else {
            drop(id);
        }
    }
}

void Daemon::update_inotify() {
    bool wanted = options_.hotplug && table_.any_waiting_for_node();
    if (wanted == inotify_.valid()) {
        return;
    }
    if (!wanted) {
        inotify_.reset(); // closing removes it from epoll
        return;
    }
    UniqueFd fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    auto dev = root_.open_dir("dev");
    if (!fd.valid() || !dev) {
        return;
    }
    std::string path = format("/proc/self/fd/%d", dev->get());
    if (::inotify_add_watch(fd.get(), path.c_str(),
                            IN_CREATE | IN_ATTRIB | IN_MOVED_TO | IN_ONLYDIR) < 0 &&
        ::inotify_add_watch(fd.get(), root_.path("dev").c_str(),
                            IN_CREATE | IN_ATTRIB | IN_MOVED_TO | IN_ONLYDIR | IN_DONT_FOLLOW) <
            0) {
        log_.warning("cannot watch /dev for new nodes: " + std::string(std::strerror(errno)) +
                     "; `gpu-persist enable GPU` takes a GPU whose node came later");
        return;
    }
    inotify_ = std::move(fd);
    add_epoll(inotify_.get(), kTagInotify, EPOLLIN);
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
        for (Connection& connection : connections_) {
            if (connection.awaiting_settle) {
                connection.awaiting_settle = false;
                connection.out = format_control_reply(snapshot(0, {}));
                connection.close_after_write = true;
                add_epoll(connection.fd.get(), kTagConnection | connection.id,
                          EPOLLIN | EPOLLRDHUP);
            }
        }
        std::vector<uint64_t> ids;
        for (const Connection& connection : connections_) {
            if (connection.close_after_write && !connection.out.empty()) {
                ids.push_back(connection.id);
            }
        }
        for (uint64_t id : ids) {
            auto it = std::find_if(connections_.begin(), connections_.end(),
                                   [&](const Connection& c) { return c.id == id; });
            if (it != connections_.end()) {
                flush(*it);
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
        if (ready_fd_ >= 0) {
            char outcome = partial() ? 2 : 0;
            (void)::write(ready_fd_, &outcome, 1);
            ::close(ready_fd_);
            ready_fd_ = -1;
        }
        return;
    }
    (void)notifier_.send(line);
}

bool Daemon::start(int ready_fd) {
    ready_fd_ = ready_fd;
    if (refuse_coherent_memory() || !resolve_accounts() || !prepare_directories() ||
        !take_pid_lock() || !own_directories()) {
        return false;
    }
    auto notifier = Notifier::from_environment();
    if (!notifier) {
        log_.diagnostic(notifier.error());
        return false;
    }
    notifier_ = std::move(*notifier);

    sigset_t mask;
    sigemptyset(&mask);
    for (int signal : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) {
        sigaddset(&mask, signal);
    }
    ::sigprocmask(SIG_BLOCK, &mask, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    signals_.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    timer_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    held_check_timer_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    int pipe[2];
    if (!signals_.valid() || !epoll_.valid() || !timer_.valid() || !held_check_timer_.valid() ||
        ::pipe2(pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        log_.error(std::string("cannot set up the event loop: ") + std::strerror(errno));
        return false;
    }
    completion_read_.reset(pipe[0]);
    completion_write_.reset(pipe[1]);
    // The waiter threads block on their write only if the pipe is full,
    // which 64 KiB of 16-byte messages for at most 254 GPUs never is.

    // The control socket: root:admin-group 0660; everyone else reads the
    // status file beside it.
    auto control = listen_at(*run_dir_, kPersistSocketName, 0660, admin_gid_.value_or(0));
    if (!control) {
        log_.diagnostic(control.error());
        return false;
    }
    control_listen_ = std::move(*control);
    start_compat();

    if (options_.hotplug) {
        auto udev_running = root_.exists("run/udev/control");
        auto source = udev_running && *udev_running ? UeventSource::Udev : UeventSource::Kernel;
        auto monitor = UeventMonitor::open(source);
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

    add_epoll(signals_.get(), kTagSignal, EPOLLIN);
    add_epoll(completion_read_.get(), kTagCompletion, EPOLLIN);
    add_epoll(control_listen_.get(), kTagControlListen, EPOLLIN);
    add_epoll(timer_.get(), kTagTimer, EPOLLIN);
    add_epoll(held_check_timer_.get(), kTagHeldCheck, EPOLLIN);
    if (compat_listen_.valid()) {
        add_epoll(compat_listen_.get(), kTagCompatListen, EPOLLIN);
    }
    if (monitor_) {
        add_epoll(monitor_->fd(), kTagUevent, EPOLLIN);
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
        arm_timer();
        epoll_event events[32];
        int count = ::epoll_wait(epoll_.get(), events, 32, -1);
        if (count < 0) {
            if (errno == EINTR) {
                continue;
            }
            log_.error(std::string("epoll_wait: ") + std::strerror(errno));
            return;
        }
        for (int i = 0; i < count; ++i) {
            uint64_t tag = events[i].data.u64;
            uint64_t id = tag & ~kTagMask;
            switch (tag & kTagMask) {
            case kTagSignal:
                on_signal();
                break;
            case kTagCompletion:
                on_completions();
                break;
            case kTagControlListen:
                on_accept(control_listen_.get(), false);
                break;
            case kTagCompatListen:
                on_accept(compat_listen_.get(), true);
                break;
            case kTagTimer:
                on_timer();
                break;
            case kTagUevent:
                on_uevents();
                break;
            case kTagInotify: {
                char buffer[4096];
                while (::read(inotify_.get(), buffer, sizeof(buffer)) > 0) {
                }
                run_actions(table_.nodes_changed());
                break;
            }
            case kTagHeldCheck: {
                uint64_t expirations = 0;
                (void)::read(held_check_timer_.get(), &expirations, sizeof(expirations));
                check_held();
                break;
            }
            case kTagConnection:
                on_connection(id, events[i].events);
                break;
            default:
                break;
            }
        }
    }
}

void Daemon::stop() {
    (void)notifier_.send("STOPPING=1");
    connections_.clear();
    control_listen_.reset();
    compat_listen_.reset();
    (void)run_dir_->unlink(std::string(kPersistSocketName));
    (void)run_dir_->unlink(std::string(kStatusName));
    if (compat_dir_) {
        (void)compat_dir_->unlink(std::string(kCompatSocketName));
    }
    run_actions(table_.release_all());
    (void)run_dir_->unlink(std::string(kPersistPidName));
    log_.info("stopped");
}

} // namespace

DaemonOutcome run_persist_daemon(const PersistOptions& options) {
    Log early("gpu-persist", options.use_syslog || options.daemonize, options.verbosity);
    auto root = Sysroot::open(options.root);
    if (!root) {
        early.diagnostic(root.error());
        return DaemonOutcome::StartFailed;
    }
    int ready_fd = -1;
    if (options.daemonize) {
        int pipe[2];
        if (::pipe2(pipe, O_CLOEXEC) != 0) {
            early.error(std::string("pipe: ") + std::strerror(errno));
            return DaemonOutcome::StartFailed;
        }
        pid_t pid = ::fork();
        if (pid < 0) {
            early.error(std::string("fork: ") + std::strerror(errno));
            return DaemonOutcome::StartFailed;
        }
        if (pid > 0) {
            // The parent returns once the daemon holds its GPUs, or failed.
            ::close(pipe[1]);
            char outcome = 3;
            ssize_t got = 0;
            do {
                got = ::read(pipe[0], &outcome, 1);
            } while (got < 0 && errno == EINTR);
            ::close(pipe[0]);
            if (got != 1) {
                return DaemonOutcome::StartFailed;
            }
            return outcome == 0   ? DaemonOutcome::Stopped
                   : outcome == 2 ? DaemonOutcome::Partial
                                  : DaemonOutcome::StartFailed;
        }
        ::close(pipe[0]);
        ready_fd = pipe[1];
        ::setsid();
    }
    PersistOptions effective = options;
    effective.use_syslog = options.use_syslog || options.daemonize;
    Daemon daemon(effective, std::move(*root));
    // Until it has started, a --daemon's errors also reach the caller's terminal.
    daemon.log().set_also_stderr(options.daemonize);
    bool started = daemon.start(ready_fd);
    if (options.daemonize) {
        daemon.log().set_also_stderr(false);
        int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) {
            ::dup2(null, 0);
            ::dup2(null, 1);
            ::dup2(null, 2);
            ::close(null);
        }
    }
    if (!started) {
        if (ready_fd >= 0) {
            char outcome = 3;
            (void)::write(ready_fd, &outcome, 1);
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
