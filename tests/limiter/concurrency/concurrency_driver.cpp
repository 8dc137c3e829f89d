// Many processes in one limit group (tests/limiter/concurrency): N worker
// processes, each with several threads, charge and uncharge random sizes on
// two devices of one group, with caps small enough that refusals are
// frequent. A checker process watches every device total through a
// read-only mapping and fails if one ever exceeds its cap; it also calls
// reclaim_dead() every 250 ms, as the library's reporting calls do. With
// --kill the driver SIGKILLs random workers mid-run (and starts new ones),
// and the checker fails unless each killed worker's slot is reclaimed within
// 1 s. At the end the workers stop at a barrier: every total must equal both
// the sum of the live slots' charges and the sum of the workers' own books;
// after they exit (half closing, half just dying), every total must be 0.
//
// group_state.cpp is compiled into this program, so that the ASan and TSan
// builds instrument it too.
//
// Built with GPULIMIT_INTERPOSED, the workers allocate through the driver
// API instead (cuMemAlloc_v2 / cuMemFree_v2 on the stand-in libcuda.so.1,
// with libgpulimit.so preloaded by the test's environment, which also sets
// AMP_VGPU_ENABLE and GPU_MEM_PER_DEVICE): one device, 2 MiB multiples, a
// refusal must be CUDA_ERROR_OUT_OF_MEMORY. The checker and the end checks
// read the same group file that the library keeps.
//
//   concurrency_driver [--workers N] [--threads T] [--seconds S] [--kill]
#include "gpuinit/limit/group_state.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <random>
#include <string>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace gpuinit::limit;

#ifdef GPULIMIT_INTERPOSED
extern "C" {
// By exported ABI name (no cuda.h in CI).
int cuInit(unsigned int flags);
int cuDeviceGet(int* device, int ordinal);
int cuCtxCreate_v2(void** context, unsigned int flags, int device);
int cuCtxSetCurrent(void* context);
int cuMemAlloc_v2(unsigned long long* pointer, size_t bytes);
int cuMemFree_v2(unsigned long long pointer);
}
#endif

namespace {

constexpr int kMaxWorkers = 256;
constexpr const char* kGroup = "concurrency";
#ifdef GPULIMIT_INTERPOSED
constexpr int kDevices = 1;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGranule = 2 * kMiB; // the stand-in's allocation granularity
// GPU_MEM_PER_DEVICE (210 MiB, set by the test) - the default 10 MiB reserved.
constexpr uint64_t kCap[kDevices] = {200 * kMiB};
constexpr const char* kUuids[kDevices] = {"GPU-11111111-2222-3333-4444-555555555555"};
constexpr int kCudaOutOfMemory = 2;
#else
constexpr int kDevices = 2;
constexpr uint64_t kCap[kDevices] = {4'000'000, 2'500'000};
constexpr uint64_t kMaxRequest = 200'000;
constexpr const char* kUuids[kDevices] = {"GPU-c0c0c0c0-0000-0000-0000-000000000000",
                                          "GPU-c1c1c1c1-1111-1111-1111-111111111111"};
#endif

enum Phase : int { Running = 0, Stopping = 1, Exiting = 2 };

struct WorkerRecord {
    std::atomic<int> pid;
    std::atomic<int> slot;    // -1 until registered
    std::atomic<int> stopped; // at the end barrier
    std::atomic<int> killed;
    std::atomic<uint64_t> killed_at_ns; // CLOCK_MONOTONIC
    std::atomic<int> reclaim_seen;      // the checker saw the slot reclaimed
    std::atomic<uint64_t> books[kDevices];
    std::atomic<uint64_t> admitted;
    std::atomic<uint64_t> refused;
};

// Shared by the driver, the checker and the workers (anonymous, MAP_SHARED).
struct Shared {
    std::atomic<int> phase;
    std::atomic<int> checker_ready;
    std::atomic<int> checker_quiet; // stopped reclaiming, for the barrier checks
    std::atomic<int> failures;
    std::atomic<uint64_t> checks;
    std::atomic<uint64_t> max_used[kDevices];
    std::atomic<uint64_t> max_reclaim_ns;
    std::atomic<int> reclaims_seen;
    std::atomic<int> worker_count;
    WorkerRecord workers[kMaxWorkers];
    char first_failure[512];
    std::atomic<int> failure_claimed;
};

Shared* shared = nullptr;
char state_dir[256];

uint64_t now_ns() {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return uint64_t(now.tv_sec) * 1'000'000'000u + uint64_t(now.tv_nsec);
}

void sleep_ms(int milliseconds) {
    timespec pause{milliseconds / 1000, long(milliseconds % 1000) * 1'000'000};
    nanosleep(&pause, nullptr);
}

__attribute__((format(printf, 1, 2))) void failure(const char* format, ...) {
    shared->failures.fetch_add(1);
    char line[512];
    va_list arguments;
    va_start(arguments, format);
    // clang-analyzer misreads va_start on x86_64's array va_list here.
    // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
    std::vsnprintf(line, sizeof line, format, arguments);
    va_end(arguments);
    if (shared->failure_claimed.exchange(1) == 0) {
        std::memcpy(shared->first_failure, line, sizeof line);
    }
    std::fprintf(stderr, "concurrency: FAIL: %s\n", line);
}

bool join_group(GroupState& state, int (&devices)[kDevices], bool register_slot) {
    Problem problem;
    if (!state.open(state_dir, kGroup, problem) ||
        (register_slot && !state.register_process(problem))) {
        failure("%s", problem.text);
        return false;
    }
    for (int d = 0; d < kDevices; ++d) {
        devices[d] = state.attach_device(kUuids[d], kCap[d], kCap[d] * 4, problem);
        if (devices[d] < 0) {
            failure("%s", problem.text);
            return false;
        }
    }
    return true;
}

#ifdef GPULIMIT_INTERPOSED
// One thread of a worker, allocating through the interposer.
void worker_thread(void* context, WorkerRecord& record, unsigned seed) {
    if (cuCtxSetCurrent(context) != 0) {
        failure("cuCtxSetCurrent failed");
        return;
    }
    unsigned long long held[32];
    uint64_t sizes[32];
    int count = 0;
    std::minstd_rand random(seed);
    while (shared->phase.load(std::memory_order_relaxed) == Running) {
        bool allocate = count == 0 || (count < 32 && random() % 100 < 55);
        if (allocate) {
            uint64_t bytes = (1 + random() % 12) * kGranule;
            unsigned long long pointer = 0;
            int result = cuMemAlloc_v2(&pointer, bytes);
            if (result == 0) {
                record.books[0].fetch_add(bytes);
                held[count] = pointer;
                sizes[count++] = bytes;
                record.admitted.fetch_add(1, std::memory_order_relaxed);
            } else if (result == kCudaOutOfMemory) {
                record.refused.fetch_add(1, std::memory_order_relaxed);
            } else {
                failure("cuMemAlloc_v2(%llu) returned %d", (unsigned long long)bytes, result);
                return;
            }
        } else {
            int pick = int(random() % unsigned(count));
            unsigned long long pointer = held[pick];
            uint64_t bytes = sizes[pick];
            --count;
            held[pick] = held[count];
            sizes[pick] = sizes[count];
            if (cuMemFree_v2(pointer) != 0) {
                failure("cuMemFree_v2 failed");
            }
            record.books[0].fetch_sub(bytes);
        }
    }
}

[[noreturn]] void run_worker(int index, int threads) {
    WorkerRecord& record = shared->workers[index];
    int device = 0;
    void* context = nullptr;
    if (cuInit(0) != 0 || cuDeviceGet(&device, 0) != 0 ||
        cuCtxCreate_v2(&context, 0, device) != 0) {
        failure("worker %d: cuInit/cuDeviceGet/cuCtxCreate failed", index);
        _exit(1);
    }
    // The library registered this process at cuInit: find its slot.
    GroupState reader;
    Problem problem;
    if (!reader.open_read_only(state_dir, kGroup, problem)) {
        failure("worker: %s", problem.text);
        _exit(1);
    }
    for (int slot = 0; slot < kMaxSlots; ++slot) {
        int32_t pid = 0;
        uint64_t charged[kMaxGroupDevices];
        bool alive = false;
        char comm[16];
        if (reader.slot_usage(slot, pid, charged, alive, comm) && pid == getpid()) {
            record.slot.store(slot);
        }
    }
    reader.close();
    std::vector<std::thread> pool;
    pool.reserve(size_t(threads));
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back(worker_thread, context, std::ref(record),
                          unsigned(getpid()) * 31u + unsigned(t));
    }
    for (std::thread& thread : pool) {
        thread.join();
    }
    record.stopped.store(1);
    while (shared->phase.load() != Exiting) {
        sleep_ms(5);
    }
    _exit(0); // the library's slot goes with the process
}
#else
// One thread of a worker: a private list of "allocations".
void worker_thread(GroupState& state, const int (&devices)[kDevices], WorkerRecord& record,
                   unsigned seed) {
    struct Allocation {
        int device;
        uint64_t bytes;
    };
    Allocation held[32];
    int count = 0;
    std::minstd_rand random(seed);
    while (shared->phase.load(std::memory_order_relaxed) == Running) {
        bool allocate = count == 0 || (count < 32 && random() % 100 < 55);
        if (allocate) {
            int device = devices[random() % kDevices];
            uint64_t bytes = 1 + random() % kMaxRequest;
            int index = device == devices[0] ? 0 : 1;
            if (state.charge(device, bytes) == Admission::Admitted) {
                // The workers check too, right after each admission: the
                // checker alone may be starved of CPU under this load.
                uint64_t used = state.group_used(device);
                if (used > kCap[index]) {
                    failure("worker: device %d total %llu above the cap %llu", index,
                            (unsigned long long)used, (unsigned long long)kCap[index]);
                }
                record.books[index].fetch_add(bytes);
                held[count++] = {device, bytes};
                record.admitted.fetch_add(1, std::memory_order_relaxed);
            } else {
                state.note_refusal(device);
                record.refused.fetch_add(1, std::memory_order_relaxed);
            }
        } else {
            int pick = int(random() % unsigned(count));
            Allocation freed = held[pick];
            held[pick] = held[--count];
            state.uncharge(freed.device, freed.bytes);
            record.books[freed.device == devices[0] ? 0 : 1].fetch_sub(freed.bytes);
        }
    }
}

[[noreturn]] void run_worker(int index, int threads) {
    WorkerRecord& record = shared->workers[index];
    GroupState state;
    int devices[kDevices];
    if (!join_group(state, devices, true)) {
        _exit(1);
    }
    record.slot.store(state.own_slot());
    std::vector<std::thread> pool;
    pool.reserve(size_t(threads));
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back(worker_thread, std::ref(state), std::cref(devices), std::ref(record),
                          unsigned(getpid()) * 31u + unsigned(t));
    }
    for (std::thread& thread : pool) {
        thread.join();
    }
    record.stopped.store(1);
    while (shared->phase.load() != Exiting) {
        sleep_ms(5);
    }
    if (index % 2 == 0) {
        state.close(); // returns the charges; the odd ones die holding theirs
    }
    _exit(0);
}

#endif

[[noreturn]] void run_checker() {
    GroupState reader;
    GroupState reclaimer;
    Problem problem;
    int devices[kDevices];
    if (!reader.open_read_only(state_dir, kGroup, problem)) {
        failure("checker: %s", problem.text);
        _exit(1);
    }
    if (!join_group(reclaimer, devices, false)) {
        _exit(1);
    }
    shared->checker_ready.store(1);
    uint64_t next_reclaim = now_ns();
    for (;;) {
        // One more pass after Exiting: the driver's own reclaim at the
        // barrier may have been the one that returned a killed worker's share.
        int phase = shared->phase.load();
        for (int d = 0; d < kDevices; ++d) {
            uint64_t used = reader.group_used(devices[d]);
            if (used > kCap[d]) {
                failure("device %d: total %llu above the cap %llu", d, (unsigned long long)used,
                        (unsigned long long)kCap[d]);
            }
            uint64_t seen = shared->max_used[d].load(std::memory_order_relaxed);
            if (used > seen) {
                shared->max_used[d].store(used, std::memory_order_relaxed);
            }
        }
        shared->checks.fetch_add(1, std::memory_order_relaxed);
        uint64_t now = now_ns();
        if (phase != Running) {
            shared->checker_quiet.store(1);
        } else if (now >= next_reclaim) {
            reclaimer.reclaim_dead();
            next_reclaim = now + 250'000'000u;
        }
        // A killed worker's memory must be back within 1 s.
        int workers = shared->worker_count.load();
        for (int w = 0; w < workers; ++w) {
            WorkerRecord& record = shared->workers[w];
            if (record.killed.load() == 0 || record.reclaim_seen.load() != 0) {
                continue;
            }
            int slot = record.slot.load();
            int32_t pid = 0;
            uint64_t charged[kMaxGroupDevices];
            bool alive = false;
            char comm[16];
            bool reclaimed = slot < 0 || !reader.slot_usage(slot, pid, charged, alive, comm) ||
                             pid != record.pid.load();
            uint64_t waited = now_ns() - record.killed_at_ns.load();
            if (reclaimed) {
                record.reclaim_seen.store(1);
                shared->reclaims_seen.fetch_add(1);
                if (waited > shared->max_reclaim_ns.load()) {
                    shared->max_reclaim_ns.store(waited);
                }
            } else if (waited > 1'000'000'000u) {
                record.reclaim_seen.store(1);
                failure("worker %d (pid %d, slot %d) killed %.3f s ago is not reclaimed", w,
                        record.pid.load(), slot, double(waited) / 1e9);
            }
        }
        if (phase == Exiting) {
            break;
        }
    }
    _exit(0);
}

pid_t start_worker(int index, int threads) {
    WorkerRecord& record = shared->workers[index];
    record.slot.store(-1);
    pid_t pid = fork();
    if (pid == 0) {
        run_worker(index, threads);
    }
    record.pid.store(pid);
    return pid;
}

int usage() {
    std::fprintf(stderr,
                 "usage: concurrency_driver [--workers N] [--threads T] [--seconds S] [--kill]\n");
    return 2;
}

} // namespace

int main(int argc, char** argv) {
    int workers = 16;
    int threads = 2;
    double seconds = 3;
    bool kill_workers = false;
    for (int i = 1; i < argc; ++i) {
        std::string argument = argv[i];
        if (argument == "--kill") {
            kill_workers = true;
        } else if (argument == "--workers" && i + 1 < argc) {
            workers = std::atoi(argv[++i]);
        } else if (argument == "--threads" && i + 1 < argc) {
            threads = std::atoi(argv[++i]);
        } else if (argument == "--seconds" && i + 1 < argc) {
            seconds = std::atof(argv[++i]);
        } else {
            return usage();
        }
    }
    if (workers < 1 || threads < 1 || workers > kMaxWorkers / 2) {
        return usage();
    }

    void* mapping =
        mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) {
        std::perror("mmap");
        return 1;
    }
    shared = new (mapping) Shared{};
    const char* tmp = std::getenv("TMPDIR");
    std::snprintf(state_dir, sizeof state_dir, "%s/gpulimit-concurrency.XXXXXX",
                  tmp != nullptr ? tmp : "/tmp");
    if (mkdtemp(state_dir) == nullptr) {
        std::perror("mkdtemp");
        return 1;
    }

#ifdef GPULIMIT_INTERPOSED
    setenv("GPU_LIMIT_STATE_DIR", state_dir, 1);
    setenv("GPU_LIMIT_GROUP", kGroup, 1);
#endif
    // The driver's own handle: no slot, used for the end checks and reclaim.
    GroupState driver;
    int devices[kDevices];
    if (!join_group(driver, devices, false)) {
        return 1;
    }

    pid_t checker = fork();
    if (checker == 0) {
        run_checker();
    }
    while (shared->checker_ready.load() == 0 && shared->failures.load() == 0) {
        sleep_ms(1);
    }

    shared->worker_count.store(workers);
    for (int w = 0; w < workers; ++w) {
        start_worker(w, threads);
    }

    std::minstd_rand random{static_cast<unsigned>(getpid())};
    uint64_t end = now_ns() + uint64_t(seconds * 1e9);
    int kills = 0;
    while (now_ns() < end) {
        if (!kill_workers) {
            sleep_ms(50);
            continue;
        }
        sleep_ms(int(60 + random() % 120));
        int count = shared->worker_count.load();
        int victim = int(random() % unsigned(count));
        WorkerRecord& record = shared->workers[victim];
        if (record.killed.load() != 0 || record.slot.load() < 0 || count >= kMaxWorkers) {
            continue; // not yet registered: killing it would test nothing
        }
        record.killed_at_ns.store(now_ns());
        record.killed.store(1);
        kill(record.pid.load(), SIGKILL);
        waitpid(record.pid.load(), nullptr, 0);
        ++kills;
        // A replacement keeps the group at N live workers.
        start_worker(count, threads);
        shared->worker_count.store(count + 1);
    }

    // The end barrier: every live worker's threads have stopped.
    shared->phase.store(Stopping);
    int count = shared->worker_count.load();
    uint64_t deadline = now_ns() + 20'000'000'000u;
    for (;;) {
        int stopped = 0;
        int live = 0;
        for (int w = 0; w < count; ++w) {
            if (shared->workers[w].killed.load() != 0) {
                continue;
            }
            ++live;
            stopped += shared->workers[w].stopped.load();
        }
        if (stopped == live) {
            break;
        }
        if (now_ns() > deadline) {
            failure("only %d of %d workers reached the end barrier", stopped, live);
            break;
        }
        sleep_ms(5);
    }
    while (shared->checker_quiet.load() == 0) {
        sleep_ms(1);
    }
    driver.reclaim_dead(); // the killed workers the checker has not reached yet
    uint64_t admitted = 0;
    uint64_t refused = 0;
    for (int d = 0; d < kDevices; ++d) {
        uint64_t books = 0;
        for (int w = 0; w < count; ++w) {
            if (shared->workers[w].killed.load() == 0) {
                books += shared->workers[w].books[d].load();
            }
        }
        uint64_t slots = 0;
        for (int slot = 0; slot < kMaxSlots; ++slot) {
            int32_t pid = 0;
            uint64_t charged[kMaxGroupDevices];
            bool alive = false;
            char comm[16];
            if (driver.slot_usage(slot, pid, charged, alive, comm)) {
                slots += charged[devices[d]];
                if (!alive) {
                    failure("slot %d (pid %d) is dead but not reclaimed", slot, pid);
                }
            }
        }
        uint64_t total = driver.group_used(devices[d]);
        if (total != books || total != slots) {
            failure("device %d at the barrier: total %llu, workers' books %llu, live slots %llu", d,
                    (unsigned long long)total, (unsigned long long)books,
                    (unsigned long long)slots);
        }
    }
    for (int w = 0; w < count; ++w) {
        admitted += shared->workers[w].admitted.load();
        refused += shared->workers[w].refused.load();
    }

    shared->phase.store(Exiting);
    for (int w = 0; w < count; ++w) {
        if (shared->workers[w].killed.load() != 0) {
            continue;
        }
        int status = 0;
        waitpid(shared->workers[w].pid.load(), &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            failure("worker %d ended with status %d", w, status);
        }
    }
    int status = 0;
    waitpid(checker, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        failure("the checker ended with status %d", status);
    }
    int reclaimed = driver.reclaim_dead();
    for (int d = 0; d < kDevices; ++d) {
        if (driver.group_used(devices[d]) != 0) {
            failure("device %d: total %llu after every worker ended", d,
                    (unsigned long long)driver.group_used(devices[d]));
        }
    }
    if (refused == 0 || admitted == 0) {
        failure("no contention: %llu admitted, %llu refused", (unsigned long long)admitted,
                (unsigned long long)refused);
    }
    if (kill_workers && (kills == 0 || shared->reclaims_seen.load() != kills)) {
        failure("%d workers killed, the checker saw %d reclaimed", kills,
                shared->reclaims_seen.load());
    }

    char maxima[128] = {};
    for (int d = 0, used = 0; d < kDevices; ++d) {
        used += std::snprintf(maxima + used, sizeof maxima - size_t(used), "%s%llu/%llu",
                              d == 0 ? "" : " and ", (unsigned long long)shared->max_used[d].load(),
                              (unsigned long long)kCap[d]);
    }
    std::printf("concurrency: %d workers x %d threads, %.1f s: %llu admitted, %llu refused, "
                "%llu checks, max used %s, %d killed (max reclaim %.0f ms), %d reclaimed at "
                "exit, %d failures\n",
                count, threads, seconds, (unsigned long long)admitted, (unsigned long long)refused,
                (unsigned long long)shared->checks.load(), maxima, kills,
                double(shared->max_reclaim_ns.load()) / 1e6, reclaimed, shared->failures.load());
    driver.close();
    std::string remove = std::string("rm -rf ") + state_dir;
    if (std::system(remove.c_str()) != 0) {
        std::fprintf(stderr, "concurrency: could not remove %s\n", state_dir);
    }
    return shared->failures.load() == 0 ? 0 : 1;
}
