// The stand-in GPUs' shared timeline (tests only): which process kept which
// device busy when, shared by every process of a test and by the stand-in
// libcuda.so.1 (which writes it) and libnvidia-ml.so.1 (which reads it).
//
// GPULIMIT_STANDIN_DIR names a directory for the file `compute-timeline`;
// every process given the same directory shares the simulated devices: a
// kernel holds its device exclusively while it runs (an OFD write lock on the
// device's byte of the file, which the kernel drops when a process dies), so
// kernels of different processes serialize on one device, as on a
// time-sliced GPU, and run at the same time on different devices. Without
// the variable the timeline is private to the process (a memfd).
//
// Each device has a ring of busy intervals (pid, start, end; CLOCK_MONOTONIC
// ns) appended under the device's lock, so a ring is in time order and a
// reader walks it backwards until it is past the time it wants. An entry is
// published by its sequence number (seqlock style): a reader that races a
// writer skips the entry. All of the file is valid when zero, so a process
// that creates it needs no initialization step that others could race.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <linux/futex.h>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace standin::timeline {

inline constexpr uint32_t kMaxDevices = 16;
// 32768 intervals per device: over 60 s of 2 ms kernels; NVML looks back at
// most kHistoryNs.
inline constexpr uint64_t kRing = 1U << 15;
// NVML's per-process sample window (real GPUs sample every 1/6 s to 1 s).
inline constexpr uint64_t kWindowNs = 1'000'000'000ULL / 6;
inline constexpr uint64_t kHistoryWindows = 12;
inline constexpr const char* kFileName = "compute-timeline";

struct Interval {
    std::atomic<uint64_t> seq;   // index + 1 once published; 0 while written
    std::atomic<uint64_t> start; // CLOCK_MONOTONIC ns
    std::atomic<uint64_t> end;   // planned end at first, the real end once done
    std::atomic<uint32_t> pid;
    uint32_t pad;
};
static_assert(sizeof(Interval) == 32);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct alignas(64) DeviceLine {
    std::atomic<uint64_t> head;       // intervals ever appended
    std::atomic<uint32_t> waiters;    // kernels waiting for the device
    std::atomic<uint32_t> generation; // futex word: +1 each time a kernel takes the device
    char pad[48];
    Interval ring[kRing];
};

struct File {
    DeviceLine devices[kMaxDevices];
};

inline uint64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

struct Mapping {
    File* file = nullptr;
    std::string path; // opened again by each kernel runner for its own OFD
};

// Maps the shared timeline (GPULIMIT_STANDIN_DIR) or a private one. A broken
// setup is a broken test: say so and stop.
inline Mapping map_timeline(const char* who) {
    Mapping m;
    const char* dir = std::getenv("GPULIMIT_STANDIN_DIR");
    int fd = -1;
    if (dir != nullptr && *dir != '\0') {
        m.path = std::string(dir) + "/" + kFileName;
        fd = open(m.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    } else {
        fd = static_cast<int>(syscall(SYS_memfd_create, "gpulimit-standin-timeline", 0U));
        if (fd >= 0) {
            m.path = "/proc/self/fd/" + std::to_string(fd);
        }
    }
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0 ||
        (static_cast<size_t>(st.st_size) < sizeof(File) && ftruncate(fd, sizeof(File)) != 0)) {
        std::fprintf(stderr, "%s: cannot open the timeline %s: %s\n", who, m.path.c_str(),
                     std::strerror(errno));
        std::abort();
    }
    void* base = mmap(nullptr, sizeof(File), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        std::fprintf(stderr, "%s: cannot map the timeline: %s\n", who, std::strerror(errno));
        std::abort();
    }
    if (dir != nullptr && *dir != '\0') {
        close(fd); // the memfd stays open: its /proc path is how runners reopen it
    }
    m.file = static_cast<File*>(base);
    return m;
}

inline uint64_t begin_interval(DeviceLine& d, uint32_t pid, uint64_t start, uint64_t planned_end) {
    const uint64_t index = d.head.fetch_add(1, std::memory_order_relaxed);
    Interval& e = d.ring[index % kRing];
    e.seq.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    e.start.store(start, std::memory_order_relaxed);
    e.end.store(planned_end, std::memory_order_relaxed);
    e.pid.store(pid, std::memory_order_relaxed);
    e.seq.store(index + 1, std::memory_order_release);
    return index;
}

inline void end_interval(DeviceLine& d, uint64_t index, uint64_t end) {
    d.ring[index % kRing].end.store(end, std::memory_order_release);
}

// Calls fn(pid, start, end) for each interval of the device that ends after
// `from`, newest first; intervals still running end at `now` at the latest.
template <typename Fn>
void for_each_interval(const DeviceLine& d, uint64_t from, uint64_t now, Fn&& fn) {
    const uint64_t head = d.head.load(std::memory_order_acquire);
    const uint64_t oldest = head > kRing ? head - kRing : 0;
    for (uint64_t i = head; i > oldest; --i) {
        const Interval& e = d.ring[(i - 1) % kRing];
        const uint64_t seq = e.seq.load(std::memory_order_acquire);
        const uint64_t start = e.start.load(std::memory_order_relaxed);
        uint64_t end = e.end.load(std::memory_order_acquire);
        const uint32_t pid = e.pid.load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (seq != i || e.seq.load(std::memory_order_relaxed) != seq) {
            continue; // being written, or already overwritten
        }
        end = end < now ? end : now;
        if (end <= from) {
            break; // the device runs one kernel at a time: all older ones end earlier
        }
        if (start < end) {
            fn(pid, start, end);
        }
    }
}

// Busy ns of pid (0: all processes) on the device within [from, to).
inline uint64_t busy_ns(const DeviceLine& d, uint32_t pid, uint64_t from, uint64_t to) {
    uint64_t busy = 0;
    for_each_interval(d, from, to, [&](uint32_t p, uint64_t start, uint64_t end) {
        if (pid != 0 && p != pid) {
            return;
        }
        const uint64_t a = start > from ? start : from;
        const uint64_t b = end < to ? end : to;
        busy += b > a ? b - a : 0;
    });
    return busy;
}

inline long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
    return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

} // namespace standin::timeline
