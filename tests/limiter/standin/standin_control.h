/* Test controls of the stand-in driver (tests only).
 *
 * The stand-in libcuda.so.1 and libnvidia-ml.so.1 export these next to the
 * driver API. A test program finds them with dlsym on the library's handle
 * (dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_NOW)), since the program itself
 * must not link against the stand-in (the interposer sits in between):
 *
 *   auto calls = reinterpret_cast<gpulimit_standin_calls_fn>(
 *       dlsym(handle, GPULIMIT_STANDIN_CALLS));
 *   calls("cuMemAlloc_v2");
 *
 * Names are exported ABI names ("cuMemAlloc_v2", "cuMemAllocAsync_ptsz"):
 * each exported function counts under its own name however it was reached
 * (direct call, dlsym, cuGetProcAddress).
 *
 * Environment of the stand-in:
 *   GPULIMIT_STANDIN_DEVICES="UUID:TOTAL_BYTES:PCI_BUS_ID,..." in CUDA
 *       ordinal order (default: GPU-11111111-2222-3333-4444-555555555555,
 *       16 GiB, 0000:3b:00.0 and GPU-66666666-7777-8888-9999-aaaaaaaaaaaa,
 *       8 GiB, 0000:1a:00.0; NVML lists them in PCI order, so reversed);
 *   GPULIMIT_STANDIN_DRIVER_VERSION (default 13000) for cuDriverGetVersion;
 *   GPULIMIT_STANDIN_TRACE=1: one stderr line per call, cuGetProcAddress
 *       request and cuGetExportTable request;
 *   GPULIMIT_STANDIN_INTERNAL_PROCS=1: cuGetProcAddress answers every request
 *       with an internal pointer: not the export (dlsym gives another
 *       address) but a hidden function that calls it, so calls still count
 *       under the ABI name; =global: what the program's global scope binds
 *       the ABI name to (with libgpulimit.so preloaded, its export). Anything else:
 *       the exports, as real drivers do.
 *
 *   GPULIMIT_STANDIN_DIR: a directory shared by the processes of a test
 *       (not the CMake variable of the same name, which is where the
 *       libraries are): their devices are the same devices, time-sliced
 *       between them, and the stand-in NVML reports their utilization
 *       (standin_timeline.hpp). Unset: devices private to the process;
 *   GPULIMIT_STANDIN_KERNEL_NS (default 0): how long a launched kernel runs;
 *       0 makes launches no-ops;
 *   GPULIMIT_STANDIN_QUEUE_DEPTH (default 1024): launches a stream holds
 *       before a launch waits for room.
 *
 * Memory as the stand-in sees it (process-local): every allocation rounds
 * up to 2 MiB; a pool holds its reserve in 2 MiB chunks and gives back what
 * is above its release threshold only at synchronization; graph memory is
 * what gpulimit_standin_set_graph_reserved says.
 *
 * Compute: a kernel launched with a duration above 0 is queued on its
 * stream's worker thread (one per created stream, per device for the legacy
 * default stream, per thread and device for the per-thread default stream)
 * and the launch returns; the worker runs the stream's kernels in order, each
 * holding its device exclusively for its duration, and records it in the
 * timeline. cuStreamSynchronize, cuEventSynchronize (the event's stream
 * drained) and cuCtxSynchronize (every stream of the device) wait for them.
 * A capturing stream (cuStreamBeginCapture*) records launches into its graph
 * instead; a graph launch runs the captured kernels in order. */
#ifndef GPULIMIT_STANDIN_CONTROL_H
#define GPULIMIT_STANDIN_CONTROL_H

#ifdef __cplusplus
extern "C" {
#endif

/* Calls of the exported function named abi_name since the start (or the last
 * reset), failed and injected calls included. */
unsigned long long gpulimit_standin_calls(const char* abi_name);
typedef unsigned long long (*gpulimit_standin_calls_fn)(const char* abi_name);
#define GPULIMIT_STANDIN_CALLS "gpulimit_standin_calls"

/* Sets every counter back to zero. */
void gpulimit_standin_reset_calls(void);
typedef void (*gpulimit_standin_reset_calls_fn)(void);
#define GPULIMIT_STANDIN_RESET_CALLS "gpulimit_standin_reset_calls"

/* ABI name of the last CUDA function called by any thread ("" before any). */
const char* gpulimit_standin_last_call(void);
typedef const char* (*gpulimit_standin_last_call_fn)(void);
#define GPULIMIT_STANDIN_LAST_CALL "gpulimit_standin_last_call"

/* Bytes of the device (CUDA ordinal) in use as the stand-in counts them:
 * linear, pitch, managed, pools' reserves, VMM device handles, arrays and
 * graph reserve; ~0ULL for a bad ordinal. */
unsigned long long gpulimit_standin_device_used(int ordinal);
typedef unsigned long long (*gpulimit_standin_device_used_fn)(int ordinal);
#define GPULIMIT_STANDIN_DEVICE_USED "gpulimit_standin_device_used"

/* The device's total bytes; 0 for a bad ordinal. */
unsigned long long gpulimit_standin_device_total(int ordinal);
typedef unsigned long long (*gpulimit_standin_device_total_fn)(int ordinal);
#define GPULIMIT_STANDIN_DEVICE_TOTAL "gpulimit_standin_device_total"

/* The next call of abi_name returns result (a CUresult) and does nothing
 * else; one call only. Arming the same name again replaces the result. */
void gpulimit_standin_fail_next(const char* abi_name, int result);
typedef void (*gpulimit_standin_fail_next_fn)(const char* abi_name, int result);
#define GPULIMIT_STANDIN_FAIL_NEXT "gpulimit_standin_fail_next"

/* Sets the device's graph memory reserve (what
 * cuDeviceGetGraphMemAttribute(RESERVED_MEM_CURRENT) answers; counted as
 * used); returns 0, or -1 when the device would be over its total. */
int gpulimit_standin_set_graph_reserved(int ordinal, unsigned long long bytes);
typedef int (*gpulimit_standin_set_graph_reserved_fn)(int ordinal, unsigned long long bytes);
#define GPULIMIT_STANDIN_SET_GRAPH_RESERVED "gpulimit_standin_set_graph_reserved"

/* How long each kernel launched from now on runs, in ns (0: launches are
 * no-ops, the default). Kernels already queued or captured keep theirs. */
void gpulimit_standin_set_kernel_ns(unsigned long long ns);
typedef void (*gpulimit_standin_set_kernel_ns_fn)(unsigned long long ns);
#define GPULIMIT_STANDIN_SET_KERNEL_NS "gpulimit_standin_set_kernel_ns"

/* Launches a stream holds before the next launch waits (at least 1). */
void gpulimit_standin_set_queue_depth(unsigned int depth);
typedef void (*gpulimit_standin_set_queue_depth_fn)(unsigned int depth);
#define GPULIMIT_STANDIN_SET_QUEUE_DEPTH "gpulimit_standin_set_queue_depth"

/* Nanoseconds the device (CUDA ordinal) ran kernels of process pid (0: of
 * any process) within [from_ns, to_ns) of CLOCK_MONOTONIC, from the shared
 * timeline; 0 for a bad ordinal. */
unsigned long long gpulimit_standin_busy_ns(int ordinal, int pid, unsigned long long from_ns,
                                            unsigned long long to_ns);
typedef unsigned long long (*gpulimit_standin_busy_ns_fn)(int ordinal, int pid,
                                                          unsigned long long from_ns,
                                                          unsigned long long to_ns);
#define GPULIMIT_STANDIN_BUSY_NS "gpulimit_standin_busy_ns"

/* The timeline this process's libcuda maps (for the stand-in NVML). */
void* gpulimit_standin_timeline(void);
typedef void* (*gpulimit_standin_timeline_fn)(void);
#define GPULIMIT_STANDIN_TIMELINE "gpulimit_standin_timeline"

/* The ABI name of the function at `function`, whether the export or the
 * internal pointer cuGetProcAddress gives for it; NULL for anything else. */
const char* gpulimit_standin_proc_name(const void* function);
typedef const char* (*gpulimit_standin_proc_name_fn)(const void* function);
#define GPULIMIT_STANDIN_PROC_NAME "gpulimit_standin_proc_name"

/* The stand-in NVML's own counter (libnvidia-ml.so.1), by exported name. */
unsigned long long gpulimit_standin_nvml_calls(const char* name);
typedef unsigned long long (*gpulimit_standin_nvml_calls_fn)(const char* name);
#define GPULIMIT_STANDIN_NVML_CALLS "gpulimit_standin_nvml_calls"

#ifdef __cplusplus
}
#endif

#endif
