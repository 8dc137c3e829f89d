// Kernels of the stand-in libcuda.so.1 (tests only): each stream has a worker
// thread that runs the stream's kernels in order, one at a time, each holding
// its device exclusively for its duration (standin_timeline.hpp), and records
// them in the shared timeline that the stand-in NVML reads.
//
// A launch enqueues and returns at once, as on a real GPU; a stream's queue
// holds at most the queue depth (GPULIMIT_STANDIN_QUEUE_DEPTH, default 1024)
// and a launch onto a full queue waits for room, as the real driver does.
// A kernel lasts the kernel duration current when it was launched
// (GPULIMIT_STANDIN_KERNEL_NS or gpulimit_standin_set_kernel_ns; default 0:
// launches are no-ops and touch no queue).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace standin::compute {

struct Worker;
using WorkerPtr = std::shared_ptr<Worker>;
using Kernels = std::shared_ptr<const std::vector<uint64_t>>;

uint64_t kernel_ns();
void set_kernel_ns(uint64_t ns);
void set_queue_depth(uint32_t depth);

// A new worker (thread) for a stream on the device (CUDA ordinal).
WorkerPtr make_worker(int device);
// Queues one kernel of `ns`, or the kernels of a graph; waits while full.
void enqueue(const WorkerPtr& worker, uint64_t ns, Kernels graph);
// Waits until everything queued on the worker has run.
void synchronize(const WorkerPtr& worker);
// The same for every live worker of the device (-1: every device).
void synchronize_device(int device);
bool idle(const WorkerPtr& worker);
// The worker ends once its queue is empty (stream destroyed, thread gone).
void retire(const WorkerPtr& worker);

// Busy ns of pid (0: all processes) on the device in [from, to)
// (CLOCK_MONOTONIC ns), from the shared timeline.
uint64_t busy_ns(int device, uint32_t pid, uint64_t from, uint64_t to);
// The timeline's mapping, for the stand-in NVML in the same process.
void* timeline_base();

} // namespace standin::compute
