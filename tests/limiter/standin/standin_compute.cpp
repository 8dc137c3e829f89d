// Kernels of the stand-in libcuda.so.1: per-stream worker threads over the
// shared timeline. See standin_compute.hpp and standin_timeline.hpp.
#include "standin_compute.hpp"

#include "standin_timeline.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <unistd.h>

namespace standin::compute {
namespace {

uint64_t env_number(const char* name, uint64_t fallback) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') {
        return fallback;
    }
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0') {
        std::fprintf(stderr, "standin libcuda: bad %s '%s'\n", name, v);
        std::abort();
    }
    return n;
}

std::atomic<uint64_t> g_kernel_ns{env_number("GPULIMIT_STANDIN_KERNEL_NS", 0)};
std::atomic<uint32_t> g_queue_depth{static_cast<uint32_t>(
    std::clamp<uint64_t>(env_number("GPULIMIT_STANDIN_QUEUE_DEPTH", 1024), 1, 1U << 20))};

timeline::Mapping& mapping() {
    static timeline::Mapping* m = new timeline::Mapping(timeline::map_timeline("standin libcuda"));
    return *m;
}

struct Item {
    uint64_t ns = 0;
    Kernels graph;
};

// Registry of live workers, for cuCtxSynchronize; a fork child forgets the
// parent's (their threads are not in the child).
std::mutex g_registry_mutex;
std::vector<WorkerPtr>* g_registry = new std::vector<WorkerPtr>;

} // namespace

struct Worker {
    int device = 0;
    int lock_fd = -1; // this worker's own open file description for the device lock
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<Item> queue;
    bool running = false; // an item is off the queue and running
    bool retired = false;
};

namespace {

void lock_device(const Worker& w, short type) {
    struct flock fl {};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = w.device;
    fl.l_len = 1;
    while (fcntl(w.lock_fd, type == F_UNLCK ? F_OFD_SETLK : F_OFD_SETLKW, &fl) != 0) {
        if (errno != EINTR) {
            std::fprintf(stderr, "standin libcuda: device lock: %s\n", std::strerror(errno));
            std::abort();
        }
    }
}

// One kernel: take the device, be busy for ns, give it back. A kernel that
// gives the device back while others wait lets one of them have it before it
// takes it again (fcntl locks are not fair): time slices alternate between
// processes as on a real GPU.
void run_kernel(Worker& w, uint64_t ns) {
    timeline::DeviceLine& line = mapping().file->devices[w.device];
    line.waiters.fetch_add(1, std::memory_order_acq_rel);
    lock_device(w, F_WRLCK);
    line.waiters.fetch_sub(1, std::memory_order_acq_rel);
    line.generation.fetch_add(1, std::memory_order_acq_rel);
    timeline::futex(&line.generation, FUTEX_WAKE, INT32_MAX, nullptr);

    const uint64_t start = timeline::now_ns();
    const uint64_t index =
        timeline::begin_interval(line, static_cast<uint32_t>(getpid()), start, start + ns);
    const uint64_t planned = start + ns;
    timespec until{static_cast<time_t>(planned / 1'000'000'000ULL),
                   static_cast<long>(planned % 1'000'000'000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
    }
    timeline::end_interval(line, index, timeline::now_ns());
    const uint32_t generation = line.generation.load(std::memory_order_acquire);
    lock_device(w, F_UNLCK);
    if (line.waiters.load(std::memory_order_acquire) > 0) {
        const timespec timeout{0, 2'000'000}; // a waiter that died must not stall the device
        timeline::futex(&line.generation, FUTEX_WAIT, generation, &timeout);
    }
}

void work(const WorkerPtr& self) {
    Worker& w = *self;
    std::unique_lock lock(w.mutex);
    for (;;) {
        w.changed.wait(lock, [&] { return !w.queue.empty() || w.retired; });
        if (w.queue.empty()) {
            break; // retired and drained
        }
        Item item = std::move(w.queue.front());
        w.queue.pop_front();
        w.running = true;
        w.changed.notify_all();
        lock.unlock();
        if (item.graph) {
            for (uint64_t ns : *item.graph) {
                if (ns > 0) {
                    run_kernel(w, ns);
                }
            }
        } else {
            run_kernel(w, item.ns);
        }
        lock.lock();
        w.running = false;
        w.changed.notify_all();
    }
    lock.unlock();
    close(w.lock_fd);
    w.lock_fd = -1;
    std::lock_guard registry(g_registry_mutex);
    auto& all = *g_registry;
    all.erase(std::remove(all.begin(), all.end(), self), all.end());
}

void forget_after_fork() {
    // The parent's workers have no thread here; their mutexes may be held.
    // Leak them rather than touch them.
    new (&g_registry_mutex) std::mutex;
    g_registry = new std::vector<WorkerPtr>;
}

} // namespace

uint64_t kernel_ns() {
    return g_kernel_ns.load(std::memory_order_relaxed);
}

void set_kernel_ns(uint64_t ns) {
    g_kernel_ns.store(ns, std::memory_order_relaxed);
}

void set_queue_depth(uint32_t depth) {
    g_queue_depth.store(std::max<uint32_t>(depth, 1), std::memory_order_relaxed);
}

WorkerPtr make_worker(int device) {
    static std::once_flag fork_handler;
    std::call_once(fork_handler, [] { pthread_atfork(nullptr, nullptr, forget_after_fork); });
    if (device < 0 || static_cast<uint32_t>(device) >= timeline::kMaxDevices) {
        std::fprintf(stderr, "standin libcuda: device %d is beyond the timeline's %u\n", device,
                     timeline::kMaxDevices);
        std::abort();
    }
    auto w = std::make_shared<Worker>();
    w->device = device;
    w->lock_fd = open(mapping().path.c_str(), O_RDWR | O_CLOEXEC);
    if (w->lock_fd < 0) {
        std::fprintf(stderr, "standin libcuda: cannot open %s: %s\n", mapping().path.c_str(),
                     std::strerror(errno));
        std::abort();
    }
    {
        std::lock_guard registry(g_registry_mutex);
        g_registry->push_back(w);
    }
    std::thread([w] { work(w); }).detach();
    return w;
}

void enqueue(const WorkerPtr& worker, uint64_t ns, Kernels graph) {
    std::unique_lock lock(worker->mutex);
    worker->changed.wait(
        lock, [&] { return worker->queue.size() < g_queue_depth.load(std::memory_order_relaxed); });
    worker->queue.push_back(Item{ns, std::move(graph)});
    worker->changed.notify_all();
}

void synchronize(const WorkerPtr& worker) {
    std::unique_lock lock(worker->mutex);
    worker->changed.wait(lock, [&] { return worker->queue.empty() && !worker->running; });
}

bool idle(const WorkerPtr& worker) {
    std::lock_guard lock(worker->mutex);
    return worker->queue.empty() && !worker->running;
}

void synchronize_device(int device) {
    std::vector<WorkerPtr> workers;
    {
        std::lock_guard registry(g_registry_mutex);
        workers = *g_registry;
    }
    for (const WorkerPtr& w : workers) {
        if (device < 0 || w->device == device) {
            synchronize(w);
        }
    }
}

void retire(const WorkerPtr& worker) {
    std::lock_guard lock(worker->mutex);
    worker->retired = true;
    worker->changed.notify_all();
}

uint64_t busy_ns(int device, uint32_t pid, uint64_t from, uint64_t to) {
    if (device < 0 || static_cast<uint32_t>(device) >= timeline::kMaxDevices || to <= from) {
        return 0;
    }
    return timeline::busy_ns(mapping().file->devices[device], pid, from, to);
}

void* timeline_base() {
    return mapping().file;
}

} // namespace standin::compute
