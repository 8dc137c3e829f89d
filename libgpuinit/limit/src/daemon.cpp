// `gpu-limit daemon`: what it decides (DaemonCore). Tool side: uses the
// standard library, never reached from libgpulimit.so (tests/limiter/abi
// checks its link map). See daemon.hpp for the trust model.
#include "gpuinit/limit/daemon.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/limit/daemon_protocol.hpp"
#include "gpuinit/limit/sigbus_guard.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace gpuinit::limit {

namespace {

constexpr uint32_t kSlotLive = 1;
constexpr uint32_t kRecordReady = 2;
constexpr uint32_t kDriverNone = 0;
constexpr uint32_t kDriverDaemon = 2;
// `gpu-limit status` looks at most this many fds of a process whose slot it
// checks (registration takes the descriptor itself and reads none).
constexpr size_t kMaxPeerFds = 16384;
constexpr size_t kFdinfoLimit = 64u << 10;
// Pids remembered from utilization samples between passes, per device.
constexpr size_t kMaxSampledPids = 4096;

bool is_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

char lower(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool same_uuid(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                              [](char x, char y) { return lower(x) == lower(y); });
}

// The OFD probe: whether another description holds the byte's write lock,
// the one a slot's owner takes. A read lock does not count: any open of the
// file, read-only ones too, can take one, so it proves nothing, and several
// descriptions can hold it at once.
bool byte_held(int fd, uint64_t offset) {
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_start = static_cast<off_t>(offset);
    lock.l_len = 1;
    if (::fcntl(fd, F_OFD_GETLK, &lock) != 0) {
        return false;
    }
    return lock.l_type == F_WRLCK;
}

// Whether no description other than fd's holds the byte (fd's own locks do
// not conflict with it).
bool byte_free_for(int fd, uint64_t offset) {
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_start = static_cast<off_t>(offset);
    lock.l_len = 1;
    return ::fcntl(fd, F_OFD_GETLK, &lock) == 0 && lock.l_type == F_UNLCK;
}

std::string pid_path(int32_t pid, std::string_view leaf) {
    return "proc/" + std::to_string(pid) + "/" + std::string(leaf);
}

std::string reply_error(std::string_view reason) {
    return "ERR " + std::string(reason) + "\n";
}

} // namespace

// ---------------------------------------------------------------------------
// Pure helpers.

std::optional<uint64_t> parse_start_time(std::string_view stat) {
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
    // the fields start after the last ')'. Field 3 is the state; 22 the
    // start time.
    size_t close = stat.rfind(')');
    if (close == std::string_view::npos) {
        return std::nullopt;
    }
    std::vector<std::string_view> fields = split_words(stat.substr(close + 1));
    if (fields.size() < 20) {
        return std::nullopt;
    }
    return parse_decimal(fields[19]);
}

bool fdinfo_holds_lock(std::string_view fdinfo, unsigned major, unsigned minor, uint64_t ino,
                       uint64_t offset) {
    // lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:10953017 1099511631877 1099511631877
    for (std::string_view line : split_lines(fdinfo)) {
        if (line.substr(0, 5) != "lock:") {
            continue;
        }
        std::vector<std::string_view> words = split_words(line.substr(5));
        auto kind = std::find(words.begin(), words.end(), "OFDLCK");
        auto mode = std::find(words.begin(), words.end(), "WRITE");
        if (kind == words.end() || mode == words.end() || words.end() - mode < 5) {
            continue;
        }
        std::vector<std::string_view> id = split_fields(mode[2], ':');
        if (id.size() != 3) {
            continue;
        }
        // fs/locks.c prints "%02x:%02x:%lu": the inode has no leading zero,
        // so "0077" is not inode 77's line and is not read as one.
        if (id[2].size() > 1 && id[2].front() == '0') {
            continue;
        }
        auto got_major = parse_hex_digits(id[0]);
        auto got_minor = parse_hex_digits(id[1]);
        auto got_ino = parse_decimal(id[2]);
        auto start = parse_decimal(mode[3]);
        std::optional<uint64_t> end = mode[4] == "EOF" ? UINT64_MAX : parse_decimal(mode[4]);
        if (got_major && got_minor && got_ino && start && end && *got_major == major &&
            *got_minor == minor && *got_ino == ino && *start <= offset && offset <= *end) {
            return true;
        }
    }
    return false;
}

bool process_holds_lock(const Sysroot& root, int32_t pid, unsigned major, unsigned minor,
                        uint64_t ino, uint64_t offset, FdinfoBudget* budget) {
    std::string dir = pid_path(pid, "fdinfo");
    auto fd = root.open_dir(dir);
    if (!fd) {
        return false;
    }
    DIR* stream = ::fdopendir(fd->get());
    if (stream == nullptr) {
        return false;
    }
    fd->release(); // the stream owns it now
    bool found = false;
    size_t looked = 0;
    while (!found && looked < kMaxPeerFds) {
        errno = 0;
        const dirent* entry = ::readdir(stream);
        if (entry == nullptr) {
            break;
        }
        std::string_view leaf = entry->d_name;
        if (!parse_decimal(leaf)) {
            continue;
        }
        ++looked;
        size_t most = kFdinfoLimit;
        if (budget != nullptr) {
            if (budget->files == 0 || budget->bytes == 0) {
                break;
            }
            --budget->files;
            most = std::min(most, budget->bytes);
        }
        auto text = root.read_file(dir + "/" + std::string(leaf), most);
        if (budget != nullptr) {
            budget->bytes -= text ? text->size() : most;
        }
        found = text && fdinfo_holds_lock(*text, major, minor, ino, offset);
    }
    ::closedir(stream);
    return found;
}

bool container_id_like(std::string_view group) {
    return group.size() >= 12 && group.size() <= 64 &&
           std::all_of(group.begin(), group.end(),
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool cgroup_names_group(std::string_view cgroup, std::string_view group) {
    if (group.empty()) {
        return false;
    }
    for (std::string_view line : split_lines(cgroup)) {
        // hierarchy-ID:controller-list:cgroup-path
        size_t first = line.find(':');
        size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
        if (second == std::string_view::npos) {
            continue;
        }
        std::string_view path = line.substr(second + 1);
        for (size_t at = path.find(group); at != std::string_view::npos;
             at = path.find(group, at + 1)) {
            bool starts = at == 0 || !is_alnum(path[at - 1]);
            size_t after = at + group.size();
            bool ends = after == path.size() || !is_alnum(path[after]);
            if (starts && ends) {
                return true;
            }
        }
    }
    return false;
}

// ---------------------------------------------------------------------------
// A group the daemon has open: GroupState for its own slot (charges go
// through the protocol), and a mapping of its own for the fields GroupState
// does not expose (slots' liveness and host pid, the compute records).

struct DaemonCore::Group {
    std::string name;
    UniqueFd fd;
    StateFile* file = nullptr;
    unsigned dev_major = 0;
    unsigned dev_minor = 0;
    uint64_t ino = 0;
    GroupState own;
    bool own_registered = false;
    // SIGBUS guards (sigbus_guard.hpp) of `file` and of own's mapping: the
    // group's processes may truncate the file under them.
    int file_guard = -1;
    int own_guard = -1;
    // The group's daemon byte (GroupState::try_daemon_lock): held while the
    // daemon drives any of its gates, so the in-process drivers stand back.
    bool daemon_locked = false;
    bool said_daemon_lock = false;

    struct Registration {
        int32_t pid = 0;
        uint64_t start_time = 0;
    };
    std::map<int, Registration> registered; // by slot

    struct Device {
        ShareController controller;
        uint32_t cap_percent = 0;
        bool driving = false;
        int nvml_index = -1;          // -1: not among NVML's devices
        uint64_t pending_busy_ns = 0; // measured since the last step
        uint64_t over_since_ns = 0;   // 0: not over its cap
        uint64_t external = 0;
    };
    Device devices[kMaxGroupDevices];

    ~Group() {
        if (file != nullptr) {
            for (int d = 0; d < kMaxGroupDevices; ++d) {
                ComputeRecord& record = file->header.compute[d];
                if (devices[d].driving) {
                    // Hand the gate back to in-process sampling, open.
                    record.driver.store(kDriverNone, std::memory_order_release);
                    gate_set(record, true);
                }
                if (devices[d].external != 0) {
                    record.external_bytes.store(0, std::memory_order_relaxed);
                }
            }
            for (const auto& [slot, registration] : registered) {
                int32_t expected = registration.pid;
                file->slots[slot].host_pid.compare_exchange_strong(expected, 0);
            }
            sigbus_guard::unguard(file_guard);
            ::munmap(file, sizeof(StateFile));
        }
        if (daemon_locked) {
            own.release_daemon_lock();
        }
        own.close(); // returns the external charges
        sigbus_guard::unguard(own_guard);
    }

    // Whether the file was truncated under one of the mappings (they read
    // zeros now).
    bool truncated() const {
        return sigbus_guard::poisoned(file_guard) || sigbus_guard::poisoned(own_guard);
    }

    bool slot_owned(int slot) const {
        return file->slots[slot].state.load(std::memory_order_acquire) == kSlotLive &&
               byte_held(fd.get(), file->header.lock_base + static_cast<uint64_t>(slot));
    }

    // Whether `passed`, a descriptor a peer handed over, is an open of this
    // group's file whose description holds slot's lock: one fstat and three
    // fcntl, whatever the peer holds. Only one description holds a write
    // lock at a time; the daemon's own open sees it held by another one,
    // and the passed one sees no other holder, so the holder is the passed
    // one. The second look of the daemon's open closes the window in which
    // the owner let go between the first two.
    bool held_through(int passed, int slot) const {
        // AT_STATX_DONT_SYNC: the attributes the kernel has, without asking
        // the file system. A plain fstat of a file on a FUSE mount the
        // sender serves waits for the sender's answer (GETATTR), for as long
        // as it likes, on the thread that runs the compute steps.
        struct statx status {};
        if (passed < 0 ||
            ::statx(passed, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE | STATX_INO,
                    &status) != 0 ||
            !S_ISREG(status.stx_mode) || status.stx_ino != ino ||
            status.stx_dev_major != dev_major || status.stx_dev_minor != dev_minor || slot < 0 ||
            slot >= kMaxSlots) {
            return false;
        }
        const uint64_t offset = file->header.lock_base + static_cast<uint64_t>(slot);
        return slot_owned(slot) && byte_free_for(passed, offset) && byte_held(fd.get(), offset);
    }
};

namespace {

// Opens <state_dir>/<group>/state for the daemon without creating anything
// or following a symlink, by the trust rule of daemon.hpp ("Group state"):
// the state dir is the daemon's own (its uid's, writable by nobody else);
// the group directory directly under it is a real directory (O_NOFOLLOW,
// used only as a dirfd) writable by nobody but its owner, whoever that is;
// its "state" is a regular file (checked before the open, so no FIFO or
// device is ever opened) with one link, owned by the directory's owner and
// writable by nobody else, of a state file's size. `second` is another open
// of the same file (dev and inode checked) for the daemon's GroupState.
bool open_group_file(const std::string& state_dir, const std::string& name, UniqueFd& first,
                     UniqueFd& second, struct stat& status, std::string& reason) {
    reason = "untrusted-state";
    UniqueFd base(::open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    struct stat base_status {};
    if (!base.valid() || ::fstat(base.get(), &base_status) != 0 ||
        base_status.st_uid != ::geteuid() || (base_status.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        reason = "untrusted-state-dir";
        return false;
    }
    UniqueFd directory(
        ::openat(base.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!directory.valid()) {
        reason = errno == ENOENT ? "no-such-group" : "untrusted-state";
        return false;
    }
    struct stat dir_status {};
    if (::fstat(directory.get(), &dir_status) != 0 || !S_ISDIR(dir_status.st_mode) ||
        (dir_status.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return false;
    }
    struct stat before {};
    if (::fstatat(directory.get(), "state", &before, AT_SYMLINK_NOFOLLOW) != 0) {
        reason = errno == ENOENT ? "no-such-group" : "untrusted-state";
        return false;
    }
    if (!S_ISREG(before.st_mode)) {
        return false;
    }
    constexpr int kFlags = O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
    first.reset(::openat(directory.get(), "state", kFlags));
    second.reset(::openat(directory.get(), "state", kFlags));
    struct stat again {};
    if (!first.valid() || !second.valid() || ::fstat(first.get(), &status) != 0 ||
        ::fstat(second.get(), &again) != 0) {
        return false;
    }
    return S_ISREG(status.st_mode) && status.st_dev == before.st_dev &&
           status.st_ino == before.st_ino && again.st_dev == status.st_dev &&
           again.st_ino == status.st_ino && status.st_nlink == 1 &&
           status.st_uid == dir_status.st_uid && (status.st_mode & (S_IWGRP | S_IWOTH)) == 0 &&
           static_cast<uint64_t>(status.st_size) == sizeof(StateFile);
}

// Maps the group's state (open_group_file's rule) and opens the daemon's
// GroupState on the same file.
bool map_group(const std::string& state_dir, const std::string& name, DaemonCore::Group& group,
               std::string& reason) {
    UniqueFd fd;
    UniqueFd for_state;
    struct stat status {};
    if (!open_group_file(state_dir, name, fd, for_state, status, reason)) {
        return false;
    }
    void* address =
        ::mmap(nullptr, sizeof(StateFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (address == MAP_FAILED) {
        reason = "cannot-map-state";
        return false;
    }
    // Guarded before the first read: the group's processes may have
    // truncated the file since it was checked.
    int guard = sigbus_guard::guard(address, sizeof(StateFile));
    if (guard < 0) {
        ::munmap(address, sizeof(StateFile));
        reason = "too-many-groups";
        return false;
    }
    auto* file = static_cast<StateFile*>(address);
    if (file->header.magic.load(std::memory_order_acquire) != kStateMagic ||
        file->header.version != kStateVersion || file->header.slot_count != kMaxSlots ||
        file->header.device_count_max != kMaxGroupDevices || sigbus_guard::poisoned(guard)) {
        sigbus_guard::unguard(guard);
        ::munmap(address, sizeof(StateFile));
        reason = "state-version-mismatch";
        return false;
    }
    group.fd = std::move(fd);
    group.file = file;
    group.file_guard = guard;
    group.dev_major = ::major(status.st_dev);
    group.dev_minor = ::minor(status.st_dev);
    group.ino = status.st_ino;
    std::string shown = state_dir + "/" + name + "/state";
    Problem problem;
    // Guarded between its mmap and its first read (the hook), so no window
    // is left in which a truncation could kill the daemon.
    StateMapHook guard_on_map;
    guard_on_map.context = &group.own_guard;
    guard_on_map.call = [](void* handle, void* mapped, size_t length) {
        *static_cast<int*>(handle) = sigbus_guard::guard(mapped, length);
    };
    bool opened = group.own.open_vetted(for_state.release(), shown.c_str(), problem, guard_on_map);
    if (!opened || group.own_guard < 0 || sigbus_guard::poisoned(group.own_guard)) {
        reason = !opened || group.own_guard >= 0 ? "untrusted-state" : "too-many-groups";
        return false; // ~Group unguards after closing own's mapping
    }
    return true;
}

std::optional<uint64_t> start_time_of(const Sysroot& root, int32_t pid) {
    auto text = root.read_file(pid_path(pid, "stat"), 4096);
    if (!text) {
        return std::nullopt;
    }
    return parse_start_time(*text);
}

} // namespace

// ---------------------------------------------------------------------------

const char* listing_name(ProcessListing listing) {
    switch (listing) {
    case ProcessListing::Listed:
        return "listed";
    case ProcessListing::Failed:
        return "failed";
    case ProcessListing::Untrusted:
        return "untrusted";
    }
    return "?";
}

DaemonCore::DaemonCore(const Sysroot& root, DaemonConfig config, NvmlSource& nvml,
                       DaemonEffects& effects)
    : root_(root), config_(std::move(config)), nvml_(nvml), effects_(effects) {
    // A group's processes can truncate its state file under the daemon's
    // mappings: the guard turns the SIGBUS that would kill the daemon (and
    // leave every group on the host undriven) into zeros and a dropped group.
    if (!sigbus_guard::install()) {
        effects_.log(format("gpu-limit daemon: cannot install the SIGBUS guard: %s; a group "
                            "that truncates its state file kills the daemon",
                            std::strerror(errno)));
    }
}

DaemonCore::~DaemonCore() {
    close_all();
}

void DaemonCore::close_all() {
    pid_group_.clear();
    groups_.clear();
}

std::map<int, int32_t> DaemonCore::registrations(const std::string& group) const {
    std::map<int, int32_t> out;
    auto found = groups_.find(group);
    if (found != groups_.end()) {
        for (const auto& [slot, registration] : found->second->registered) {
            out[slot] = registration.pid;
        }
    }
    return out;
}

DaemonCore::Group* DaemonCore::find_or_open(const std::string& name, std::string& reason) {
    if (auto found = groups_.find(name); found != groups_.end()) {
        return found->second.get();
    }
    if (truncated_.count(name) != 0) {
        reason = "state-truncated";
        return nullptr;
    }
    if (groups_.size() >= config_.max_groups) {
        reason = "too-many-groups";
        return nullptr;
    }
    auto group = std::make_unique<Group>();
    group->name = name;
    // Never creates anything: a request for a group that does not exist
    // creates no directory.
    if (!map_group(config_.state_dir, name, *group, reason)) {
        return nullptr;
    }
    Group* raw = group.get();
    groups_[name] = std::move(group);
    ++groups_generation_;
    return raw;
}

bool DaemonCore::driving() const {
    for (const auto& [name, group] : groups_) {
        for (const Group::Device& device : group->devices) {
            if (device.driving) {
                return true;
            }
        }
    }
    return false;
}

std::string DaemonCore::try_open(const std::string& group) {
    std::string reason;
    return find_or_open(group, reason) != nullptr ? std::string() : reason;
}

std::string DaemonCore::handle_datagram(const char* data, size_t size, const PeerCredentials& peer,
                                        int slot_fd) {
    RegisterRequest request;
    const char* why = nullptr;
    if (!parse_register_request(data, size, request, why)) {
        return reply_error(why);
    }
    if (peer.pid <= 0) {
        return reply_error("no-peer-pid");
    }
    // From here on every refusal is the same: a sender that cannot prove
    // the slot learns nothing about the group or its slots.
    if (slot_fd < 0) {
        return kReplyRefused;
    }
    std::string reason;
    Group* group = find_or_open(request.group, reason);
    if (group == nullptr || !group->held_through(slot_fd, request.slot)) {
        return kReplyRefused;
    }
    auto start = start_time_of(root_, peer.pid);
    if (!start) {
        return kReplyRefused;
    }
    int slot = request.slot;
    group->registered[slot] = Group::Registration{peer.pid, *start};
    pid_group_[peer.pid] = group; // its samples count from the next step on
    group->file->slots[slot].host_pid.store(peer.pid, std::memory_order_release);
    return kReplyOk;
}

void DaemonCore::discover() {
    UniqueFd fd(::open(config_.state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    std::map<std::string, bool> present;
    if (fd.valid()) {
        DIR* stream = ::fdopendir(fd.get());
        if (stream != nullptr) {
            int dir_fd = fd.release();
            for (const dirent* entry = ::readdir(stream); entry != nullptr;
                 entry = ::readdir(stream)) {
                std::string name = entry->d_name;
                if (!is_group_name(name.c_str(), name.size())) {
                    continue;
                }
                struct stat status {};
                std::string state = name + "/state";
                if (::fstatat(dir_fd, state.c_str(), &status, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(status.st_mode)) {
                    present[name] = true;
                }
            }
            ::closedir(stream);
        }
    }
    // Gone (the container ended and its directory was removed), or replaced.
    for (auto it = groups_.begin(); it != groups_.end();) {
        struct stat status {};
        std::string state = config_.state_dir + "/" + it->first + "/state";
        bool same = ::lstat(state.c_str(), &status) == 0 && status.st_ino == it->second->ino &&
                    ::major(status.st_dev) == it->second->dev_major &&
                    ::minor(status.st_dev) == it->second->dev_minor;
        it = same ? std::next(it) : groups_.erase(it);
    }
    for (const auto& [name, ignored] : present) {
        if (groups_.count(name) != 0 || truncated_.count(name) != 0) {
            continue;
        }
        if (groups_.size() >= config_.max_groups) {
            if (!said_too_many_) {
                effects_.log(format("gpu-limit daemon: more than %zu groups under %s; the rest "
                                    "are not watched",
                                    config_.max_groups, config_.state_dir.c_str()));
                said_too_many_ = true;
            }
            break;
        }
        std::string reason;
        if (find_or_open(name, reason) == nullptr && refused_.insert(name).second) {
            effects_.log("gpu-limit daemon: group " + name + " is not watched: " + reason);
        }
    }
    // Forget refusals of names that are gone, so the set stays bounded.
    for (auto it = refused_.begin(); it != refused_.end();) {
        it = present.count(*it) != 0 ? std::next(it) : refused_.erase(it);
    }
    for (auto it = truncated_.begin(); it != truncated_.end();) {
        it = present.count(*it) != 0 ? std::next(it) : truncated_.erase(it);
    }
}

void DaemonCore::drop_truncated() {
    for (auto it = groups_.begin(); it != groups_.end();) {
        if (!it->second->truncated()) {
            ++it;
            continue;
        }
        effects_.log("gpu-limit daemon: group " + it->first +
                     ": its state file was truncated by one of its processes; the group is "
                     "dropped and its gates are no longer driven by the daemon (the library "
                     "falls back on in-process driving)");
        Group* gone = it->second.get();
        for (auto member = pid_group_.begin(); member != pid_group_.end();) {
            member = member->second == gone ? pid_group_.erase(member) : std::next(member);
        }
        truncated_.insert(it->first);
        it = groups_.erase(it);
    }
}

void DaemonCore::prune(Group& group) {
    for (auto it = group.registered.begin(); it != group.registered.end();) {
        const auto& [slot, registration] = *it;
        auto start = start_time_of(root_, registration.pid);
        bool alive = group.slot_owned(slot) && start && *start == registration.start_time;
        if (alive) {
            ++it;
            continue;
        }
        int32_t expected = registration.pid;
        group.file->slots[slot].host_pid.compare_exchange_strong(expected, 0);
        it = group.registered.erase(it);
    }
}

DaemonCore::DeviceClock& DaemonCore::clock_of(unsigned index) {
    auto found = clocks_.find(index);
    if (found == clocks_.end()) {
        // NVML keeps seconds of samples, those of the time before the
        // daemon (an in-process driver charged them already): only samples
        // from now on are the daemon's to charge.
        found = clocks_.emplace(index, DeviceClock{}).first;
        found->second.last_seen_us = effects_.realtime_us();
    }
    return found->second;
}

void DaemonCore::poll_utilization(uint64_t now_ns) {
    if (last_poll_ns_ != 0 && now_ns - last_poll_ns_ < kPollNs) {
        return;
    }
    last_poll_ns_ = now_ns;
    for (const NvmlDevice& device : devices_) {
        DeviceClock& clock = clock_of(device.index);
        std::vector<NvmlSample> samples;
        if (!nvml_.utilization(device.index, clock.last_seen_us, samples)) {
            continue;
        }
        uint64_t newest = clock.last_seen_us;
        const uint64_t now_us = effects_.realtime_us();
        for (const NvmlSample& sample : samples) {
            if (sample.pid <= 0 || !plausible_sample_time(sample.timestamp_us, now_us)) {
                continue;
            }
            newest = std::max(newest, sample.timestamp_us);
            // Every process's samples teach the clock the window; the
            // mapped ones' busy time goes to their group's device.
            uint64_t busy = clock.clock.busy_ns(static_cast<uint32_t>(sample.pid),
                                                sample.timestamp_us, sample.sm_percent);
            if (clock.sampled.size() < kMaxSampledPids) {
                clock.sampled.insert(sample.pid);
            }
            if (sm_percent_.size() < kMaxSampledPids || sm_percent_.count(sample.pid) != 0) {
                sm_percent_[sample.pid] = std::min<uint32_t>(sample.sm_percent, 100);
            }
            auto member = pid_group_.find(sample.pid);
            if (member == pid_group_.end() || busy == 0) {
                continue;
            }
            for (Group::Device& state : member->second->devices) {
                if (state.nvml_index == static_cast<int>(device.index)) {
                    state.pending_busy_ns += busy;
                }
            }
        }
        clock.last_seen_us = newest;
    }
}

void DaemonCore::drive(Group& group, int d, uint64_t now_ns, PassDevice* shown) {
    Group::Device& state = group.devices[d];
    ComputeRecord& compute = group.file->header.compute[d];
    if (state.nvml_index < 0) {
        return; // not measurable now: left as it is until NVML shows it again
    }
    // The group's processes can write the record: any value is possible.
    uint32_t cap_percent = compute.cap_percent.load(std::memory_order_relaxed);
    bool cap_on = cap_percent >= 1 && cap_percent <= 95;
    if (cap_on && !group.daemon_locked) {
        group.daemon_locked = group.own.try_daemon_lock();
        if (!group.daemon_locked && !group.said_daemon_lock) {
            effects_.log("gpu-limit daemon: group " + group.name +
                         ": another daemon holds its daemon lock; its gates are left to it");
            group.said_daemon_lock = true;
        }
    }
    if (cap_on && group.daemon_locked) {
        if (!state.driving || state.cap_percent != cap_percent) {
            // A takeover from a live in-process driver (its heartbeat is
            // fresh): its balance carries on, so that the group's debt is
            // not forgiven, nor a fresh start charged twice for work that
            // driver already measured.
            bool takeover = !state.driving && heartbeat_fresh(compute, now_ns);
            state.controller.reset(cap_percent, now_ns);
            if (takeover) {
                state.controller.resume(compute.tokens_ns.load(std::memory_order_relaxed));
            }
            state.cap_percent = cap_percent;
            state.driving = true;
            state.pending_busy_ns = 0;
        }
        uint64_t busy = state.pending_busy_ns;
        state.pending_busy_ns = 0;
        bool open = drive_step(compute, state.controller, now_ns, busy, kDriverDaemon);
        if (shown != nullptr) {
            shown->busy_ns = busy;
            shown->gate_open = open;
            shown->driven = true;
        }
    } else if (state.driving) {
        compute.driver.store(kDriverNone, std::memory_order_release);
        gate_set(compute, true);
        state.driving = false;
    }
}

void DaemonCore::step_compute() {
    uint64_t now = effects_.monotonic_ns();
    poll_utilization(now);
    for (auto& [name, group] : groups_) {
        for (int d = 0; d < kMaxGroupDevices; ++d) {
            drive(*group, d, now, nullptr);
        }
    }
    drop_truncated();
}

PassReport DaemonCore::sample() {
    PassReport report;
    uint64_t now = effects_.monotonic_ns();
    report.nvml = nvml_.available();
    devices_.clear();
    if (report.nvml) {
        devices_ = nvml_.devices();
    }
    // Samples first, on the last pass's mapping (discover() may close
    // groups: the mapping goes before it does).
    poll_utilization(now);
    pid_group_.clear();
    discover();
    for (auto& [name, group] : groups_) {
        prune(*group);
    }

    // Which group each GPU process belongs to: registrations first, then
    // cgroups (looked up once per process while it stays on a GPU).
    struct Member {
        Group* group = nullptr;
        bool registered = false;
        uint64_t start_time = 0;
    };
    std::map<int32_t, Member> members;
    for (auto& [name, group] : groups_) {
        for (const auto& [slot, registration] : group->registered) {
            members[registration.pid] = Member{group.get(), true, registration.start_time};
        }
    }
    for (auto& [pid, cached] : cgroup_cache_) {
        cached.seen = false;
    }
    auto member_of = [&](int32_t pid) -> Member* {
        if (auto found = members.find(pid); found != members.end()) {
            return &found->second;
        }
        auto cached = cgroup_cache_.find(pid);
        auto start = start_time_of(root_, pid);
        if (!start) {
            return nullptr; // gone already, or not in our pid namespace
        }
        // A "no group" answer is asked again once a group was opened since:
        // the process may have started before its group's state file.
        if (cached == cgroup_cache_.end() || cached->second.start_time != *start ||
            (cached->second.group.empty() && cached->second.generation != groups_generation_)) {
            CgroupCache entry;
            entry.start_time = *start;
            entry.generation = groups_generation_;
            if (auto text = root_.read_file(pid_path(pid, "cgroup"), kSmallFileLimit)) {
                for (auto& [name, group] : groups_) {
                    if (container_id_like(name) && cgroup_names_group(*text, name)) {
                        entry.group = name;
                        break;
                    }
                }
            }
            cached = cgroup_cache_.insert_or_assign(pid, entry).first;
        }
        cached->second.seen = true;
        auto group = groups_.find(cached->second.group);
        if (cached->second.group.empty() || group == groups_.end()) {
            return nullptr;
        }
        return &(members[pid] = Member{group->second.get(), false, *start});
    };

    // Per group and NVML device: the group's processes there, from NVML's
    // process list and from the utilization samples since the last pass (a
    // process NVML samples has a context there; without a process list,
    // those are all there is, memory unknown, so compute is driven and
    // memory left alone).
    struct Seen {
        uint64_t measured = 0;
        bool measured_known = false;
        std::vector<PassProcess> processes;
    };
    std::map<std::pair<Group*, std::string>, Seen> seen;
    std::set<int32_t> on_gpu;
    // Devices whose process lists do not check out: no memory is charged
    // from what they say, and what was charged from them is returned.
    std::set<std::string> untrusted;
    for (const NvmlDevice& device : devices_) {
        std::vector<NvmlProcess> processes;
        ProcessListDetail detail;
        ProcessListing listing = nvml_.processes(device.index, processes, detail);
        bool listed = listing == ProcessListing::Listed;
        if (listing == ProcessListing::Untrusted) {
            processes.clear();
            untrusted.insert(device.uuid);
            report.process_lists_problem = detail.problem;
        }
        report.nvml_devices.push_back({device.index, device.uuid, listing, detail, processes});
        DeviceClock& clock = clock_of(device.index);
        for (int32_t pid : clock.sampled) {
            if (std::none_of(processes.begin(), processes.end(),
                             [&](const NvmlProcess& known) { return known.pid == pid; })) {
                processes.push_back({pid, kNvmlUnknownBytes});
            }
        }
        clock.sampled.clear();
        if (!listed && processes.empty()) {
            continue;
        }
        for (const NvmlProcess& process : processes) {
            Member* member = process.pid > 0 ? member_of(process.pid) : nullptr;
            if (member == nullptr) {
                continue;
            }
            on_gpu.insert(process.pid);
            Seen& entry = seen[{member->group, device.uuid}];
            PassProcess shown;
            shown.pid = process.pid;
            shown.registered = member->registered;
            if (process.used_bytes != kNvmlUnknownBytes) {
                shown.used_bytes = process.used_bytes;
                entry.measured += process.used_bytes;
                entry.measured_known = true;
            }
            if (auto found = sm_percent_.find(process.pid); found != sm_percent_.end()) {
                shown.sm_percent = found->second;
            }
            entry.processes.push_back(shown);
        }
    }
    if (report.process_lists_problem != said_untrusted_) {
        effects_.log(report.process_lists_problem.empty()
                         ? "gpu-limit daemon: NVML's process lists check out again; memory "
                           "outside the interposer is charged"
                         : "gpu-limit daemon: " + report.process_lists_problem +
                               "; memory outside the interposer is not charged");
        said_untrusted_ = report.process_lists_problem;
    }
    for (auto it = cgroup_cache_.begin(); it != cgroup_cache_.end();) {
        it = it->second.seen ? std::next(it) : cgroup_cache_.erase(it);
    }
    for (auto it = sm_percent_.begin(); it != sm_percent_.end();) {
        it = on_gpu.count(it->first) != 0 ? std::next(it) : sm_percent_.erase(it);
    }
    // The mapping the compute steps until the next pass use: every member,
    // registered or found by cgroup (a registered process may not show in
    // NVML's list yet and still have samples).
    for (const auto& [pid, member] : members) {
        pid_group_[pid] = member.group;
    }
    // Each group device's NVML index, for the compute steps.
    for (auto& [name, group] : groups_) {
        for (int d = 0; d < kMaxGroupDevices; ++d) {
            const DeviceRecord& record = group->file->header.devices[d];
            group->devices[d].nvml_index = -1;
            if (!report.nvml || record.state.load(std::memory_order_acquire) != kRecordReady) {
                continue;
            }
            std::string uuid(record.uuid, ::strnlen(record.uuid, kUuidSize));
            for (const NvmlDevice& device : devices_) {
                if (same_uuid(device.uuid, uuid)) {
                    group->devices[d].nvml_index = static_cast<int>(device.index);
                    break;
                }
            }
        }
    }

    for (auto& [name, group_pointer] : groups_) {
        Group& group = *group_pointer;
        PassGroup shown_group;
        shown_group.name = name;
        shown_group.registered = group.registered.size();
        for (int d = 0; d < kMaxGroupDevices && report.nvml; ++d) {
            const DeviceRecord& record = group.file->header.devices[d];
            if (record.state.load(std::memory_order_acquire) != kRecordReady) {
                break; // records fill in order
            }
            if (group.devices[d].nvml_index < 0) {
                continue;
            }
            std::string uuid(record.uuid, ::strnlen(record.uuid, kUuidSize));
            auto device =
                std::find_if(devices_.begin(), devices_.end(), [&](const NvmlDevice& nvml) {
                    return static_cast<int>(nvml.index) == group.devices[d].nvml_index;
                });
            Seen entry;
            if (auto found = seen.find({&group, device->uuid}); found != seen.end()) {
                entry = std::move(found->second);
            }
            Group::Device& state = group.devices[d];
            ComputeRecord& compute = group.file->header.compute[d];
            PassDevice shown;
            shown.uuid = uuid;
            shown.processes = entry.processes;
            shown.cap_percent = compute.cap_percent.load(std::memory_order_relaxed);

            // Compute: step the group's controller and drive the gate.
            drive(group, d, now, &shown);

            // Memory: what NVML measured for the group's processes beyond
            // what the interposers counted goes on the daemon's slot.
            uint64_t own_charge = group.own_registered ? group.own.own_charged(d) : 0;
            uint64_t used = group.own.group_used(d);
            uint64_t counted = used >= own_charge ? used - own_charge : 0;
            shown.counted = counted;
            shown.measured = entry.measured;
            const bool trusted = untrusted.count(device->uuid) == 0;
            if (!trusted || entry.measured_known || entry.processes.empty()) {
                uint64_t external =
                    trusted && entry.measured > counted ? entry.measured - counted : 0;
                if (external != own_charge) {
                    Problem problem;
                    if (!group.own_registered && group.own.register_process(problem)) {
                        group.own_registered = true;
                    } else if (!group.own_registered) {
                        effects_.log("gpu-limit daemon: group " + name +
                                     ": cannot take a slot for external memory: " + problem.text);
                    }
                    if (group.own_registered) {
                        if (external > own_charge) {
                            group.own.charge_forced(d, external - own_charge);
                        } else {
                            group.own.uncharge(d, own_charge - external);
                        }
                        state.external = external;
                        compute.external_bytes.store(external, std::memory_order_relaxed);
                    }
                }
            }
            shown.external = state.external;

            // OOM policy: over the cap for longer than the grace period.
            uint64_t cap = group.own.cap(d);
            uint64_t usage = group.own.group_used(d);
            shown.cap = cap;
            shown.over_cap = cap != 0 && usage > cap;
            if (!shown.over_cap) {
                state.over_since_ns = 0;
            } else if (state.over_since_ns == 0) {
                state.over_since_ns = now == 0 ? 1 : now;
            } else if (now - state.over_since_ns >= config_.oom_grace_ns) {
                std::string line = format(
                    "gpu-limit daemon: group %s over its cap on %s for %llu ms (usage %llu of "
                    "%llu bytes, %llu of them outside the interposer)",
                    name.c_str(), uuid.c_str(),
                    static_cast<unsigned long long>((now - state.over_since_ns) / 1'000'000),
                    static_cast<unsigned long long>(usage), static_cast<unsigned long long>(cap),
                    static_cast<unsigned long long>(state.external));
                effects_.log(line);
                report.actions.push_back(line);
                std::vector<std::pair<int32_t, uint64_t>> victims;
                for (const auto& [pid, member] : members) {
                    if (member.group == &group) {
                        victims.emplace_back(pid, member.start_time);
                    }
                }
                if (!config_.oom_script.empty()) {
                    int32_t first = victims.empty() ? 0 : victims.front().first;
                    std::vector<std::string> variables = {
                        format("GPU_LIMIT_OOM_PID=%d", first),
                        "GPU_LIMIT_OOM_DEVICE=" + uuid,
                        "GPU_LIMIT_OOM_REQUEST=0",
                        format("GPU_LIMIT_OOM_USAGE=%llu", static_cast<unsigned long long>(usage)),
                        format("GPU_LIMIT_OOM_CAP=%llu", static_cast<unsigned long long>(cap)),
                        "GPU_LIMIT_OOM_GROUP=" + name};
                    std::string action = "gpu-limit daemon: running the OOM script " +
                                         config_.oom_script + " for group " + name;
                    effects_.log(action);
                    report.actions.push_back(action);
                    effects_.run_oom_script(config_.oom_script, variables);
                }
                for (const auto& [pid, start_time] : victims) {
                    std::string action =
                        format("gpu-limit daemon: SIGKILL pid %d of group %s", pid, name.c_str());
                    effects_.log(action);
                    report.actions.push_back(action);
                    effects_.kill_process(pid, start_time);
                }
                state.over_since_ns = 0; // a new grace period before acting again
            }
            shown_group.devices.push_back(std::move(shown));
        }
        report.groups.push_back(std::move(shown_group));
    }
    drop_truncated();
    return report;
}

} // namespace gpuinit::limit
