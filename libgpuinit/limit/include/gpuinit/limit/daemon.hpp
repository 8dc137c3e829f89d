// `gpu-limit daemon`, the host side of gpu-limit: the part that decides
// (DaemonCore) and the registration socket (RegistrationServer). The tool
// (tools/gpu-limit-daemon.cpp) adds NVML, the event loop and the service
// manager; tests drive these classes with a fake NVML, fake /proc trees and
// a simulated clock.
//
// # Trust model
// A cap for cooperating workloads, not a security boundary (static binaries
// and raw ioctls bypass any interposer). Still, nothing a container sends or
// writes may crash the daemon, grow its memory without bound, or make it act
// on another group or on a process that is not the group's:
// - Registration: the host pid is SO_PEERCRED's, never the message's. The
//   daemon believes "I own slot S of group G" only when the descriptor the
//   process sent with its request (SCM_RIGHTS) is an open of G's state file
//   (same device and inode as the daemon's own open) whose description
//   holds the OFD write lock on slot S's byte: the daemon's own open sees
//   the byte held, the sent one sees no other holder (F_OFD_GETLK). A
//   process can hold that lock only if it opened G's state, and only one
//   description holds it at a time. The check costs the same whatever the
//   number of fds the process has (it used to read /proc/<pid>/fdinfo).
//   Every refusal past the datagram's syntax is one reason, "refused".
// - The daemon never believes the state file's host_pid fields (a group's
//   processes can write their own state): it keeps its own table of verified
//   registrations and writes host_pid for `gpu-limit status` only.
// - Cgroup matching: a GPU process (from NVML) whose /proc/<pid>/cgroup path
//   names a group as a whole word belongs to it. Only groups named like a
//   container id (12 to 64 lower-case hex digits) are matched this way: a
//   short name such as "job1" would match unrelated paths.
// - Signals go only to pids the daemon mapped itself, checked against the
//   start time it saw then (no pid reuse).
// - Group state is opened only when <state dir>/<group>/state already exists;
//   the daemon never creates a group. GroupState's own rule (owner: the
//   caller or root) would refuse a container's group: the container runtime
//   integration (oci_host) creates <state dir>/<container id>/ as root and
//   hands it to the container's uid, which creates its state file there.
//   The daemon's rule instead: the state dir is the daemon's own (its uid's,
//   writable by nobody else), so only the daemon's uid makes entries in it;
//   the group directory directly under it is a real directory (opened
//   O_NOFOLLOW, used only as a dirfd), writable by nobody but its owner,
//   whoever that is; its "state" is a regular file before it is opened (no
//   FIFO or device is ever opened), opened with openat(O_NOFOLLOW) on that
//   dirfd, with one link (no hardlink of another group's file), owned by the
//   directory's owner, writable by nobody else, of a state file's size. Every
//   byte of the mapped file stays hostile (the group's processes write it).
// - Its size too: the group's processes can truncate the state file under
//   the daemon's mappings, whose next access would raise SIGBUS. Both
//   mappings of a group are guarded (sigbus_guard.hpp, installed by the
//   constructor): the access reads zeros instead, and the group is dropped
//   after the pass or step with one log line, not opened again while its
//   directory stays; its processes drive their gates in-process.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/limit/compute.hpp"
#include "gpuinit/limit/group_state.hpp"
#include "gpuinit/service/peer.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit::limit {

// ---------------------------------------------------------------------------
// What the daemon needs from NVML, behind an interface (tests use a fake).

struct NvmlDevice {
    unsigned index = 0;
    std::string uuid; // "GPU-...", as NVML spells it
};

inline constexpr uint64_t kNvmlUnknownBytes = UINT64_MAX;

struct NvmlProcess {
    int32_t pid = 0;                         // host pid
    uint64_t used_bytes = kNvmlUnknownBytes; // NVML_VALUE_NOT_AVAILABLE without permission
};

struct NvmlSample {
    int32_t pid = 0;
    uint32_t sm_percent = 0;   // share of the sample window a kernel of pid ran
    uint64_t timestamp_us = 0; // CLOCK_REALTIME, microseconds
};

enum class ProcessListing : uint8_t {
    Listed,    // `out` holds the device's processes
    Failed,    // not this time (an NVML error): nothing to conclude
    Untrusted, // the driver's process lists do not check out (the detail's
               // problem says why): memory must not be charged from them
};
const char* listing_name(ProcessListing listing); // "listed", "failed", "untrusted"

struct ProcessListDetail {
    std::string call;    // the NVML function that answered ("" when none did)
    uint32_t stride = 0; // the size of its entries in bytes; 0 before any entry
    std::string problem; // Failed, Untrusted: why, one line
};

class NvmlSource {
  public:
    virtual ~NvmlSource() = default;
    // False: no NVML (registration only).
    virtual bool available() const = 0;
    virtual std::vector<NvmlDevice> devices() = 0;
    // Processes with a compute context on the device.
    virtual ProcessListing processes(unsigned index, std::vector<NvmlProcess>& out,
                                     ProcessListDetail& detail) = 0;
    // Utilization samples newer than since_us; false on an error (no samples
    // yet is success with none).
    virtual bool utilization(unsigned index, uint64_t since_us, std::vector<NvmlSample>& out) = 0;
};

// ---------------------------------------------------------------------------
// What the daemon does to the world, behind an interface (tests record).

class DaemonEffects {
  public:
    virtual ~DaemonEffects() = default;
    virtual uint64_t monotonic_ns() = 0;
    virtual uint64_t realtime_us() = 0;
    virtual void log(std::string_view line) = 0;
    // SIGKILL pid if it still is the process that started at start_time
    // (/proc/<pid>/stat field 22).
    virtual void kill_process(int32_t pid, uint64_t start_time) = 0;
    // Runs the OOM script with these variables added, bounded in time.
    virtual void run_oom_script(const std::string& script,
                                const std::vector<std::string>& variables) = 0;
};

struct DaemonConfig {
    std::string state_dir = "/run/gpu-limit"; // host path
    uint64_t oom_grace_ns = 5'000'000'000;
    std::string oom_script; // empty: none
    size_t max_groups = 4096;
};

struct PeerCredentials {
    int32_t pid = 0;
    uint32_t uid = 0;
    uint32_t gid = 0;
};

// ---------------------------------------------------------------------------
// One pass, as seen (for --once, --json and the tests).

struct PassProcess {
    int32_t pid = 0;
    bool registered = false; // through the socket (else found by cgroup)
    uint64_t used_bytes = 0; // NVML, on this device
    uint32_t sm_percent = 0;
};

struct PassDevice {
    std::string uuid;
    uint64_t cap = 0;
    uint64_t counted = 0;  // what the interposers charged
    uint64_t measured = 0; // NVML's sum for the group's processes
    uint64_t external = 0; // charged by the daemon: measured beyond counted
    uint32_t cap_percent = 0;
    uint64_t busy_ns = 0; // this step
    bool gate_open = true;
    bool driven = false; // the daemon stepped the controller
    bool over_cap = false;
    std::vector<PassProcess> processes;
};

struct PassGroup {
    std::string name;
    size_t registered = 0; // verified registrations
    std::vector<PassDevice> devices;
};

// NVML's process list of one device as the pass read it.
struct PassNvmlDevice {
    unsigned index = 0;
    std::string uuid;
    ProcessListing listing = ProcessListing::Failed;
    ProcessListDetail detail;
    std::vector<NvmlProcess> processes;
};

struct PassReport {
    bool nvml = false;
    std::vector<PassNvmlDevice> nvml_devices;
    // Why NVML's process lists are not used ("" when they are): memory
    // outside the interposer is then not charged.
    std::string process_lists_problem;
    std::vector<PassGroup> groups;
    std::vector<std::string> actions; // OOM actions taken (one line each)
};

// ---------------------------------------------------------------------------

class DaemonCore {
  public:
    // `root`: /proc is read below it. The config's state_dir is a host path.
    DaemonCore(const Sysroot& root, DaemonConfig config, NvmlSource& nvml, DaemonEffects& effects);
    ~DaemonCore();
    DaemonCore(const DaemonCore&) = delete;
    DaemonCore& operator=(const DaemonCore&) = delete;

    // One registration datagram and the descriptor that came with it (-1:
    // none; the caller keeps it and closes it): the reply, "OK\n" or
    // "ERR <reason>\n" (daemon_protocol.hpp).
    std::string handle_datagram(const char* data, size_t size, const PeerCredentials& peer,
                                int slot_fd);

    // One sampling pass: groups found or gone, registrations of dead
    // processes dropped, processes mapped, a compute step, external memory
    // charged, the OOM policy applied. The tool runs one every --interval.
    PassReport sample();

    // One compute step: NVML's utilization samples (read at most every
    // kPollNs) turned into busy time for the groups of the processes the
    // last sample() mapped, then every capped device's controller stepped
    // and its gate set. The tool runs one every kControlPeriodNs, the
    // in-process driver's period, so the gate moves in the same quanta
    // whoever drives it; sample() makes one of its own.
    void step_compute();
    static constexpr uint64_t kPollNs = 2 * kControlPeriodNs;

    // Gives up every group (the daemon's slots return their charges; gates
    // are opened and handed back to in-process sampling).
    void close_all();

    size_t group_count() const { return groups_.size(); }
    // Whether the daemon drives any group's compute gate (then it must step
    // every control period; otherwise a pass now and then is enough).
    bool driving() const;
    // Opens the group as discovery does: "" when it is watched, else why
    // not (the reason its log gives; a registration only hears "refused").
    std::string try_open(const std::string& group);
    // Verified registrations of a group (slot -> host pid), for tests.
    std::map<int, int32_t> registrations(const std::string& group) const;

    struct Group; // daemon.cpp

  private:
    Group* find_or_open(const std::string& name, std::string& reason);
    void discover();
    void prune(Group& group);
    void poll_utilization(uint64_t now_ns);
    void drive(Group& group, int device, uint64_t now_ns, PassDevice* shown);
    // Drops the groups whose state file was truncated under the daemon's
    // mappings (sigbus_guard.hpp), once each, with one log line.
    void drop_truncated();

    const Sysroot& root_;
    DaemonConfig config_;
    NvmlSource& nvml_;
    DaemonEffects& effects_;
    std::map<std::string, std::unique_ptr<Group>> groups_;
    // pid -> (group name or "", start time) from cgroup lookups, kept while
    // the pid stays on a GPU. A "no group" answer holds only while the set
    // of groups is the one it was looked up against (groups_generation_).
    struct CgroupCache {
        std::string group;
        uint64_t start_time = 0;
        uint64_t generation = 0;
        bool seen = false;
    };
    uint64_t groups_generation_ = 0; // counts the groups opened
    std::map<int32_t, CgroupCache> cgroup_cache_;
    // Groups that could not be opened, said once each (forgotten when their
    // directory goes).
    std::set<std::string> refused_;
    // Groups dropped because their processes truncated the state file: not
    // opened again while their directory stays.
    std::set<std::string> truncated_;
    bool said_too_many_ = false;

    // Compute between passes: NVML's devices as of the last pass, a sample
    // clock per device, and the processes the last pass mapped to groups.
    struct DeviceClock {
        SampleClock clock;
        uint64_t last_seen_us = 0; // CLOCK_REALTIME; starts at the clock's creation
        std::set<int32_t> sampled; // pids with samples since the last pass
    };
    std::vector<NvmlDevice> devices_;
    std::map<unsigned, DeviceClock> clocks_; // by NVML index
    DeviceClock& clock_of(unsigned index);   // created on first use
    std::map<int32_t, Group*> pid_group_;
    std::map<int32_t, uint32_t> sm_percent_; // each pid's latest sample
    uint64_t last_poll_ns_ = 0;
    // The last untrusted-process-list problem logged, so it is said once.
    std::string said_untrusted_;
};

// Pure helpers, public for tests.
// The start time (field 22) of /proc/<pid>/stat's text; nullopt if malformed.
std::optional<uint64_t> parse_start_time(std::string_view stat);
// Whether an fdinfo text holds an OFD write lock on (dev major, minor, ino)
// covering `offset`.
bool fdinfo_holds_lock(std::string_view fdinfo, unsigned major, unsigned minor, uint64_t ino,
                       uint64_t offset);
// What a caller lets process_holds_lock read over all its calls: the pids
// come from a state file, and a group could name a process with thousands
// of fds in each of its 1024 slots.
struct FdinfoBudget {
    size_t files = 0;
    size_t bytes = 0;
};
// Whether process `pid` (a pid of `root`'s /proc) holds that lock through
// one of its own fds: /proc/<pid>/fdinfo, at most 16384 of them, and no
// more than `budget` when given (false once it is spent). Also what
// `gpu-limit status` checks before it shows the host pid a state file names.
bool process_holds_lock(const Sysroot& root, int32_t pid, unsigned major, unsigned minor,
                        uint64_t ino, uint64_t offset, FdinfoBudget* budget = nullptr);
// Whether a /proc/<pid>/cgroup text names `group` as a whole word of a path.
bool cgroup_names_group(std::string_view cgroup, std::string_view group);
// Whether cgroup matching applies to the group name (12..64 hex digits).
bool container_id_like(std::string_view group);

// ---------------------------------------------------------------------------
// The registration socket: AF_UNIX SOCK_SEQPACKET, 0666 (container processes
// of any uid connect; SO_PEERCRED says who), non-blocking, bounded: at most
// kMaxConnections waiting for their datagram, each for at most a second
// from connect; a datagram of kDaemonMaxMessage bytes or more is refused
// unread, and only one descriptor beside it is kept.
//
// Bounded per peer, not per uid: rootful containers without a user
// namespace all connect as uid 0, so a bound per uid would let one
// container use up every other's share. A peer is the service layer's
// PeerKey (service/peer.hpp): its uid, and for uid 0 its pid namespace too
// (any other user makes namespaces at will): at most kPerPeer
// connections at a time and kRequestsPerSecond requests a second each. The
// last kRootReserve places of the table are only for the host's root (uid 0
// in the daemon's own user and pid namespaces: `gpu-limit status`, probes).

class RegistrationServer {
  public:
    static constexpr size_t kMaxConnections = 64;
    static constexpr size_t kRootReserve = 8;
    static constexpr size_t kPerPeer = 4;
    static constexpr uint32_t kRequestsPerSecond = 64;
    static constexpr uint64_t kConnectionTimeoutNs = 1'000'000'000;
    // Accepts per window of kAcceptWindowNs: past it, the listener is not
    // polled until the next window, and further clients wait in the
    // kernel's backlog (or are refused there when it is full). A flood of
    // connections, even ones refused at once, then costs the daemon a
    // bounded share of a CPU, and the compute steps keep their period.
    static constexpr int kAcceptsPerWindow = 128;
    static constexpr uint64_t kAcceptWindowNs = 25'000'000;
    // Peers whose request rate is remembered (the oldest are forgotten).
    static constexpr size_t kMaxRememberedPeers = 1024;

    // Binds `path` (removing a stale socket there first: the caller holds the
    // daemon's pid lock, so no other daemon uses it).
    static Result<RegistrationServer> listen(const std::string& path);

    RegistrationServer(RegistrationServer&&) = default;
    RegistrationServer& operator=(RegistrationServer&&) = default;
    ~RegistrationServer();

    // Readable when anything is to be done (an epoll fd: poll it).
    int fd() const { return epoll_.get(); }
    // Handles what is ready, without blocking. `handler` answers one
    // datagram and the descriptor sent with it (-1: none; closed by the
    // server afterwards).
    using Handler = std::string (*)(void* context, const char* data, size_t size,
                                    const PeerCredentials& peer, int passed_fd);
    void service(uint64_t now_ns, Handler handler, void* context);
    size_t connections() const { return connections_.size(); }
    // Removes the socket file (a clean stop).
    void unlink_socket();

    // Descriptors handed to the closing thread and not closed yet.
    size_t closes_pending() const;

  private:
    RegistrationServer() = default;
    void accept_some(uint64_t now_ns);
    // Closes `fd` on the closing thread (Closer, daemon_server.cpp): the
    // last close of what a peer sent can block for as long as the peer
    // likes, and this thread runs the compute steps.
    void close_later(UniqueFd fd);
    void answer(int fd, uint64_t now_ns, Handler handler, void* context);
    void drop(int fd);
    // Whether the peer may send one more request now (its bucket).
    bool take_request(const service::PeerKey& key, uint64_t now_ns);

    struct Closer;
    struct CloserDeleter {
        void operator()(Closer* closer) const;
    };
    std::unique_ptr<Closer, CloserDeleter> closer_;
    std::string path_;
    UniqueFd listener_;
    UniqueFd epoll_;
    UniqueFd proc_; // /proc, for the peers' pid namespaces
    int accepts_left_ = kAcceptsPerWindow;
    uint64_t window_start_ns_ = 0;
    bool listening_ = true; // the listener is in the epoll set
    uint64_t own_namespace_ = 0;
    struct Connection {
        UniqueFd fd;
        uint64_t accepted_ns = 0;
        service::PeerKey peer;
        bool host_root = false;
        PeerCredentials credentials;
    };
    std::map<int, Connection> connections_; // by fd
    std::map<service::PeerKey, size_t> open_by_peer_;
    struct Bucket {
        double tokens = 0;
        uint64_t refilled_ns = 0;
    };
    std::map<service::PeerKey, Bucket> buckets_;
};

} // namespace gpuinit::limit
