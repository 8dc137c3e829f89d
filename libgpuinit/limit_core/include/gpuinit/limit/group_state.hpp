// The shared state of one limit group (a container or a job): one file,
// <state dir>/<group>/state, mmap'd by every process of the group.
//
// - A versioned header, a device table keyed by GPU UUID, and fixed
//   per-process slots that never move (no compaction: a process keeps a
//   pointer to its slot for its whole life).
// - Each slot is owned through an OFD byte-range write lock on its own byte
//   of the file (F_OFD_SETLK). The kernel drops the lock when the process
//   dies however it dies, so "is the owner alive" is "can I take its lock",
//   with no pid, no pid reuse and no pid-namespace question, and no lock a
//   dead process can leave held.
// - Admission is a compare-and-swap on the device's group total: two
//   processes can never both pass the cap. The total and the slot's own
//   counter are kept consistent across a SIGKILL at any instruction by a
//   short tag in the total word and an in-flight flag in the slot (see
//   group_state.cpp), which a reclaimer resolves.
//
// Freestanding (no heap, no exceptions): linked into libgpulimit.so and used
// by `gpu-limit status`.
#pragma once

#include "gpuinit/limit/egpu.hpp"
#include "gpuinit/limit/problem.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuinit::limit {

inline constexpr uint32_t kStateMagic = 0x4d4c5047; // "GPLM"
inline constexpr uint32_t kStateVersion = 3;
inline constexpr int kMaxGroupDevices = 16;
inline constexpr int kMaxSlots = 1024;

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Layout of the file (all fields naturally aligned; the file is created
// zero-filled and sized once). Shared between processes that may run
// different builds of the library: any change bumps kStateVersion.
struct DeviceRecord {
    std::atomic<uint32_t> state; // 0 empty, 1 being filled, 2 ready
    uint32_t reserved0;
    char uuid[kUuidSize];                 // written before state becomes 2
    std::atomic<uint64_t> cap;            // bytes; the first process sets it
    std::atomic<uint64_t> physical_total; // bytes, as the driver reported it
    std::atomic<uint64_t> total_word;     // tag (slot+1) in the top bits, bytes below
    std::atomic<uint64_t> peak;           // highest total seen, bytes
    std::atomic<uint64_t> refusals;       // allocations refused over the cap
    uint64_t reserved1[2];
};

struct SlotRecord {
    std::atomic<uint32_t> state;      // 0 never used, 1 live, 2 released
    std::atomic<int32_t> pid;         // the owner's pid in its own namespace (display only)
    std::atomic<uint64_t> started_ns; // CLOCK_REALTIME at registration (display only)
    char comm[16];                    // the owner's /proc/self/comm (display only)
    // Per device: the in-flight operation's bytes, bit 63 = a removal.
    // Written by the owner after it sets the in-flight flag of charged[d] and
    // before it touches the total. Per device, not one per slot, because the
    // threads of one process may work on different devices at once.
    std::atomic<uint64_t> op[kMaxGroupDevices];
    // Per device: this process's charge in bytes; bit 63 = an operation on
    // that device is in flight (op[d] describes it); bit 62 = the charge
    // already includes that operation.
    std::atomic<uint64_t> charged[kMaxGroupDevices];
    // The owner's pid as the host sees it, written by the host daemon from
    // SO_PEERCRED when the process registers with it (0: not known).
    std::atomic<int32_t> host_pid;
    uint32_t reserved0;
    uint64_t reserved[3];
};

// The compute share of one device for the group (GPU_UTIL_PER_DEVICE),
// index for index with the device table. See compute.hpp.
struct ComputeRecord {
    std::atomic<uint32_t> gate;          // futex word: 0 open, 1 closed
    std::atomic<uint32_t> cap_percent;   // 0: no compute cap; set with the device record
    std::atomic<uint32_t> waiters;       // launches sleeping on the gate
    std::atomic<uint32_t> driver;        // who drives the gate: 0 none, 1 in-process, 2 daemon
    std::atomic<uint64_t> heartbeat_ns;  // CLOCK_MONOTONIC of the driver's last step
    std::atomic<int64_t> tokens_ns;      // the controller's balance (status)
    std::atomic<uint64_t> busy_ns;       // cumulative measured busy time of the group
    std::atomic<uint64_t> share_ppm;     // measured share over the last window (status)
    std::atomic<uint64_t> closed_ns;     // cumulative time the gate was closed (status)
    std::atomic<uint64_t> launches_held; // launches that waited at the gate (status)
    // Memory the host daemon measured for the group's processes beyond what
    // the interposer counted (contexts, modules, bypassing processes); the
    // daemon charges it to the group through a slot of its own.
    std::atomic<uint64_t> external_bytes;
    uint64_t reserved[7];
};

struct StateHeader {
    std::atomic<uint32_t> magic; // set last, after the rest is initialized
    uint32_t version;
    uint32_t slot_count;       // kMaxSlots
    uint32_t device_count_max; // kMaxGroupDevices
    uint64_t lock_base;        // file offset of slot i's lock byte: lock_base + i
    uint64_t reserved[5];
    DeviceRecord devices[kMaxGroupDevices];
    ComputeRecord compute[kMaxGroupDevices];
};

struct StateFile {
    StateHeader header;
    SlotRecord slots[kMaxSlots];
};

enum class Admission : uint8_t { Admitted, OverCap };

// The steps of the accounting protocol (group_state.cpp), for tests that end
// a process at each of them (see GroupState::charge_stepwise).
enum class Step : uint8_t {
    FlagSet = 1, // the slot's in-flight flag for the device is set
    OpWritten,   // op[d] describes the operation
    TotalTagged, // the device total includes it and carries the slot's tag
    SlotUpdated, // the slot's charge includes it (marked applied, flag kept)
    Untagged,    // the tag is gone
    FlagCleared, // the flag is cleared: the operation is complete
    Refused,     // over the cap: the flag is cleared, nothing changed
};
// `slot` is the slot the step was taken for: the caller's own, or, while
// reclaiming, the dead slot whose charges are being returned.
using StepHook = void (*)(Step step, int slot, void* context);

// What one device of a group looks like (for status and tests).
struct DeviceUsage {
    char uuid[kUuidSize];
    uint64_t cap;
    uint64_t physical_total;
    uint64_t used; // the group total
    uint64_t peak;
    uint64_t refusals;
    // The compute share (0: no compute cap) and what its driver last wrote.
    uint32_t compute_percent;
    uint32_t compute_driver; // 0 none, 1 in-process, 2 host daemon
    bool gate_open;
    uint64_t share_ppm;      // measured share over the last window
    uint64_t launches_held;  // launches that waited at the gate
    uint64_t external_bytes; // memory the host daemon found outside the books
};

// Called with a state file's mapping right after mmap, before anything is
// read from it (GroupState::open_vetted).
struct StateMapHook {
    void (*call)(void* context, void* address, size_t length) = nullptr;
    void* context = nullptr;
};

// One process's handle on a group's state. Not copyable; no heap. The file
// descriptor is O_CLOEXEC, so exec drops the slot; fork() children must call
// reopen_after_fork() (the library does it from a pthread_atfork handler)
// because a child shares the parent's open file description and thus its
// locks.
class GroupState {
  public:
    GroupState() = default;
    GroupState(const GroupState&) = delete;
    GroupState& operator=(const GroupState&) = delete;
    ~GroupState();

    // Opens (creating 0700 directories and a 0600 file as needed)
    // <state_dir>/<group>/state. Refuses, without following symlinks, a
    // directory or file not owned by the caller or root, writable by group or
    // others, not a directory / regular file, or a file with more than one
    // link; a file of the wrong size, magic or version. Initialization is
    // race-free between processes starting together.
    bool open(const char* state_dir, const char* group, Problem& problem);

    // Read-only open for `gpu-limit status` (no creation, no slot).
    bool open_read_only(const char* state_dir, const char* group, Problem& problem);

    // For the host daemon: takes `fd`, a state file it opened read-write and
    // vetted with its own trust rule (daemon.hpp: a container's group may
    // belong to the container's uid), and maps it as open() would, without
    // creating or initializing anything. The handle owns `fd` from then on
    // (closed on failure too); `shown` names it in problems. `on_map`, when
    // set, is called with the mapping right after mmap and before anything
    // is read from it: the daemon guards it against SIGBUS there (the
    // group's processes can truncate the file at any time).
    bool open_vetted(int fd, const char* shown, Problem& problem, StateMapHook on_map = {});

    // Claims a free slot (OFD lock), first reclaiming whatever a dead previous
    // owner left in it. Start position is spread by pid so that hundreds of
    // processes starting together do not contend on the same slots.
    bool register_process(Problem& problem);

    // Finds the device's record by UUID or adds it with this cap. A device
    // already recorded with another cap is an error (one cap per group);
    // returns the device index in the group, or -1 with `problem` set.
    int attach_device(const char* uuid, uint64_t cap, uint64_t physical_total, Problem& problem);
    // The same with a compute cap in percent (GPU_UTIL_PER_DEVICE, 0 for
    // none), recorded with the device and checked the same way: one compute
    // cap per device and group. The overload above asks for none.
    int attach_device(const char* uuid, uint64_t cap, uint64_t physical_total,
                      uint32_t compute_percent, Problem& problem);

    // The device's compute record (compute.hpp); nullptr for an unknown
    // device. Writable only through a handle opened for writing.
    ComputeRecord* compute(int device);
    const ComputeRecord* compute(int device) const;
    // Whether any recorded device of the group has a compute cap.
    bool any_compute_cap() const;

    // The compute driver's election (compute.hpp): an OFD lock on one byte
    // per device (the in-process drivers of the group's processes try it
    // every period; the holder drives that device's gate), and one byte the
    // host daemon holds while it drives the group. The kernel lets go of
    // them when the holder dies. Locks of one open description do not
    // exclude each other: one thread per process may use them.
    bool try_controller_lock(int device);
    void release_controller_lock(int device);
    bool try_daemon_lock();
    void release_daemon_lock();
    // Whether another open description (the daemon) holds the daemon byte.
    bool daemon_lock_held() const;

    // Slot i's pids, for a driver that maps measurements to the group's
    // processes: false when the slot is not live-marked (no probe of its
    // lock: cheap enough to call every period). host_pid is 0 until the
    // daemon learned it.
    bool slot_pids(int slot, int32_t& pid, int32_t& host_pid) const;
    // The open state file (st_dev, st_ino) and the offset of slot i's lock
    // byte in it: which process holds that lock is in /proc/<pid>/fdinfo
    // (`gpu-limit status`; the daemon takes the descriptor itself).
    bool slot_lock_place(int slot, uint64_t& device, uint64_t& inode, uint64_t& offset) const;

    // Admission: adds `bytes` to the device's group total if the total stays
    // at or under the cap, else OverCap (after one reclaim of dead slots).
    // A refusal is not counted here: the caller calls note_refusal() once per
    // allocation it finally refuses. OverCap too for an unknown device or an
    // unregistered handle (fail closed).
    Admission charge(int device, uint64_t bytes);
    // Adds without the cap check (memory the driver has already taken, such
    // as graph memory found after a launch).
    void charge_forced(int device, uint64_t bytes);
    // Removes bytes this process charged earlier (never below zero).
    void uncharge(int device, uint64_t bytes);

    uint64_t group_used(int device) const;
    uint64_t cap(int device) const;
    uint64_t own_charged(int device) const;
    void note_refusal(int device);

    // Returns the charges of every slot whose owner is dead to the totals
    // (each exactly once, even with several reclaimers at a time). Returns the
    // number of slots reclaimed. Cheap to call often: only live-marked slots
    // are probed, one fcntl each.
    int reclaim_dead();

    // In a fork child: the inherited description is the parent's; open a new
    // one and claim a new slot with zero charges.
    bool reopen_after_fork(Problem& problem);

    // For tests: the same code as charge, uncharge and reclaim_dead (one
    // template each), calling hook(step, slot, context) after every step so
    // that a test can SIGKILL the process there. The entry points above are
    // compiled without the calls.
    Admission charge_stepwise(int device, uint64_t bytes, StepHook hook, void* context);
    void uncharge_stepwise(int device, uint64_t bytes, StepHook hook, void* context);
    int reclaim_dead_stepwise(StepHook hook, void* context);

    // Gives the slot back (charges returned) and unmaps. Idempotent.
    void close();

    // Snapshot for status. device_count() is the number of ready records.
    int device_count() const;
    bool device_usage(int device, DeviceUsage& usage) const;
    // Slot i: false when never used or released; alive is the OFD probe.
    bool slot_usage(int slot, int32_t& pid, uint64_t charged[kMaxGroupDevices], bool& alive,
                    char comm[16]) const;
    int own_slot() const { return slot_; }
    // The descriptor whose open description holds this handle's locks (the
    // slot's among them): what the library hands the host daemon to prove
    // its slot (daemon_protocol.hpp). -1 when closed.
    int lock_fd() const { return fd_; }
    // The mapping (sizeof(StateFile) bytes; nullptr when closed), for the
    // daemon's SIGBUS guard (sigbus_guard.hpp).
    void* mapping() const { return file_; }

  private:
    struct Protocol; // group_state.cpp

    StateFile* file_ = nullptr;
    int fd_ = -1;
    int slot_ = -1;
    int owner_pid_ = 0; // the process that registered slot_ (a fork child is not it)
    bool writable_ = false;
    // One reclaimer per process at a time: the OFD locks of one description
    // do not exclude each other, so two threads must not both take a dead
    // slot's lock. Process-local, never held while waiting on another process.
    std::atomic<bool> reclaiming_{false};
    char path_[kPathSize] = {};
};

} // namespace gpuinit::limit
