// The shared state of a limit group: see group_state.hpp for the layout.
//
// Freestanding: no heap, no exceptions, nothing from libstdc++.so, and only
// plain libc entry points old enough for libgpulimit.so's GLIBC_2.17
// baseline. fstat and fcntl go through syscall(): glibc 2.33 gave fstat a
// new symbol version, and fcntl's may be redirected to fcntl64 (2.28).
//
// # The protocol
//
// Device d's total_word holds a tag (owner slot + 1, 11 bits) above the
// bytes (53 bits). A slot's charged[d] holds its bytes, in bit 63 the
// in-flight flag and in bit 62 the applied mark; op[d] holds the in-flight
// operation (bytes, bit 63 for a removal). An operation of slot s on device
// d:
//   (1) set the flag of charged[d] by CAS (the threads of s take turns here),
//       then write op[d];
//   (2) CAS the total from an untagged value t to tag(s) | (t +/- bytes);
//       a tagged total means another slot is between (2) and (4): wait (a
//       dead tag owner is resolved, see below); over the cap: clear the flag
//       and stop (nothing changed);
//   (3) store charged[d] = (c +/- bytes) | flag | applied;
//   (4) clear the tag (only s ever clears tag(s));
//   (5) store charged[d] = c +/- bytes, which ends the operation.
// The flag is held from (1) to (5), so tag(s) on device d exists only while
// the flag is set, and belongs to the operation the flag and op[d] describe:
// another thread of s cannot start on d between (3) and (4).
//
// Invariant at every instruction boundary, for every device: the total's
// bytes equal the sum over slots of their contribution, where a slot's
// contribution is charged[d] without the flag and mark, plus (or minus)
// op[d] when the flag is set, the mark is not, and the total carries the
// slot's tag.
//
// # Reclaiming a dead slot x
//
// The reclaimer holds x's OFD lock: x's owner is dead, and no other process
// can register or reclaim x until it lets go. It first resolves x on every
// device (no waiting), then returns x's charges by running the same protocol
// for x (a removal of the whole charge). Where x's owner died, per device:
//   - before (1) or after (5): no flag, no tag: contribution is charged[d];
//   - after (1), before (2), or in the over-cap exit before the flag was
//     cleared: flag set, the total not tagged by x: the total does not
//     include the operation; clearing the flag makes charged[d] the
//     contribution;
//   - after (2), before (3): flag set, no mark, tag(x): the total includes
//     the operation; the reclaimer applies op[d] to the charge, clears the
//     flag, then the tag;
//   - after (3), before (4): flag and mark, tag(x): the reclaimer clears
//     the flag and mark, then the tag;
//   - after (4), before (5): flag and mark, no tag: it clears them.
// A reclaimer that dies between clearing the flag and the tag leaves no flag
// and tag(x), which the next one clears. After resolution charged[d] is
// exactly x's share of the total, with no flag and no tag of x anywhere, and
// the removal returns it once. The reclaimer's removal is an operation of x
// with the same steps, so the next reclaimer resolves it the same way, and
// resolution itself is idempotent. A slot whose state is not live has no
// charges: registration and reclaim mark a slot live or released only after
// its charges are zero.
//
// Waiting on a tagged total never waits on the dead: after a while the
// waiter tries the tag owner's lock, and if it gets it, resolves that slot
// (which removes the tag) and returns its charges.

#include "gpuinit/limit/group_state.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace gpuinit::limit {

namespace {

constexpr int kTagShift = 53;
constexpr uint64_t kBytesMask = (uint64_t{1} << kTagShift) - 1;
constexpr uint64_t kInFlight = uint64_t{1} << 63; // in charged[d]
constexpr uint64_t kApplied = uint64_t{1} << 62;  // in charged[d]
constexpr uint64_t kChargeMask = ~(kInFlight | kApplied);
constexpr uint64_t kRemoval = uint64_t{1} << 63; // in op[d]
static_assert(kMaxSlots + 1 < (1 << (64 - kTagShift)), "the tag holds slot + 1");

// Lock bytes, past the end of the file (a lock needs no data under it). The
// init byte is the same in every version of the layout, so that processes of
// two versions starting together still exclude each other while one of them
// initializes.
constexpr off_t kInitLockOffset = off_t{1} << 40;
constexpr off_t kDeviceLockOffset = kInitLockOffset + 1;
// The compute driver's election: one byte per device, one for the daemon.
constexpr off_t kControllerLockOffset = kInitLockOffset + 2; // + device index
constexpr off_t kDaemonLockOffset = kControllerLockOffset + kMaxGroupDevices;
constexpr uint64_t kLockBase = uint64_t{kInitLockOffset} + 4096;
static_assert(kDaemonLockOffset < off_t(kLockBase), "the election bytes precede the slots'");

constexpr uint32_t kSlotNeverUsed = 0;
constexpr uint32_t kSlotLive = 1;
constexpr uint32_t kSlotReleased = 2;
constexpr uint32_t kRecordEmpty = 0;
constexpr uint32_t kRecordFilling = 1;
constexpr uint32_t kRecordReady = 2;

constexpr int kInitLockTimeoutMs = 5000;

uint64_t tag_of(int slot) {
    return static_cast<uint64_t>(slot + 1) << kTagShift;
}
int tag_owner(uint64_t word) {
    return static_cast<int>(word >> kTagShift) - 1;
} // -1: untagged

int fstat_fd(int fd, struct stat& status) {
    return static_cast<int>(syscall(SYS_fstat, fd, &status));
}

int fcntl_lock(int fd, int command, struct flock& lock) {
    return static_cast<int>(syscall(SYS_fcntl, fd, command, &lock));
}

struct flock byte_lock(short type, off_t offset) {
    struct flock lock {};
    lock.l_type = type;
    lock.l_whence = SEEK_SET;
    lock.l_start = offset;
    lock.l_len = 1;
    lock.l_pid = 0; // required for OFD locks
    return lock;
}

// True when this description now holds the byte (also when it already did).
bool try_lock_byte(int fd, off_t offset) {
    struct flock lock = byte_lock(F_WRLCK, offset);
    return fcntl_lock(fd, F_OFD_SETLK, lock) == 0;
}

void unlock_byte(int fd, off_t offset) {
    struct flock lock = byte_lock(F_UNLCK, offset);
    fcntl_lock(fd, F_OFD_SETLK, lock);
}

// Whether another description holds the byte.
bool byte_held(int fd, off_t offset) {
    struct flock lock = byte_lock(F_WRLCK, offset);
    if (fcntl_lock(fd, F_OFD_GETLK, lock) != 0) {
        return false;
    }
    return lock.l_type != F_UNLCK;
}

off_t slot_lock_offset(int slot) {
    return static_cast<off_t>(kLockBase) + slot;
}

uint64_t now_ns(clockid_t clock) {
    timespec now{};
    clock_gettime(clock, &now);
    return static_cast<uint64_t>(now.tv_sec) * 1000000000u + static_cast<uint64_t>(now.tv_nsec);
}

void sleep_us(long microseconds) {
    timespec pause{0, microseconds * 1000};
    nanosleep(&pause, nullptr);
}

// Polls for an exclusive byte lock, bounded: a holder keeps these locks for
// microseconds, and the kernel drops them when it dies, so only a stopped
// holder makes this time out.
bool lock_byte_bounded(int fd, off_t offset, int timeout_ms) {
    uint64_t deadline = now_ns(CLOCK_MONOTONIC) + uint64_t(timeout_ms) * 1000000u;
    for (;;) {
        if (try_lock_byte(fd, offset)) {
            return true;
        }
        if (errno != EAGAIN && errno != EACCES) {
            return false;
        }
        if (now_ns(CLOCK_MONOTONIC) > deadline) {
            errno = ETIMEDOUT;
            return false;
        }
        sleep_us(200);
    }
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// Spin briefly, then yield, then sleep (a stopped tag owner must not cost a
// whole CPU); tells the caller when to look at whether the process it waits
// for is still alive.
struct Backoff {
    unsigned rounds = 0;
    bool wait() {
        ++rounds;
        if (rounds < 64) {
            cpu_relax();
            return false;
        }
        if (rounds < 4096) {
            sched_yield();
        } else {
            sleep_us(50);
        }
        return rounds % 32 == 0;
    }
};

char lower(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

char upper(char c) {
    return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
}

bool same_uuid(const char* a, const char* b) {
    for (size_t i = 0; i < kUuidSize; ++i) {
        if (lower(a[i]) != lower(b[i])) {
            return false;
        }
        if (a[i] == '\0') {
            return true;
        }
    }
    return true;
}

bool valid_group_name(const char* group) {
    size_t length = 0;
    for (; group[length] != '\0'; ++length) {
        char c = group[length];
        bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
        if (!allowed || length >= kGroupNameSize - 1) {
            return false;
        }
    }
    return length > 0 && std::strcmp(group, ".") != 0 && std::strcmp(group, "..") != 0;
}

// The trust rules of a group's directories and file: owned by the caller or
// root, writable by nobody else, of the right type; the file has one name.
bool check_trusted(int fd, const char* path, bool directory, Problem& problem) {
    struct stat status {};
    if (fstat_fd(fd, status) != 0) {
        return fail(problem, errno, "cannot stat %s: %s", path, std::strerror(errno));
    }
    if (directory && !S_ISDIR(status.st_mode)) {
        return fail(problem, ENOTDIR,
                    "group state path %s is not a directory; remove it or set "
                    "GPU_LIMIT_STATE_DIR to a private directory",
                    path);
    }
    if (!directory && !S_ISREG(status.st_mode)) {
        return fail(problem, EINVAL,
                    "group state file %s is not a regular file; remove it or set "
                    "GPU_LIMIT_STATE_DIR to a private directory",
                    path);
    }
    uid_t caller = geteuid();
    if (status.st_uid != caller && status.st_uid != 0) {
        return fail(problem, EPERM,
                    "group state %s %s is owned by uid %u, not by uid %u or root; set "
                    "GPU_LIMIT_STATE_DIR to a directory of your own",
                    directory ? "directory" : "file", path, unsigned(status.st_uid),
                    unsigned(caller));
    }
    if ((status.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return fail(problem, EPERM,
                    "group state %s %s is writable by group or others (mode %04o); "
                    "chmod go-w it or set GPU_LIMIT_STATE_DIR to a private directory",
                    directory ? "directory" : "file", path, unsigned(status.st_mode & 07777));
    }
    if (!directory && status.st_nlink != 1) {
        return fail(problem, EPERM,
                    "group state file %s has %u links, expected 1; remove it and let the "
                    "group's processes create it again",
                    path, unsigned(status.st_nlink));
    }
    return true;
}

// Opens a directory without following a symlink at its last component,
// creating it 0700 first when asked.
int open_directory(int at, const char* name, const char* shown, bool create, Problem& problem) {
    if (create && mkdirat(at, name, 0700) != 0 && errno != EEXIST) {
        fail(problem, errno, "cannot create group state directory %s: %s", shown,
             std::strerror(errno));
        return -1;
    }
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int error = errno;
        fail(problem, error, "cannot open group state directory %s: %s%s", shown,
             std::strerror(error),
             error == ELOOP || error == ENOTDIR ? " (a symlink or not a directory: refused)" : "");
        return -1;
    }
    if (!check_trusted(fd, shown, true, problem)) {
        ::close(fd);
        return -1;
    }
    return fd;
}

void read_comm(char (&comm)[16]) {
    std::memset(comm, 0, sizeof comm);
    int fd = openat(AT_FDCWD, "/proc/self/comm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }
    ssize_t got = read(fd, comm, sizeof comm - 1);
    ::close(fd);
    for (ssize_t i = 0; i < got; ++i) {
        if (comm[i] == '\n') {
            comm[i] = '\0';
        }
    }
}

struct Hook {
    StepHook function;
    void* context;
};

} // namespace

// The protocol, one template per operation: `Hooked` false is the production
// code, true calls the test hook after each step.
struct GroupState::Protocol {
    template <bool Hooked>
    static void step(const Hook& hook, Step which, int slot) {
        if constexpr (Hooked) {
            if (hook.function != nullptr) {
                hook.function(which, slot, hook.context);
            }
        }
    }

    static bool valid_device(const GroupState& state, int device) {
        return device >= 0 && device < kMaxGroupDevices &&
               state.file_->header.devices[device].state.load(std::memory_order_acquire) ==
                   kRecordReady;
    }

    // Sets the slot's in-flight flag for the device; returns the charge.
    static uint64_t take_flag(SlotRecord& slot, int device) {
        Backoff backoff;
        for (;;) {
            uint64_t word = slot.charged[device].load(std::memory_order_relaxed);
            if ((word & kInFlight) == 0 && slot.charged[device].compare_exchange_weak(
                                               word, word | kInFlight, std::memory_order_acq_rel)) {
                return word;
            }
            backoff.wait();
        }
    }

    // Called while the total is tagged by `owner`. Mostly it just waits; now
    // and then it tries the owner's lock, and a dead owner is resolved
    // (which removes its tag). Inside a reclaim the resolved slot's charges
    // are left for reclaim_dead, so that reclaims never nest.
    static void wait_for_tag(GroupState& state, int owner, int operating, Backoff& backoff) {
        if (!backoff.wait()) {
            return;
        }
        // Our own slot, or the dead slot we are returning (whose lock our
        // description already holds), are never dead tag owners to us.
        if (owner < 0 || owner >= kMaxSlots || owner == state.slot_ || owner == operating) {
            return;
        }
        bool in_reclaim = operating != state.slot_;
        if (!in_reclaim && state.reclaiming_.exchange(true, std::memory_order_acquire)) {
            return; // another thread of ours reclaims; it may be this very slot
        }
        if (try_lock_byte(state.fd_, slot_lock_offset(owner))) {
            if (in_reclaim) {
                resolve(state, owner);
            } else {
                empty_locked_slot<false>(state, owner, Hook{});
            }
            unlock_byte(state.fd_, slot_lock_offset(owner));
        }
        if (!in_reclaim) {
            state.reclaiming_.store(false, std::memory_order_release);
        }
    }

    // One operation of `slot_index` on the device: steps (1) to (4).
    // `removal`: subtract (never below the slot's charge); else add, checked
    // against the cap when `capped`.
    template <bool Hooked>
    static Admission operate(GroupState& state, int slot_index, int device, uint64_t bytes,
                             bool removal, bool capped, const Hook& hook) {
        SlotRecord& slot = state.file_->slots[slot_index];
        DeviceRecord& record = state.file_->header.devices[device];
        uint64_t charge = take_flag(slot, device);
        step<Hooked>(hook, Step::FlagSet, slot_index);
        if (removal && bytes > charge) {
            bytes = charge;
        }
        if (bytes == 0) {
            slot.charged[device].store(charge, std::memory_order_release);
            return Admission::Admitted;
        }
        uint64_t written_op = bytes | (removal ? kRemoval : 0);
        slot.op[device].store(written_op, std::memory_order_release);
        step<Hooked>(hook, Step::OpWritten, slot_index);

        uint64_t cap = record.cap.load(std::memory_order_relaxed);
        uint64_t next = 0;
        Backoff backoff;
        for (;;) {
            uint64_t word = record.total_word.load(std::memory_order_acquire);
            int owner = tag_owner(word);
            if (owner >= 0) {
                wait_for_tag(state, owner, slot_index, backoff);
                continue;
            }
            uint64_t total = word & kBytesMask;
            uint64_t amount = bytes;
            if (removal) {
                if (amount > total) { // the invariant says never; stay in range anyway
                    amount = total;
                }
                next = total - amount;
            } else if (capped) {
                if (amount > cap || total > cap - amount) {
                    slot.charged[device].store(charge, std::memory_order_release);
                    step<Hooked>(hook, Step::Refused, slot_index);
                    return Admission::OverCap;
                }
                next = total + amount;
            } else {
                if (amount > kBytesMask - total) {
                    amount = kBytesMask - total;
                }
                next = total + amount;
            }
            if (amount != bytes) {
                // Still before (2): a reclaimer reads op[d] only once the
                // total carries our tag, so it can be corrected here.
                bytes = amount;
                written_op = bytes | (removal ? kRemoval : 0);
                slot.op[device].store(written_op, std::memory_order_release);
            }
            if (record.total_word.compare_exchange_weak(word, tag_of(slot_index) | next,
                                                        std::memory_order_acq_rel)) {
                break;
            }
        }
        step<Hooked>(hook, Step::TotalTagged, slot_index);
        uint64_t updated = removal ? charge - bytes : charge + bytes;
        slot.charged[device].store(updated | kInFlight | kApplied, std::memory_order_release);
        step<Hooked>(hook, Step::SlotUpdated, slot_index);
        record.total_word.fetch_and(kBytesMask, std::memory_order_acq_rel);
        step<Hooked>(hook, Step::Untagged, slot_index);
        slot.charged[device].store(updated, std::memory_order_release);
        step<Hooked>(hook, Step::FlagCleared, slot_index);
        if (!removal) {
            uint64_t peak = record.peak.load(std::memory_order_relaxed);
            while (peak < next &&
                   !record.peak.compare_exchange_weak(peak, next, std::memory_order_relaxed)) {
            }
        }
        return Admission::Admitted;
    }

    // Brings dead slot x (whose lock the caller holds) to a state with no
    // flag and no tag of x, without waiting for anyone (see the top).
    static void resolve(GroupState& state, int x) {
        SlotRecord& slot = state.file_->slots[x];
        for (int device = 0; device < kMaxGroupDevices; ++device) {
            DeviceRecord& record = state.file_->header.devices[device];
            uint64_t word = slot.charged[device].load(std::memory_order_acquire);
            bool tagged = tag_owner(record.total_word.load(std::memory_order_acquire)) == x;
            if ((word & kInFlight) != 0) {
                uint64_t charge = word & kChargeMask;
                if (tagged && (word & kApplied) == 0) { // died between (2) and (3)
                    uint64_t op = slot.op[device].load(std::memory_order_acquire);
                    uint64_t bytes = op & ~kRemoval;
                    if ((op & kRemoval) != 0) {
                        charge = bytes > charge ? 0 : charge - bytes;
                    } else {
                        charge += bytes;
                    }
                }
                slot.charged[device].store(charge, std::memory_order_release);
            }
            if (tagged) { // do (4); nobody else changes a tagged total
                record.total_word.fetch_and(kBytesMask, std::memory_order_acq_rel);
            }
        }
    }

    // Returns resolved slot x's charges to the totals, as removals by x.
    template <bool Hooked>
    static void return_charges(GroupState& state, int x, const Hook& hook) {
        SlotRecord& slot = state.file_->slots[x];
        for (int device = 0; device < kMaxGroupDevices; ++device) {
            uint64_t charge = slot.charged[device].load(std::memory_order_acquire) & kChargeMask;
            if (charge != 0) {
                operate<Hooked>(state, x, device, charge, true, false, hook);
            }
        }
    }

    // Takes slot x's lock, resolves and empties it, marks it released and
    // lets go. False when x's owner is alive (or someone else reclaims it).
    template <bool Hooked>
    static bool reclaim_slot(GroupState& state, int x, const Hook& hook) {
        if (!try_lock_byte(state.fd_, slot_lock_offset(x))) {
            return false;
        }
        bool was_live = empty_locked_slot<Hooked>(state, x, hook);
        unlock_byte(state.fd_, slot_lock_offset(x));
        return was_live;
    }

    // The body of a reclaim, with x's lock held: a live-marked slot is
    // resolved, emptied and marked released (a slot not marked live holds
    // nothing: it is marked so only once empty).
    template <bool Hooked>
    static bool empty_locked_slot(GroupState& state, int x, const Hook& hook) {
        SlotRecord& slot = state.file_->slots[x];
        if (slot.state.load(std::memory_order_acquire) != kSlotLive) {
            return false;
        }
        resolve(state, x);
        return_charges<Hooked>(state, x, hook);
        slot.state.store(kSlotReleased, std::memory_order_release);
        return true;
    }

    template <bool Hooked>
    static int reclaim_dead(GroupState& state, const Hook& hook) {
        if (state.file_ == nullptr || !state.writable_) {
            return 0;
        }
        if (state.reclaiming_.exchange(true, std::memory_order_acquire)) {
            return 0;
        }
        int reclaimed = 0;
        for (int x = 0; x < kMaxSlots; ++x) {
            if (x == state.slot_ ||
                state.file_->slots[x].state.load(std::memory_order_relaxed) != kSlotLive) {
                continue;
            }
            if (reclaim_slot<Hooked>(state, x, hook)) {
                ++reclaimed;
            }
        }
        state.reclaiming_.store(false, std::memory_order_release);
        return reclaimed;
    }

    template <bool Hooked>
    static Admission charge(GroupState& state, int device, uint64_t bytes, bool capped,
                            const Hook& hook) {
        if (state.slot_ < 0 || !state.writable_ || !valid_device(state, device)) {
            return capped ? Admission::OverCap : Admission::Admitted;
        }
        if (bytes == 0) {
            return Admission::Admitted;
        }
        Admission admission =
            operate<Hooked>(state, state.slot_, device, bytes, false, capped, hook);
        if (admission == Admission::OverCap && reclaim_dead<false>(state, Hook{}) > 0) {
            admission = operate<Hooked>(state, state.slot_, device, bytes, false, capped, hook);
        }
        return admission;
    }

    template <bool Hooked>
    static void uncharge(GroupState& state, int device, uint64_t bytes, const Hook& hook) {
        if (state.slot_ < 0 || !state.writable_ || !valid_device(state, device) || bytes == 0) {
            return;
        }
        operate<Hooked>(state, state.slot_, device, bytes, true, false, hook);
    }
};

GroupState::~GroupState() {
    close();
}

// Maps the file and checks or performs its initialization. `fd` is ours.
static bool map_state(int fd, bool writable, const char* path, StateFile*& mapped, Problem& problem,
                      StateMapHook on_map = {}) {
    struct stat status {};
    if (fstat_fd(fd, status) != 0) {
        return fail(problem, errno, "cannot stat %s: %s", path, std::strerror(errno));
    }
    bool locked = false;
    auto finish = [&](bool ok) {
        if (locked) {
            unlock_byte(fd, kInitLockOffset);
        }
        return ok;
    };
    if (static_cast<uint64_t>(status.st_size) != sizeof(StateFile)) {
        if (!writable || status.st_size != 0) {
            return fail(problem, EINVAL,
                        "group state file %s has %lld bytes, expected %zu (another version of "
                        "gpulimit, or not a state file); let the group's processes finish and "
                        "remove it, or use another GPU_LIMIT_GROUP",
                        path, static_cast<long long>(status.st_size), sizeof(StateFile));
        }
        // First use: the initializer holds the init byte while the file is
        // sized and the header written; everyone else waits for it there.
        if (!lock_byte_bounded(fd, kInitLockOffset, kInitLockTimeoutMs)) {
            return fail(problem, errno, "cannot lock %s for initialization: %s", path,
                        std::strerror(errno));
        }
        locked = true;
        if (fstat_fd(fd, status) != 0) {
            return finish(fail(problem, errno, "cannot stat %s: %s", path, std::strerror(errno)));
        }
        if (status.st_size == 0 && ftruncate(fd, sizeof(StateFile)) != 0) {
            return finish(fail(problem, errno, "cannot size %s: %s", path, std::strerror(errno)));
        }
        if (status.st_size != 0 && static_cast<uint64_t>(status.st_size) != sizeof(StateFile)) {
            return finish(fail(problem, EINVAL, "group state file %s has %lld bytes, expected %zu",
                               path, static_cast<long long>(status.st_size), sizeof(StateFile)));
        }
    }
    void* address = mmap(nullptr, sizeof(StateFile), writable ? PROT_READ | PROT_WRITE : PROT_READ,
                         MAP_SHARED, fd, 0);
    if (address == MAP_FAILED) {
        return finish(fail(problem, errno, "cannot map %s: %s", path, std::strerror(errno)));
    }
    if (on_map.call != nullptr) {
        on_map.call(on_map.context, address, sizeof(StateFile));
    }
    auto* file = static_cast<StateFile*>(address);
    uint32_t magic = file->header.magic.load(std::memory_order_acquire);
    if (magic == 0 && writable && !locked) {
        // Sized but not yet initialized: wait for the initializer (or take
        // over from one that died).
        if (!lock_byte_bounded(fd, kInitLockOffset, kInitLockTimeoutMs)) {
            munmap(address, sizeof(StateFile));
            return fail(problem, errno, "cannot lock %s for initialization: %s", path,
                        std::strerror(errno));
        }
        locked = true;
        magic = file->header.magic.load(std::memory_order_acquire);
    }
    if (magic == 0 && locked) {
        file->header.version = kStateVersion;
        file->header.slot_count = kMaxSlots;
        file->header.device_count_max = kMaxGroupDevices;
        file->header.lock_base = kLockBase;
        file->header.magic.store(kStateMagic, std::memory_order_release);
        magic = kStateMagic;
    }
    const char* wrong = nullptr;
    if (magic == 0) {
        wrong = "is still being initialized; retry";
    } else if (magic != kStateMagic) {
        wrong = "is not a gpu-limit state file (wrong magic); remove it or use another "
                "GPU_LIMIT_GROUP";
    } else if (file->header.version != kStateVersion || file->header.slot_count != kMaxSlots ||
               file->header.device_count_max != kMaxGroupDevices ||
               file->header.lock_base != kLockBase) {
        wrong = "has another layout version; let the group's processes finish and remove it, "
                "or use another GPU_LIMIT_GROUP";
    }
    if (wrong != nullptr) {
        unsigned version = file->header.version;
        munmap(address, sizeof(StateFile));
        return finish(fail(problem, EINVAL,
                           "group state file %s (layout version %u, this gpulimit uses %u) %s",
                           path, version, kStateVersion, wrong));
    }
    mapped = file;
    return finish(true);
}

static bool open_state(const char* state_dir, const char* group, bool writable,
                       char (&path)[kPathSize], int& fd_out, StateFile*& mapped, Problem& problem) {
    if (state_dir == nullptr || state_dir[0] == '\0') {
        return fail(problem, EINVAL, "no group state directory given");
    }
    if (group == nullptr || !valid_group_name(group)) {
        return fail(problem, EINVAL,
                    "group name '%s' is not 1 to 64 of [A-Za-z0-9._-]; set GPU_LIMIT_GROUP "
                    "to such a name",
                    group == nullptr ? "" : group);
    }
    int length = std::snprintf(path, kPathSize, "%s/%s/state", state_dir, group);
    if (length < 0 || static_cast<size_t>(length) >= kPathSize) {
        return fail(problem, ENAMETOOLONG, "group state path %s/%s is too long", state_dir, group);
    }
    char group_path[kPathSize];
    size_t group_length = static_cast<size_t>(length) - (sizeof "/state" - 1);
    std::memcpy(group_path, path, group_length);
    group_path[group_length] = '\0';

    int base = open_directory(AT_FDCWD, state_dir, state_dir, writable, problem);
    if (base < 0) {
        return false;
    }
    int directory = open_directory(base, group, group_path, writable, problem);
    ::close(base);
    if (directory < 0) {
        return false;
    }
    int flags = (writable ? O_RDWR | O_CREAT : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC;
    int fd = openat(directory, "state", flags, 0600);
    int error = errno;
    ::close(directory);
    if (fd < 0) {
        return fail(problem, error, "cannot open group state file %s: %s%s", path,
                    std::strerror(error), error == ELOOP ? " (a symlink: refused)" : "");
    }
    if (!check_trusted(fd, path, false, problem) ||
        !map_state(fd, writable, path, mapped, problem)) {
        ::close(fd);
        return false;
    }
    fd_out = fd;
    return true;
}

bool GroupState::open(const char* state_dir, const char* group, Problem& problem) {
    if (file_ != nullptr) {
        return fail(problem, EBUSY, "group state already open (%s)", path_);
    }
    if (!open_state(state_dir, group, true, path_, fd_, file_, problem)) {
        return false;
    }
    writable_ = true;
    return true;
}

bool GroupState::open_read_only(const char* state_dir, const char* group, Problem& problem) {
    if (file_ != nullptr) {
        return fail(problem, EBUSY, "group state already open (%s)", path_);
    }
    if (!open_state(state_dir, group, false, path_, fd_, file_, problem)) {
        return false;
    }
    writable_ = false;
    return true;
}

bool GroupState::open_vetted(int fd, const char* shown, Problem& problem, StateMapHook on_map) {
    if (file_ != nullptr) {
        ::close(fd);
        return fail(problem, EBUSY, "group state already open (%s)", path_);
    }
    struct stat status {};
    if (fd < 0 || fstat_fd(fd, status) != 0 || !S_ISREG(status.st_mode) ||
        static_cast<uint64_t>(status.st_size) != sizeof(StateFile)) {
        if (fd >= 0) {
            ::close(fd);
        }
        return fail(problem, EINVAL, "group state file %s is not a state file", shown);
    }
    if (!map_state(fd, true, shown, file_, problem, on_map)) {
        ::close(fd);
        return false;
    }
    std::snprintf(path_, sizeof path_, "%s", shown);
    fd_ = fd;
    writable_ = true;
    return true;
}

bool GroupState::register_process(Problem& problem) {
    if (file_ == nullptr || !writable_) {
        return fail(problem, EBADF, "group state not open for writing");
    }
    if (slot_ >= 0) {
        return true;
    }
    int32_t pid = static_cast<int32_t>(getpid());
    // Fibonacci hashing spreads neighbouring pids over the table.
    int start = static_cast<int>((static_cast<uint32_t>(pid) * 2654435761u) % kMaxSlots);
    // Pass 0 tries slots nobody claims to hold; pass 1 the live-marked ones,
    // whose owners may have died.
    if (reclaiming_.exchange(true, std::memory_order_acquire)) {
        return fail(problem, EBUSY, "group state: register_process while reclaiming");
    }
    int claimed = -1;
    for (int pass = 0; pass < 2 && claimed < 0; ++pass) {
        for (int i = 0; i < kMaxSlots; ++i) {
            int x = (start + i) % kMaxSlots;
            bool live = file_->slots[x].state.load(std::memory_order_relaxed) == kSlotLive;
            if (live != (pass == 1)) {
                continue;
            }
            if (!try_lock_byte(fd_, slot_lock_offset(x))) {
                continue;
            }
            // Ours now. A dead previous owner may have left charges.
            if (live) {
                Protocol::resolve(*this, x);
                Protocol::return_charges<false>(*this, x, Hook{});
            }
            claimed = x;
            break;
        }
    }
    reclaiming_.store(false, std::memory_order_release);
    if (claimed < 0) {
        return fail(problem, ENOSPC,
                    "group state %s: all %d process slots are taken by live processes; use "
                    "another GPU_LIMIT_GROUP for some of them",
                    path_, kMaxSlots);
    }
    SlotRecord& slot = file_->slots[claimed];
    slot.pid.store(pid, std::memory_order_relaxed);
    // A previous owner's host pid is not ours (the daemon writes ours when
    // this process registers with it).
    slot.host_pid.store(0, std::memory_order_relaxed);
    slot.started_ns.store(now_ns(CLOCK_REALTIME), std::memory_order_relaxed);
    read_comm(slot.comm);
    slot.state.store(kSlotLive, std::memory_order_release);
    slot_ = claimed;
    owner_pid_ = pid;
    return true;
}

int GroupState::attach_device(const char* uuid, uint64_t cap, uint64_t physical_total,
                              Problem& problem) {
    return attach_device(uuid, cap, physical_total, 0, problem);
}

int GroupState::attach_device(const char* uuid, uint64_t cap, uint64_t physical_total,
                              uint32_t compute_percent, Problem& problem) {
    if (file_ == nullptr || !writable_) {
        fail(problem, EBADF, "group state not open for writing");
        return -1;
    }
    size_t length = uuid == nullptr ? 0 : std::strlen(uuid);
    if (length == 0 || length >= kUuidSize) {
        fail(problem, EINVAL, "GPU UUID '%s' is empty or too long", uuid == nullptr ? "" : uuid);
        return -1;
    }
    if (cap > kBytesMask) {
        cap = kBytesMask;
    }
    // Adding a record is rare (once per device and group): an OFD lock on a
    // byte of its own keeps it simple, and a filler that dies lets go.
    if (!lock_byte_bounded(fd_, kDeviceLockOffset, kInitLockTimeoutMs)) {
        fail(problem, errno, "cannot lock the device table of %s: %s", path_, std::strerror(errno));
        return -1;
    }
    int found = -1;
    for (int i = 0; i < kMaxGroupDevices; ++i) {
        DeviceRecord& record = file_->header.devices[i];
        if (record.state.load(std::memory_order_acquire) != kRecordReady) {
            // Empty, or left half-filled by a process that died holding the
            // lock: ours to fill. Records fill in order, so this is the end.
            record.state.store(kRecordFilling, std::memory_order_relaxed);
            std::memset(record.uuid, 0, sizeof record.uuid);
            // As nvidia-smi and NVML spell it: "GPU-" (or "MIG-"), then the
            // hex digits in lower case.
            for (size_t c = 0; c < length; ++c) {
                record.uuid[c] = c < 4 ? upper(uuid[c]) : lower(uuid[c]);
            }
            record.cap.store(cap, std::memory_order_relaxed);
            record.physical_total.store(physical_total, std::memory_order_relaxed);
            record.total_word.store(0, std::memory_order_relaxed);
            record.peak.store(0, std::memory_order_relaxed);
            record.refusals.store(0, std::memory_order_relaxed);
            // The compute record is part of the device record: complete
            // before the device is ready, fixed after. The gate starts open
            // with no driver (a launch never waits for one to appear).
            ComputeRecord& compute = file_->header.compute[i];
            compute.gate.store(0, std::memory_order_relaxed);
            compute.cap_percent.store(compute_percent, std::memory_order_relaxed);
            compute.waiters.store(0, std::memory_order_relaxed);
            compute.driver.store(0, std::memory_order_relaxed);
            compute.heartbeat_ns.store(0, std::memory_order_relaxed);
            compute.tokens_ns.store(0, std::memory_order_relaxed);
            compute.busy_ns.store(0, std::memory_order_relaxed);
            compute.share_ppm.store(0, std::memory_order_relaxed);
            compute.closed_ns.store(0, std::memory_order_relaxed);
            compute.launches_held.store(0, std::memory_order_relaxed);
            compute.external_bytes.store(0, std::memory_order_relaxed);
            record.state.store(kRecordReady, std::memory_order_release);
            found = i;
            break;
        }
        if (same_uuid(record.uuid, uuid)) {
            uint64_t recorded = record.cap.load(std::memory_order_relaxed);
            if (recorded != cap) {
                unlock_byte(fd_, kDeviceLockOffset);
                char group[kPathSize];
                std::snprintf(group, sizeof group, "%s", path_);
                // The group is the directory that holds the state file.
                char* end = std::strrchr(group, '/');
                if (end != nullptr) {
                    *end = '\0';
                }
                fail(problem, EINVAL,
                     "device %s already has a cap of %llu bytes in group %s, this process asks "
                     "for %llu bytes; one cap per device and group: use the same memory "
                     "variables or another GPU_LIMIT_GROUP",
                     record.uuid, static_cast<unsigned long long>(recorded), group,
                     static_cast<unsigned long long>(cap));
                return -1;
            }
            uint32_t recorded_percent =
                file_->header.compute[i].cap_percent.load(std::memory_order_relaxed);
            if (recorded_percent != compute_percent) {
                unlock_byte(fd_, kDeviceLockOffset);
                fail(problem, EINVAL,
                     "device %s already has a compute cap of %u%% in group state %s, this process "
                     "asks for %u%% (0: none); one compute cap per device and group: use the "
                     "same GPU_UTIL_PER_DEVICE or another GPU_LIMIT_GROUP",
                     record.uuid, unsigned(recorded_percent), path_, unsigned(compute_percent));
                return -1;
            }
            found = i;
            break;
        }
    }
    unlock_byte(fd_, kDeviceLockOffset);
    if (found < 0) {
        fail(problem, ENOSPC, "group state %s: more than %d devices", path_, kMaxGroupDevices);
    }
    return found;
}

Admission GroupState::charge(int device, uint64_t bytes) {
    return Protocol::charge<false>(*this, device, bytes, true, Hook{});
}

void GroupState::charge_forced(int device, uint64_t bytes) {
    Protocol::charge<false>(*this, device, bytes, false, Hook{});
}

void GroupState::uncharge(int device, uint64_t bytes) {
    Protocol::uncharge<false>(*this, device, bytes, Hook{});
}

Admission GroupState::charge_stepwise(int device, uint64_t bytes, StepHook hook, void* context) {
    return Protocol::charge<true>(*this, device, bytes, true, Hook{hook, context});
}

void GroupState::uncharge_stepwise(int device, uint64_t bytes, StepHook hook, void* context) {
    Protocol::uncharge<true>(*this, device, bytes, Hook{hook, context});
}

int GroupState::reclaim_dead() {
    return Protocol::reclaim_dead<false>(*this, Hook{});
}

int GroupState::reclaim_dead_stepwise(StepHook hook, void* context) {
    return Protocol::reclaim_dead<true>(*this, Hook{hook, context});
}

uint64_t GroupState::group_used(int device) const {
    if (file_ == nullptr || device < 0 || device >= kMaxGroupDevices) {
        return 0;
    }
    return file_->header.devices[device].total_word.load(std::memory_order_acquire) & kBytesMask;
}

uint64_t GroupState::cap(int device) const {
    if (file_ == nullptr || device < 0 || device >= kMaxGroupDevices) {
        return 0;
    }
    return file_->header.devices[device].cap.load(std::memory_order_relaxed);
}

uint64_t GroupState::own_charged(int device) const {
    if (file_ == nullptr || slot_ < 0 || device < 0 || device >= kMaxGroupDevices) {
        return 0;
    }
    return file_->slots[slot_].charged[device].load(std::memory_order_acquire) & kChargeMask;
}

void GroupState::note_refusal(int device) {
    if (file_ == nullptr || !writable_ || device < 0 || device >= kMaxGroupDevices) {
        return;
    }
    file_->header.devices[device].refusals.fetch_add(1, std::memory_order_relaxed);
}

bool GroupState::reopen_after_fork(Problem& problem) {
    if (file_ == nullptr || !writable_) {
        return true; // nothing held
    }
    // The inherited descriptor shares the parent's description and locks:
    // open a description of our own, of the same file.
    int fd = openat(AT_FDCWD, path_, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        return fail(problem, errno, "cannot reopen group state file %s after fork: %s", path_,
                    std::strerror(errno));
    }
    struct stat inherited {};
    struct stat reopened {};
    if (fstat_fd(fd_, inherited) != 0 || fstat_fd(fd, reopened) != 0 ||
        inherited.st_dev != reopened.st_dev || inherited.st_ino != reopened.st_ino) {
        ::close(fd);
        return fail(problem, ESTALE, "group state file %s was replaced; not reopening it", path_);
    }
    // Dropping our reference to the parent's description leaves its locks
    // to the parent (and lets them go with it).
    ::close(fd_);
    fd_ = fd;
    slot_ = -1;
    owner_pid_ = 0;
    reclaiming_.store(false, std::memory_order_relaxed); // a parent thread's, frozen by fork
    return register_process(problem);
}

void GroupState::close() {
    if (file_ == nullptr) {
        return;
    }
    // A fork child that did not reopen shares the parent's slot: leave it.
    if (slot_ >= 0 && writable_ && owner_pid_ == static_cast<int>(getpid())) {
        for (int device = 0; device < kMaxGroupDevices; ++device) {
            uint64_t charge = own_charged(device);
            if (charge != 0 && Protocol::valid_device(*this, device)) {
                Protocol::operate<false>(*this, slot_, device, charge, true, false, Hook{});
            }
        }
        file_->slots[slot_].state.store(kSlotReleased, std::memory_order_release);
        unlock_byte(fd_, slot_lock_offset(slot_));
    }
    munmap(file_, sizeof(StateFile));
    ::close(fd_);
    file_ = nullptr;
    fd_ = -1;
    slot_ = -1;
    owner_pid_ = 0;
    writable_ = false;
}

ComputeRecord* GroupState::compute(int device) {
    if (file_ == nullptr || device < 0 || device >= kMaxGroupDevices ||
        file_->header.devices[device].state.load(std::memory_order_acquire) != kRecordReady) {
        return nullptr;
    }
    return &file_->header.compute[device];
}

const ComputeRecord* GroupState::compute(int device) const {
    return const_cast<GroupState*>(this)->compute(device);
}

bool GroupState::any_compute_cap() const {
    for (int device = 0; device < kMaxGroupDevices; ++device) {
        const ComputeRecord* record = compute(device);
        if (record == nullptr) {
            return false; // records fill in order
        }
        if (record->cap_percent.load(std::memory_order_relaxed) != 0) {
            return true;
        }
    }
    return false;
}

bool GroupState::try_controller_lock(int device) {
    return file_ != nullptr && writable_ && device >= 0 && device < kMaxGroupDevices &&
           try_lock_byte(fd_, kControllerLockOffset + device);
}

void GroupState::release_controller_lock(int device) {
    if (file_ != nullptr && device >= 0 && device < kMaxGroupDevices) {
        unlock_byte(fd_, kControllerLockOffset + device);
    }
}

bool GroupState::try_daemon_lock() {
    return file_ != nullptr && writable_ && try_lock_byte(fd_, kDaemonLockOffset);
}

void GroupState::release_daemon_lock() {
    if (file_ != nullptr) {
        unlock_byte(fd_, kDaemonLockOffset);
    }
}

bool GroupState::daemon_lock_held() const {
    return file_ != nullptr && byte_held(fd_, kDaemonLockOffset);
}

bool GroupState::slot_pids(int slot, int32_t& pid, int32_t& host_pid) const {
    if (file_ == nullptr || slot < 0 || slot >= kMaxSlots) {
        return false;
    }
    const SlotRecord& record = file_->slots[slot];
    if (record.state.load(std::memory_order_acquire) != kSlotLive) {
        return false;
    }
    pid = record.pid.load(std::memory_order_relaxed);
    host_pid = record.host_pid.load(std::memory_order_relaxed);
    return true;
}

bool GroupState::slot_lock_place(int slot, uint64_t& device, uint64_t& inode,
                                 uint64_t& offset) const {
    struct stat status {};
    if (file_ == nullptr || slot < 0 || slot >= kMaxSlots || fstat_fd(fd_, status) != 0) {
        return false;
    }
    device = status.st_dev;
    inode = status.st_ino;
    offset = static_cast<uint64_t>(slot_lock_offset(slot));
    return true;
}

int GroupState::device_count() const {
    if (file_ == nullptr) {
        return 0;
    }
    int count = 0;
    while (count < kMaxGroupDevices &&
           file_->header.devices[count].state.load(std::memory_order_acquire) == kRecordReady) {
        ++count;
    }
    return count;
}

bool GroupState::device_usage(int device, DeviceUsage& usage) const {
    if (file_ == nullptr || device < 0 || device >= kMaxGroupDevices) {
        return false;
    }
    const DeviceRecord& record = file_->header.devices[device];
    if (record.state.load(std::memory_order_acquire) != kRecordReady) {
        return false;
    }
    std::memcpy(usage.uuid, record.uuid, kUuidSize);
    usage.uuid[kUuidSize - 1] = '\0';
    usage.cap = record.cap.load(std::memory_order_relaxed);
    usage.physical_total = record.physical_total.load(std::memory_order_relaxed);
    usage.used = record.total_word.load(std::memory_order_acquire) & kBytesMask;
    usage.peak = record.peak.load(std::memory_order_relaxed);
    usage.refusals = record.refusals.load(std::memory_order_relaxed);
    const ComputeRecord& compute = file_->header.compute[device];
    usage.compute_percent = compute.cap_percent.load(std::memory_order_relaxed);
    usage.compute_driver = compute.driver.load(std::memory_order_relaxed);
    usage.gate_open = compute.gate.load(std::memory_order_relaxed) == 0;
    usage.share_ppm = compute.share_ppm.load(std::memory_order_relaxed);
    usage.launches_held = compute.launches_held.load(std::memory_order_relaxed);
    usage.external_bytes = compute.external_bytes.load(std::memory_order_relaxed);
    return true;
}

bool GroupState::slot_usage(int slot, int32_t& pid, uint64_t charged[kMaxGroupDevices], bool& alive,
                            char comm[16]) const {
    if (file_ == nullptr || slot < 0 || slot >= kMaxSlots) {
        return false;
    }
    const SlotRecord& record = file_->slots[slot];
    if (record.state.load(std::memory_order_acquire) != kSlotLive) {
        return false;
    }
    pid = record.pid.load(std::memory_order_relaxed);
    for (int device = 0; device < kMaxGroupDevices; ++device) {
        charged[device] = record.charged[device].load(std::memory_order_acquire) & kChargeMask;
    }
    std::memcpy(comm, record.comm, 16);
    comm[15] = '\0';
    alive = slot == slot_ || byte_held(fd_, slot_lock_offset(slot));
    return true;
}

} // namespace gpuinit::limit
