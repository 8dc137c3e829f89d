// The in-process compute driver (see compute_driver.hpp).
//
// One thread per process, started on the process's first launch with a
// compute cap (never at load time, and again in a fork child, whose copy of
// the parent has no threads). Every control period it:
//   - leaves every device to the host daemon while the daemon holds its lock
//     byte of the state file, or a device's record shows the daemon driving
//     with a fresh heartbeat;
//   - else tries each capped device's controller lock byte (an OFD lock: the
//     kernel lets go when the holder dies, and the next process takes over
//     within a period); for the devices it holds it measures and steps.
//
// What is measured: NVML's per-process utilization samples
// (nvmlDeviceGetProcessUtilization). A sample {pid, timeStamp, smUtil} says
// that during the sample period ending at timeStamp (microseconds, CPU
// clock) a kernel of `pid` was running smUtil percent of the time: time, not
// how many SMs it used. The group's busy time is the sum over its processes'
// samples of smUtil% x the sample window, which limit::SampleClock learns
// from the samples (not the time since a process's previous sample: an idle
// process has no sample for a window).
// The group's processes are the live slots of the state file, by the pid the
// host daemon learned (host_pid) or else their own. NVML reports host pids:
// in a container with its own pid namespace none of them matches, and the
// driver falls back to the device-wide utilization (nvmlDeviceGetUtilization
// Rates), which also counts other tenants' kernels and so over-throttles a
// shared GPU; it says so once. The host daemon measures by host pid.
#include "compute_driver.hpp"

#include "proc_trace.hpp"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <pthread.h>
#include <unistd.h>

namespace gpulimit {
namespace {

constexpr uint64_t kPollNs = 2 * limit::kControlPeriodNs; // NVML at most every other step
constexpr int kMaxSamples = 256;
constexpr uint64_t kForeignOnlyNs = 1'000'000'000;
constexpr size_t kDriverStack = size_t{1} << 20;

std::atomic<bool> g_started{false};
std::atomic<bool> g_said_no_daemon{false};
std::atomic<bool> g_said_device_wide{false};
std::atomic<bool> g_said_no_nvml{false};

void say_once(std::atomic<bool>& said, const char* line) {
    if (said.exchange(true, std::memory_order_relaxed)) {
        return;
    }
    size_t length = 0;
    while (line[length] != '\0') {
        ++length;
    }
    (void)!write(STDERR_FILENO, line, length);
}

void sleep_until(uint64_t deadline_ns) {
    const uint64_t now = limit::monotonic_ns();
    if (deadline_ns <= now) {
        return;
    }
    const uint64_t left = deadline_ns - now;
    timespec pause{static_cast<time_t>(left / 1'000'000'000u),
                   static_cast<long>(left % 1'000'000'000u)};
    nanosleep(&pause, nullptr);
}

// CLOCK_REALTIME in microseconds: NVML's sample timestamps.
unsigned long long realtime_us() {
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    return static_cast<unsigned long long>(now.tv_sec) * 1'000'000u +
           static_cast<unsigned long long>(now.tv_nsec) / 1000u;
}

// The group's live processes as NVML would name them (host pids where known).
struct GroupPids {
    int count = 0;
    unsigned int pids[limit::kMaxSlots];

    void load(const limit::GroupState& state) {
        count = 0;
        for (int slot = 0; slot < limit::kMaxSlots; ++slot) {
            int32_t pid = 0;
            int32_t host_pid = 0;
            if (state.slot_pids(slot, pid, host_pid)) {
                const int32_t known = host_pid > 0 ? host_pid : pid;
                if (known > 0) {
                    pids[count++] = static_cast<unsigned int>(known);
                }
            }
        }
    }
    bool has(unsigned int pid) const {
        for (int i = 0; i < count; ++i) {
            if (pids[i] == pid) {
                return true;
            }
        }
        return false;
    }
};

bool open_nvml(ComputeSampler& sampler, const DeviceInfo& device) {
    if (sampler.nvml_tried) {
        return sampler.nvml != nullptr;
    }
    sampler.nvml_tried = true;
    const RealNvml& nvml = real_nvml();
    if (nvml.nvmlInit_v2 == nullptr || nvml.nvmlInit_v2() != NVML_SUCCESS ||
        nvml.nvmlDeviceGetHandleByUUID == nullptr ||
        nvml.nvmlDeviceGetHandleByUUID(device.uuid, &sampler.nvml) != NVML_SUCCESS ||
        nvml.nvmlDeviceGetProcessUtilization == nullptr) {
        sampler.nvml = nullptr;
        say_once(g_said_no_nvml,
                 "gpulimit: cannot measure GPU utilization through NVML (libnvidia-ml.so.1); "
                 "GPU_UTIL_PER_DEVICE is not enforced by this process; run the host daemon "
                 "(gpu-limit daemon) or provide NVML\n");
        return false;
    }
    return true;
}

// The device's own utilization samples, one per window: they give the
// sample window exactly (limit::SampleClock). Optional: without them the
// clock learns the window from the processes' samples.
void learn_window(ComputeSampler& sampler) {
    const RealNvml& nvml = real_nvml();
    if (nvml.nvmlDeviceGetSamples == nullptr) {
        return;
    }
    nvmlSample_t samples[kMaxSamples];
    unsigned int count = kMaxSamples;
    nvmlValueType_t value_type = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (nvml.nvmlDeviceGetSamples(sampler.nvml, NVML_GPU_UTILIZATION_SAMPLES,
                                  sampler.device_seen_us, &value_type, &count,
                                  samples) != NVML_SUCCESS) {
        return; // NOT_FOUND (none new), NOT_SUPPORTED, or an error
    }
    const uint64_t now_us = realtime_us();
    for (unsigned int i = 0; i < count && i < static_cast<unsigned int>(kMaxSamples); ++i) {
        if (!limit::plausible_sample_time(samples[i].timeStamp, now_us)) {
            continue;
        }
        sampler.clock.device_sample(samples[i].timeStamp);
        if (samples[i].timeStamp > sampler.device_seen_us) {
            sampler.device_seen_us = samples[i].timeStamp;
        }
    }
}

// The group's busy time on the device measured since the previous poll.
uint64_t measure(ComputeSampler& sampler, const DeviceInfo& device, const GroupPids& group,
                 uint64_t now_ns) {
    if (sampler.last_poll_ns != 0 && now_ns - sampler.last_poll_ns < kPollNs) {
        return 0;
    }
    const uint64_t since_poll = sampler.last_poll_ns != 0 ? now_ns - sampler.last_poll_ns : 0;
    sampler.last_poll_ns = now_ns;
    sampler.poll = {};
    if (!open_nvml(sampler, device)) {
        return 0;
    }
    const RealNvml& nvml = real_nvml();
    learn_window(sampler);
    nvmlProcessUtilizationSample_t samples[kMaxSamples];
    unsigned int count = kMaxSamples;
    const nvmlReturn_t result =
        nvml.nvmlDeviceGetProcessUtilization(sampler.nvml, samples, &count, sampler.last_seen_us);
    sampler.poll.nvml_ns = limit::monotonic_ns() - now_ns;
    sampler.poll.code = result;
    sampler.poll.samples = result == NVML_SUCCESS ? count : 0;
    if (result == NVML_ERROR_NOT_FOUND) {
        return 0; // no sample since the last one seen
    }
    bool any = false;
    bool matched = false;
    uint64_t busy_ns = 0;
    if (result == NVML_SUCCESS) {
        const uint64_t now_us = realtime_us();
        for (unsigned int i = 0; i < count && i < static_cast<unsigned int>(kMaxSamples); ++i) {
            const nvmlProcessUtilizationSample_t& sample = samples[i];
            if (!limit::plausible_sample_time(sample.timeStamp, now_us)) {
                continue;
            }
            if (sample.timeStamp > sampler.last_seen_us) {
                sampler.last_seen_us = sample.timeStamp;
            }
            any = true;
            // Every process's samples go through the clock (they teach it
            // the window); only the group's count.
            const uint64_t busy =
                sampler.clock.busy_ns(sample.pid, sample.timeStamp, sample.smUtil);
            if (group.has(sample.pid)) {
                matched = true;
                busy_ns += busy;
                ++sampler.poll.matched;
            }
        }
    }
    if (matched) {
        sampler.ever_matched = true;
        sampler.poll.busy_ns = busy_ns;
        return busy_ns;
    }
    // Samples for a second and never one of ours (another pid namespace: our
    // processes launch, the driver runs because they do, and NVML samples
    // every 1/6 s), or more processes than fit: the whole device's
    // utilization stands in. The second keeps another tenant's samples seen
    // before ours from switching it on.
    const bool foreign_only =
        any && !sampler.ever_matched && now_ns - sampler.started_ns > kForeignOnlyNs;
    const bool fallback = foreign_only || result == NVML_ERROR_INSUFFICIENT_SIZE;
    nvmlUtilization_t rates{};
    if (fallback && nvml.nvmlDeviceGetUtilizationRates != nullptr &&
        nvml.nvmlDeviceGetUtilizationRates(sampler.nvml, &rates) == NVML_SUCCESS) {
        say_once(g_said_device_wide,
                 "gpulimit: NVML's per-process samples show none of this group's processes "
                 "(another pid namespace?); measuring the whole GPU's utilization instead, "
                 "which also counts other users of the GPU; run the host daemon (gpu-limit "
                 "daemon) for per-process measurement\n");
        const unsigned int percent = rates.gpu > 100 ? 100 : rates.gpu;
        sampler.poll.device_wide = true;
        sampler.poll.busy_ns = since_poll * percent / 100u;
        return sampler.poll.busy_ns;
    }
    return 0;
}

struct DeviceDriver {
    bool held = false;
    limit::ShareController controller;
    ComputeSampler sampler;
};

// GPU_LIMIT_TRACE_COMPUTE (gpulimit(7)): one line per NVML poll of a device
// this process drives, for checking the controller on a real driver.
constinit std::atomic<int> g_compute_trace{kTraceUnread};

void trace_poll(int device, const DeviceDriver& driver, uint64_t now_ns, bool open) {
    const int fd = trace_file(g_compute_trace, "GPU_LIMIT_TRACE_COMPUTE");
    if (fd < 0) {
        return;
    }
    const ComputeSampler::Poll& poll = driver.sampler.poll;
    char line[320];
    const int length = std::snprintf(
        line, sizeof(line),
        "gpulimit: pid %d compute t=%llu ms device %d: nvml %llu us, code %d, %u samples, %u "
        "ours%s, busy %llu us, window %llu us, balance %lld us, share %llu ppm, gate %s",
        static_cast<int>(getpid()),
        static_cast<unsigned long long>((now_ns - driver.sampler.started_ns) / 1'000'000), device,
        static_cast<unsigned long long>(poll.nvml_ns / 1000), poll.code, poll.samples, poll.matched,
        poll.device_wide ? " (device-wide)" : "",
        static_cast<unsigned long long>(poll.busy_ns / 1000),
        static_cast<unsigned long long>(driver.sampler.clock.window_us()),
        static_cast<long long>(driver.controller.balance_ns() / 1000),
        static_cast<unsigned long long>(driver.controller.share_ppm()), open ? "open" : "closed");
    write_trace_line(fd, line, length, sizeof(line));
}

void* driver_main(void* argument) {
    Runtime& runtime = *static_cast<Runtime*>(argument);
    // On this thread's stack (no globals with constructors in the library).
    DeviceDriver drivers[limit::kMaxGroupDevices];
    GroupPids group;
    uint64_t next = limit::monotonic_ns();
    for (;;) {
        next += limit::kControlPeriodNs;
        sleep_until(next);
        const uint64_t now = limit::monotonic_ns();
        if (now > next + 4 * limit::kControlPeriodNs) {
            next = now; // stopped or starved: do not catch up in a burst
        }
        const bool daemon = runtime.state.daemon_lock_held();
        bool loaded = false;
        for (int i = 0; i < runtime.device_count; ++i) {
            DeviceInfo& device = runtime.devices[i];
            limit::ComputeRecord* record = device.compute;
            if (record == nullptr) {
                continue;
            }
            DeviceDriver& driver = drivers[i];
            const bool daemon_drives =
                daemon || (record->driver.load(std::memory_order_relaxed) == 2 &&
                           limit::heartbeat_fresh(*record, now));
            if (daemon_drives) {
                if (driver.held) {
                    runtime.state.release_controller_lock(device.group_index);
                    driver.held = false;
                }
                continue;
            }
            if (!driver.held) {
                driver.held = runtime.state.try_controller_lock(device.group_index);
                if (!driver.held) {
                    continue; // another process of the group drives it
                }
                driver.controller.reset(device.compute_percent, now);
                // A takeover (the previous driver exited): NVML still holds
                // the samples that driver charged, seconds of them; read
                // from the start they came back as a second of debt and
                // held every launch of the group for two. The balance the
                // previous driver published carries on instead, and only
                // samples from now on are measured.
                if (limit::heartbeat_fresh(*record, now)) {
                    driver.controller.resume(record->tokens_ns.load(std::memory_order_relaxed));
                }
                driver.sampler.last_seen_us = realtime_us();
                driver.sampler.device_seen_us = driver.sampler.last_seen_us;
                driver.sampler.last_poll_ns = 0;
                driver.sampler.started_ns = now;
                if (runtime.settings.use_host_daemon) {
                    say_once(g_said_no_daemon,
                             "gpulimit: no host daemon; measuring compute in-process\n");
                }
            }
            if (!loaded) {
                group.load(runtime.state);
                loaded = true;
            }
            const uint64_t busy = measure(driver.sampler, device, group, now);
            const bool open = limit::drive_step(*record, driver.controller, now, busy, 1);
            if (driver.sampler.last_poll_ns == now) {
                trace_poll(i, driver, now, open);
            }
        }
    }
    return nullptr;
}

} // namespace

void ensure_compute_driver(Runtime& runtime) {
    if (g_started.load(std::memory_order_relaxed) ||
        g_started.exchange(true, std::memory_order_acq_rel)) {
        return;
    }
    // The program's signals are not ours to take: the thread blocks them all.
    sigset_t all;
    sigset_t previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setstacksize(&attributes, kDriverStack);
    pthread_t thread;
    const int error = pthread_create(&thread, &attributes, driver_main, &runtime);
    pthread_attr_destroy(&attributes);
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    if (error != 0) {
        // Not retried on every launch: the gate stays as the other
        // processes of the group (or the daemon) drive it.
        say_once(g_said_no_nvml,
                 "gpulimit: cannot start the compute driver thread; GPU_UTIL_PER_DEVICE is "
                 "measured only by the group's other processes or the host daemon\n");
        return;
    }
    pthread_detach(thread);
    pthread_setname_np(thread, "gpulimit-drive");
}

void compute_driver_after_fork() {
    g_started.store(false, std::memory_order_relaxed);
}

} // namespace gpulimit
