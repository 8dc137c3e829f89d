// gpu-persist's daemon inside: one class, its members split by concern over
// daemon_start.cpp (start-up, accounts, the loop), daemon_gpus.cpp (holding
// GPUs), daemon_control.cpp (connections and the control socket) and
// daemon_rpc.cpp (nvidia-smi's persistence RPC). Private to the layer.
#pragma once

#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/persist/control.hpp"
#include "gpuinit/persist/daemon.hpp"
#include "gpuinit/persist/gpu_open.hpp"
#include "gpuinit/persist/gpu_table.hpp"
#include "gpuinit/persist/rpc.hpp"
#include "gpuinit/persist/uevent.hpp"
#include "gpuinit/service/event_loop.hpp"
#include "gpuinit/service/listener.hpp"
#include "gpuinit/service/log.hpp"
#include "gpuinit/service/process.hpp"

#include <chrono>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit::persist_daemon {

using service::Clock;

// Every connection is dropped this long after it connected, whatever it
// sends: a client that trickles bytes holds its place no longer. The time
// a change waits for its GPUs to initialize is the daemon's, not the
// client's: such a request gets kSettleDeadline from when it was complete.
constexpr auto kRequestDeadline = std::chrono::seconds(5);
constexpr auto kSettleDeadline = std::chrono::seconds(120);
// Each socket has its own room, so the 0666 compatibility socket's clients
// never take the control socket's. On each, one peer (a uid; for uid 0, a
// pid namespace: each rootful container is its own) has a bound, and some
// room is kept for the host's root (its own gpu-persist and nvidia-smi).
constexpr service::ListenOptions kControlRoom{.budget = 16, .per_peer = 4, .reserved = 8};
constexpr service::ListenOptions kCompatRoom{.budget = 48, .per_peer = 4, .reserved = 8};
// The kernel's overflowuid: nobody, and how an unmapped uid shows.
constexpr uid_t kOverflowUid = 65534;
constexpr size_t kMaxPendingOutput = size_t{256} << 10;
constexpr std::string_view kStatusName = "status";
constexpr std::string_view kCompatDir = "run/nvidia-persistenced";
constexpr std::string_view kCompatSocketName = "socket";
constexpr std::string_view kCompatPidName = "nvidia-persistenced.pid";

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
    bool waited = false;    // it waited for its GPU to settle
};

struct Connection {
    uint64_t id = 0;
    UniqueFd fd;
    service::Listener* listener = nullptr; // its budget, released on drop
    bool rpc = false;
    service::Peer peer;
    std::string in;
    std::string out;
    RpcRecordReader reader;
    std::optional<PendingRpc> pending; // an RPC call waiting; the calls after it wait too
    bool peer_closed = false;          // an RPC client half-closed: answer, then close
    bool awaiting_settle = false;      // a change whose GPUs are still initializing
    bool close_after_write = false;
    uint32_t events = 0; // what epoll watches; 0: not watched
};

class Daemon {
  public:
    Daemon(const PersistOptions& options, Sysroot root)
        : options_(options), root_(std::move(root)),
          log_("gpu-persist", options.use_syslog, options.verbosity) {}

    // Everything that needs root; false when it cannot start (reported).
    bool start(UniqueFd ready);
    void run();
    void stop();
    bool partial() const { return table_.count(HoldState::Failed) > 0; }
    Log& log() { return log_; }
    // A detached daemon that could not start tells its parent.
    void report_failed() { service::report_ready(ready_, 3); }

  private:
    // daemon_start.cpp: start-up and accounts.
    bool refuse_coherent_memory();
    bool resolve_accounts();
    void warn_shared_user();
    bool prepare_directories();
    bool take_pid_lock();
    bool own_directories();
    std::optional<std::string> nvidia_persistenced_pid();
    bool counts_as_nvidia_persistenced(const std::string& pid, int proc_fd);
    void start_compat();
    void on_signal(const signalfd_siginfo& info);
    void publish();

    // daemon_gpus.cpp: holding GPUs.
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
    void on_uevents();
    void update_inotify();
    Result<GpuTable::Actions> change(const ControlRequest& request);

    // daemon_control.cpp: connections and the control socket.
    void on_accept(service::Listener& listener, bool rpc);
    void on_connection(uint64_t id, uint32_t events);
    void handle_control_line(Connection& connection, std::string_view line);
    ControlReply snapshot(int code, std::string message) const;
    Connection* find(uint64_t id);
    void watch(Connection& connection, uint32_t events);
    void flush(Connection& connection);
    void drop(uint64_t id);
    void expired(uint64_t id);
    void settle_deadline(Connection& connection);
    // uid 0 counts as root only from the host's namespaces: a container's
    // root asks as a user does.
    static uid_t acting_uid(const service::Peer& peer);

    // daemon_rpc.cpp: nvidia-smi's persistence RPC.
    void serve_rpc(uint64_t id);
    bool answer_rpc(Connection& connection);
    const HeldGpu* rpc_gpu(const NvPciDevice& device) const;

    const PersistOptions& options_;
    Sysroot root_;
    Log log_;
    service::EventLoop loop_;
    GpuTable table_;
    std::unique_ptr<GpuOpener> opener_;
    std::map<std::string, HeldFd, std::less<>> fds_;
    uint64_t next_id_ = 1;
    std::list<Connection> connections_;

    uid_t uid_ = 0;
    gid_t gid_ = 0;
    std::optional<gid_t> admin_gid_;
    bool drop_root_ = false;

    UniqueFd proc_; // the kernel's /proc, for peers (whatever --root is)
    UniqueFd completion_read_;
    UniqueFd completion_write_;
    std::optional<service::Listener> control_listen_;
    std::optional<service::Listener> compat_listen_;
    UniqueFd held_check_timer_;
    UniqueFd inotify_;
    std::optional<service::PidLock> pid_lock_;
    std::optional<UeventMonitor> monitor_;
    std::optional<SafeDir> run_dir_;
    std::optional<SafeDir> state_dir_;
    std::optional<SafeDir> compat_dir_;
    Notifier notifier_;
    std::string compat_state_ = "off";
    UniqueFd ready_;
    bool ready_sent_ = false;
    bool held_checks_armed_ = false;
    bool stopping_ = false;
    bool dirty_ = true;
};

} // namespace gpuinit::persist_daemon
