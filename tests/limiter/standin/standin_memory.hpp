// The stand-in GPUs' per-process memory table (tests only): how much device
// memory each process of a test holds, as the stand-in libcuda.so.1 counts
// it, for the stand-in libnvidia-ml.so.1 of any process to list
// (nvmlDeviceGetComputeRunningProcesses), as the real NVML lists every
// process's memory whoever asks.
//
// GPULIMIT_STANDIN_DIR names a directory for the file `process-memory`
// (next to the compute timeline); without it there is no table and memory
// stays private to the process. A process takes a slot the first time it
// holds memory: an OFD write lock on the slot's byte of the file, which the
// kernel drops when the process dies, so a reader lists only slots whose
// byte is held (F_OFD_GETLK), and a dead process's slot is free for the
// next one. A forked child takes a slot of its own. All of the file is
// valid when zero.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace standin::memory {

inline constexpr uint32_t kMaxDevices = 16; // CUDA ordinals
inline constexpr uint32_t kSlots = 256;
inline constexpr const char* kFileName = "process-memory";

struct Slot {
    std::atomic<uint32_t> pid; // 0 while the slot is being taken
    uint32_t pad;
    std::atomic<uint64_t> used[kMaxDevices];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct File {
    Slot slots[kSlots];
};

struct Table {
    std::string path; // opened again by each process for a description of its own
    File* file = nullptr;
};

// Opens and maps the table of GPULIMIT_STANDIN_DIR; an empty Table without
// the variable. A broken setup is a broken test: say so and stop.
inline Table open_table(const char* who) {
    Table table;
    const char* dir = std::getenv("GPULIMIT_STANDIN_DIR");
    if (dir == nullptr || *dir == '\0') {
        return table;
    }
    const std::string path = std::string(dir) + "/" + kFileName;
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0 ||
        (static_cast<size_t>(st.st_size) < sizeof(File) && ftruncate(fd, sizeof(File)) != 0)) {
        std::fprintf(stderr, "%s: cannot open %s: %s\n", who, path.c_str(), std::strerror(errno));
        std::abort();
    }
    void* base = mmap(nullptr, sizeof(File), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        std::fprintf(stderr, "%s: cannot map %s: %s\n", who, path.c_str(), std::strerror(errno));
        std::abort();
    }
    close(fd);
    table.path = path;
    table.file = static_cast<File*>(base);
    return table;
}

inline bool lock_byte(int fd, uint32_t slot, int command, short type) {
    struct flock lock {};
    lock.l_type = type;
    lock.l_whence = SEEK_SET;
    lock.l_start = static_cast<off_t>(slot);
    lock.l_len = 1;
    return fcntl(fd, command, &lock) == 0 && (command != F_OFD_GETLK || lock.l_type != F_UNLCK);
}

// Whether some open file description holds the slot (its process lives).
// `fd` must be a description of its own: OFD locks of one description do
// not conflict with themselves.
inline bool slot_held(int fd, uint32_t slot) {
    return lock_byte(fd, slot, F_OFD_GETLK, F_WRLCK);
}

// Takes a free slot for pid through `fd` (a description of the caller's
// own); kSlots when all are taken.
inline uint32_t take_slot(int fd, File& file, uint32_t pid) {
    for (uint32_t s = 0; s < kSlots; ++s) {
        if (!lock_byte(fd, s, F_OFD_SETLK, F_WRLCK)) {
            continue;
        }
        Slot& slot = file.slots[s];
        slot.pid.store(0, std::memory_order_release);
        for (auto& used : slot.used) {
            used.store(0, std::memory_order_relaxed);
        }
        slot.pid.store(pid, std::memory_order_release);
        return s;
    }
    return kSlots;
}

} // namespace standin::memory
