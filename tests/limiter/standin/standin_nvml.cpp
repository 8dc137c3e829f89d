// The stand-in libnvidia-ml.so.1 (tests only): the devices of the stand-in
// libcuda.so.1 (same GPULIMIT_STANDIN_DEVICES), listed as real NVML lists
// them, in PCI bus order, which is not the CUDA ordinal order by default.
//
// Memory "used" is what the stand-in libcuda of this process has charged on
// the device (found with dlopen(RTLD_NOLOAD), so only when it is loaded):
// memory is simulated per process. The processes holding memory on a device
// (nvmlDeviceGetComputeRunningProcesses) come from the table that the
// stand-in libcuda of every process sharing GPULIMIT_STANDIN_DIR writes
// (standin_memory.hpp), and, without that directory, from this process's. Utilization (per process
// and per device) comes from the timeline of kernels that the processes sharing
// GPULIMIT_STANDIN_DIR run (standin_timeline.hpp).
//
// Every signature and type is NVIDIA's nvml.h (through gpuinit/nvml), so a
// definition that disagrees with the real ABI does not compile. Behaviour
// follows nvml.h's documentation of each call, checked against a real
// driver (580.159.04, an H100) where noted.
#include "gpuinit/nvml/nvml_h.hpp"
#include "standin_control.h"
#include "standin_devices.hpp"
#include "standin_memory.hpp"
#include "standin_timeline.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

#define STANDIN_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct NvmlDevice {
    standin::Device info;
    int cuda_ordinal = 0;
};

struct Nvml {
    std::vector<NvmlDevice> devices; // PCI bus order
};

std::mutex g_mutex;
int g_init_count = 0;
std::mutex g_calls_mutex;
std::map<std::string, unsigned long long> g_calls;

Nvml& nvml() {
    static Nvml* n = [] {
        auto* created = new Nvml;
        const auto devices = standin::load_devices("standin libnvidia-ml");
        for (size_t i = 0; i < devices.size(); ++i) {
            created->devices.push_back(NvmlDevice{devices[i], static_cast<int>(i)});
        }
        std::stable_sort(
            created->devices.begin(), created->devices.end(),
            [](const NvmlDevice& a, const NvmlDevice& b) { return a.info.pci < b.info.pci; });
        return created;
    }();
    return *n;
}

void count(const char* name) {
    std::lock_guard lock(g_calls_mutex);
    ++g_calls[name];
}

bool initialized() {
    std::lock_guard lock(g_mutex);
    return g_init_count > 0;
}

NvmlDevice* device_of(nvmlDevice_t handle) {
    auto& devices = nvml().devices;
    for (NvmlDevice& d : devices) {
        if (reinterpret_cast<nvmlDevice_t>(&d) == handle) {
            return &d;
        }
    }
    return nullptr;
}

// What the stand-in libcuda of this process has charged; 0 without one.
unsigned long long cuda_used(int ordinal) {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (cuda == nullptr) {
        return 0;
    }
    auto used = reinterpret_cast<gpulimit_standin_device_used_fn>(
        dlsym(cuda, GPULIMIT_STANDIN_DEVICE_USED));
    const unsigned long long bytes = used != nullptr ? used(ordinal) : 0;
    dlclose(cuda);
    return bytes == ~0ULL ? 0 : bytes;
}

} // namespace

#define NVML_ENTER()                                                                               \
    count(__func__);                                                                               \
    if (!initialized())                                                                            \
    return NVML_ERROR_UNINITIALIZED

STANDIN_EXPORT unsigned long long gpulimit_standin_nvml_calls(const char* name) {
    std::lock_guard lock(g_calls_mutex);
    auto it = g_calls.find(name != nullptr ? name : "");
    return it != g_calls.end() ? it->second : 0;
}

STANDIN_EXPORT nvmlReturn_t nvmlInit_v2(void) {
    count(__func__);
    std::lock_guard lock(g_mutex);
    nvml();
    ++g_init_count;
    return NVML_SUCCESS;
}

STANDIN_EXPORT nvmlReturn_t nvmlInit(void) {
    count(__func__);
    std::lock_guard lock(g_mutex);
    nvml();
    ++g_init_count;
    return NVML_SUCCESS;
}

STANDIN_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    count(__func__);
    (void)flags;
    std::lock_guard lock(g_mutex);
    nvml();
    ++g_init_count;
    return NVML_SUCCESS;
}

STANDIN_EXPORT nvmlReturn_t nvmlShutdown(void) {
    count(__func__);
    std::lock_guard lock(g_mutex);
    if (g_init_count == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    --g_init_count;
    return NVML_SUCCESS;
}

STANDIN_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_NOT_FOUND:
        return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
        return "Argument Version Mismatch";
    default:
        return "Unknown Error";
    }
}

STANDIN_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
    NVML_ENTER();
    if (version == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (length < 8) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::snprintf(version, length, "580.0.0");
    return NVML_SUCCESS;
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
    NVML_ENTER();
    if (deviceCount == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *deviceCount = static_cast<unsigned>(nvml().devices.size());
    return NVML_SUCCESS;
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount) {
    NVML_ENTER();
    if (deviceCount == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *deviceCount = static_cast<unsigned>(nvml().devices.size());
    return NVML_SUCCESS;
}

namespace {
nvmlReturn_t by_index(unsigned index, nvmlDevice_t* device) {
    if (device == nullptr || index >= nvml().devices.size()) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *device = reinterpret_cast<nvmlDevice_t>(&nvml().devices[index]);
    return NVML_SUCCESS;
}
} // namespace

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                          nvmlDevice_t* device) {
    NVML_ENTER();
    return by_index(index, device);
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
    NVML_ENTER();
    return by_index(index, device);
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
    NVML_ENTER();
    if (uuid == nullptr || device == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (NvmlDevice& d : nvml().devices) {
        if (strcasecmp(d.info.uuid.c_str(), uuid) == 0) {
            *device = reinterpret_cast<nvmlDevice_t>(&d);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId,
                                                             nvmlDevice_t* device) {
    NVML_ENTER();
    if (pciBusId == nullptr || device == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned domain = 0, bus = 0, dev = 0;
    if (std::sscanf(pciBusId, "%x:%x:%x", &domain, &bus, &dev) != 3) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (NvmlDevice& d : nvml().devices) {
        if (d.info.pci_domain == domain && d.info.pci_bus == bus && d.info.pci_device == dev) {
            *device = reinterpret_cast<nvmlDevice_t>(&d);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
    NVML_ENTER();
    NvmlDevice* d = device_of(device);
    if (d == nullptr || index == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *index = static_cast<unsigned>(d - nvml().devices.data());
    return NVML_SUCCESS;
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                              unsigned int length) {
    NVML_ENTER();
    NvmlDevice* d = device_of(device);
    if (d == nullptr || uuid == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (length < d->info.uuid.size() + 1) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::memcpy(uuid, d->info.uuid.c_str(), d->info.uuid.size() + 1);
    return NVML_SUCCESS;
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                              unsigned int length) {
    NVML_ENTER();
    NvmlDevice* d = device_of(device);
    if (d == nullptr || name == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    const int n = std::snprintf(name, length, "gpulimit stand-in GPU %d", d->cuda_ordinal);
    return n >= 0 && static_cast<unsigned>(n) < length ? NVML_SUCCESS
                                                       : NVML_ERROR_INSUFFICIENT_SIZE;
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
    NVML_ENTER();
    NvmlDevice* d = device_of(device);
    if (d == nullptr || memory == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    const unsigned long long used =
        std::min<unsigned long long>(cuda_used(d->cuda_ordinal), d->info.total);
    memory->total = d->info.total;
    memory->used = used;
    memory->free = d->info.total - used;
    return NVML_SUCCESS;
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                       nvmlMemory_v2_t* memory) {
    NVML_ENTER();
    NvmlDevice* d = device_of(device);
    if (d == nullptr || memory == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (memory->version != nvmlMemory_v2) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    const unsigned long long used =
        std::min<unsigned long long>(cuda_used(d->cuda_ordinal), d->info.total);
    memory->total = d->info.total;
    memory->reserved = 0;
    memory->used = used;
    memory->free = d->info.total - used;
    return NVML_SUCCESS;
}

namespace {
nvmlReturn_t pci_info(nvmlDevice_t device, nvmlPciInfo_t* pci) {
    NvmlDevice* d = device_of(device);
    if (d == nullptr || pci == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    std::memset(pci, 0, sizeof *pci);
    std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", d->info.pci_domain,
                  d->info.pci_bus, d->info.pci_device);
    std::snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", d->info.pci_domain,
                  d->info.pci_bus, d->info.pci_device);
    pci->domain = d->info.pci_domain;
    pci->bus = d->info.pci_bus;
    pci->device = d->info.pci_device;
    pci->pciDeviceId = 0x233010DE; // an H100's device/vendor id
    return NVML_SUCCESS;
}
} // namespace

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
    NVML_ENTER();
    return pci_info(device, pci);
}

// ---- Utilization, from the stand-in GPUs' timeline (standin_timeline.hpp) ---------
//
// Samples are the timeline cut into windows of 1/6 s (CLOCK_MONOTONIC, aligned
// to multiples of the window); a window is reported once it has ended, with
// the CPU time (CLOCK_REALTIME, µs) of its end as its timestamp, as NVML
// stamps its samples. A process has a sample in a window when it kept the
// device busy then; smUtil is its busy share of the window in percent. The
// last kHistoryWindows windows are kept.

namespace {

const standin::timeline::File* timeline() {
    // The same process's libcuda has it mapped (a private timeline is only
    // reachable that way); else the shared file, when there is one.
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (cuda != nullptr) {
        auto get =
            reinterpret_cast<gpulimit_standin_timeline_fn>(dlsym(cuda, GPULIMIT_STANDIN_TIMELINE));
        void* base = get != nullptr ? get() : nullptr;
        dlclose(cuda);
        if (base != nullptr) {
            return static_cast<const standin::timeline::File*>(base);
        }
    }
    static const standin::timeline::File* shared = [] {
        const char* dir = std::getenv("GPULIMIT_STANDIN_DIR");
        return dir != nullptr && *dir != '\0'
                   ? standin::timeline::map_timeline("standin libnvidia-ml").file
                   : nullptr;
    }();
    return shared;
}

// CLOCK_REALTIME µs of a CLOCK_MONOTONIC ns instant, with one offset for the
// life of the process, so a window keeps its timestamp from call to call.
unsigned long long realtime_us(uint64_t monotonic_ns) {
    static const int64_t offset_ns = [] {
        timespec rt{};
        clock_gettime(CLOCK_REALTIME, &rt);
        const uint64_t mono = standin::timeline::now_ns();
        return static_cast<int64_t>(rt.tv_sec) * 1'000'000'000LL + rt.tv_nsec -
               static_cast<int64_t>(mono);
    }();
    return static_cast<unsigned long long>(static_cast<int64_t>(monotonic_ns) + offset_ns) / 1000;
}

struct WindowSample {
    uint32_t pid;
    uint64_t window_end;
    uint64_t busy;
};

// Busy ns per process and ended window, oldest window first.
std::vector<WindowSample> process_samples(int ordinal) {
    std::vector<WindowSample> out;
    const standin::timeline::File* file = timeline();
    if (file == nullptr || ordinal < 0 ||
        static_cast<uint32_t>(ordinal) >= standin::timeline::kMaxDevices) {
        return out;
    }
    using standin::timeline::kWindowNs;
    const uint64_t now = standin::timeline::now_ns();
    const uint64_t last_end = now / kWindowNs * kWindowNs;
    const uint64_t windows =
        std::min<uint64_t>(standin::timeline::kHistoryWindows, last_end / kWindowNs);
    const uint64_t first_start = last_end - windows * kWindowNs;
    std::map<std::pair<uint64_t, uint32_t>, uint64_t> busy; // (window end, pid)
    standin::timeline::for_each_interval(file->devices[ordinal], first_start, last_end,
                                         [&](uint32_t pid, uint64_t start, uint64_t end) {
                                             start = std::max(start, first_start);
                                             end = std::min(end, last_end);
                                             while (start < end) {
                                                 const uint64_t window_end =
                                                     (start / kWindowNs + 1) * kWindowNs;
                                                 const uint64_t piece_end =
                                                     std::min(end, window_end);
                                                 busy[{window_end, pid}] += piece_end - start;
                                                 start = piece_end;
                                             }
                                         });
    for (const auto& [key, ns] : busy) {
        out.push_back(WindowSample{key.second, key.first, ns});
    }
    return out;
}

unsigned percent(uint64_t busy_ns) {
    return static_cast<unsigned>(std::min<uint64_t>(
        100, (busy_ns * 100 + standin::timeline::kWindowNs / 2) / standin::timeline::kWindowNs));
}

} // namespace

// NVML's contract: with utilization NULL, *processSamplesCount says how many
// samples there are (NVML_ERROR_INSUFFICIENT_SIZE); with a buffer too small
// for them, the same; NVML_ERROR_NOT_FOUND when there is none newer than
// lastSeenTimeStamp (0: every sample kept).
STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
    unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp) {
    NVML_ENTER();
    NvmlDevice* d = device_of(device);
    if (d == nullptr || processSamplesCount == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    std::vector<nvmlProcessUtilizationSample_t> samples;
    for (const WindowSample& w : process_samples(d->cuda_ordinal)) {
        const unsigned long long stamp = realtime_us(w.window_end);
        if (stamp > lastSeenTimeStamp && w.busy > 0) {
            samples.push_back(
                nvmlProcessUtilizationSample_t{w.pid, stamp, percent(w.busy), 0, 0, 0});
        }
    }
    if (samples.empty()) {
        *processSamplesCount = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    if (utilization == nullptr || *processSamplesCount < samples.size()) {
        *processSamplesCount = static_cast<unsigned>(samples.size());
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::copy(samples.begin(), samples.end(), utilization);
    *processSamplesCount = static_cast<unsigned>(samples.size());
    return NVML_SUCCESS;
}

// The device's busy share in the last window that ended.
STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                          nvmlUtilization_t* utilization) {
    NVML_ENTER();
    NvmlDevice* d = device_of(device);
    if (d == nullptr || utilization == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    using standin::timeline::kWindowNs;
    const uint64_t last_end = standin::timeline::now_ns() / kWindowNs * kWindowNs;
    const standin::timeline::File* file = timeline();
    uint64_t busy = 0;
    if (file != nullptr && last_end >= kWindowNs &&
        static_cast<uint32_t>(d->cuda_ordinal) < standin::timeline::kMaxDevices) {
        busy = standin::timeline::busy_ns(file->devices[d->cuda_ordinal], 0, last_end - kWindowNs,
                                          last_end);
    }
    utilization->gpu = percent(busy);
    utilization->memory = 0;
    return NVML_SUCCESS;
}

// GPULIMIT_STANDIN_NVML_SAMPLE_GLITCH=1: every 12th window (2 s) the device
// samples have the real driver's glitch (below; seen by the acceptance run's
// 50 ms poller and the compute driver's trace, tests/gpu). Read once.
constexpr unsigned long long kGlitchStampUs = 18'446'744'073'709'000'000ULL;
bool glitch_window(uint64_t window_end_ns) {
    static const bool on = [] {
        const char* value = std::getenv("GPULIMIT_STANDIN_NVML_SAMPLE_GLITCH");
        return value != nullptr && std::strcmp(value, "1") == 0;
    }();
    return on && (window_end_ns / standin::timeline::kWindowNs) % 12 == 0;
}

// NVML_GPU_UTILIZATION_SAMPLES only: one sample per ended window, busy or
// idle (unlike the per-process samples), the device's busy percent as an
// unsigned int (NVML_VALUE_TYPE_UNSIGNED_INT). Other sampling types: not
// supported. With samples NULL, *sampleCount says how many there are.
STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                                 unsigned long long lastSeenTimeStamp,
                                                 nvmlValueType_t* sampleValType,
                                                 unsigned int* sampleCount, nvmlSample_t* samples) {
    NVML_ENTER();
    NvmlDevice* d = device_of(device);
    if (d == nullptr || sampleValType == nullptr || sampleCount == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (type != NVML_GPU_UTILIZATION_SAMPLES) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    using standin::timeline::kWindowNs;
    const uint64_t last_end = standin::timeline::now_ns() / kWindowNs * kWindowNs;
    const uint64_t windows =
        std::min<uint64_t>(standin::timeline::kHistoryWindows, last_end / kWindowNs);
    const standin::timeline::File* file = timeline();
    std::vector<nvmlSample_t> found;
    for (uint64_t end = last_end - windows * kWindowNs + kWindowNs; end <= last_end && windows > 0;
         end += kWindowNs) {
        const unsigned long long stamp = realtime_us(end);
        if (stamp <= lastSeenTimeStamp) {
            continue;
        }
        uint64_t busy = 0;
        if (file != nullptr &&
            static_cast<uint32_t>(d->cuda_ordinal) < standin::timeline::kMaxDevices) {
            busy =
                standin::timeline::busy_ns(file->devices[d->cuda_ordinal], 0, end - kWindowNs, end);
        }
        nvmlSample_t sample{};
        sample.timeStamp = stamp;
        sample.sampleValue.uiVal = percent(busy);
        found.push_back(sample);
        if (glitch_window(end)) {
            // As 580.159.04 did once in a few seconds on an H100: the
            // window again a fraction of a millisecond later, and an entry
            // stamped about 2^64 us with value 0.
            sample.timeStamp = stamp + 272;
            found.push_back(sample);
            nvmlSample_t bogus{};
            bogus.timeStamp = kGlitchStampUs;
            found.push_back(bogus);
        }
    }
    *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (found.empty()) {
        *sampleCount = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    if (samples == nullptr) {
        *sampleCount = static_cast<unsigned>(found.size());
        return NVML_SUCCESS;
    }
    if (*sampleCount < found.size()) {
        *sampleCount = static_cast<unsigned>(found.size());
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::copy(found.begin(), found.end(), samples);
    *sampleCount = static_cast<unsigned>(found.size());
    return NVML_SUCCESS;
}

// ---- Processes and their memory (standin_memory.hpp) ------------------------
//
// nvmlDeviceGetComputeRunningProcesses (nvmlProcessInfo_v1_t, 16 bytes), _v2
// and _v3 (nvmlProcessInfo_v2_t / nvmlProcessInfo_t, 24 bytes), and
// nvmlDeviceGetRunningProcessDetailList (nvmlProcessDetail_v1_t, 32 bytes),
// as 580.159.04 wrote them on an H100 (a sentinel-filled buffer, two
// processes: 16, 24, 24 and 32 bytes per entry; the instance ids 0xFFFFFFFF
// outside MIG; count 0 with a NULL buffer answers INSUFFICIENT_SIZE and the
// count when there are processes, SUCCESS when there are none). Real drivers
// differ, so the layout _v3 writes is the test's to choose:
//   GPULIMIT_STANDIN_NVML_V3_STRIDE=16|24|32 (default 24): the entry size
//       _v3 writes; 32 is R535 (535.54.03 and later 535s: nvmlProcessInfo_t
//       with usedGpuCcProtectedMemory appended, no version bump; the public
//       trail is pynvml PR 48, go-nvml issue 75, nvitop PRs 79 and 226);
//   GPULIMIT_STANDIN_NVML_DETAIL_LIST=0: nvmlDeviceGetRunningProcessDetailList
//       answers NVML_ERROR_FUNCTION_NOT_FOUND (as an older NVML that does
//       not have it);
//   GPULIMIT_STANDIN_NVML_FUTURE_LAYOUT=1: every process list writes 40-byte
//       entries, a layout no NVML has had, so nothing the reader knows fits.

namespace {

struct HeldMemory {
    unsigned pid;
    unsigned long long bytes;
};

// Live processes holding memory on the device (CUDA ordinal), by slot order.
std::vector<HeldMemory> held_memory(int ordinal) {
    namespace mem = standin::memory;
    std::vector<HeldMemory> out;
    if (ordinal < 0 || static_cast<uint32_t>(ordinal) >= mem::kMaxDevices) {
        return out;
    }
    static const mem::Table table = mem::open_table("standin libnvidia-ml");
    if (table.file == nullptr) {
        // No shared table: only this process's own memory is known.
        const unsigned long long own = cuda_used(ordinal);
        if (own > 0) {
            out.push_back(HeldMemory{static_cast<unsigned>(getpid()), own});
        }
        return out;
    }
    // A description of this call's own: the OFD probe sees every other
    // description's lock, this process's libcuda's included.
    const int fd = open(table.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        return out;
    }
    for (uint32_t s = 0; s < mem::kSlots; ++s) {
        const mem::Slot& slot = table.file->slots[s];
        const uint32_t pid = slot.pid.load(std::memory_order_acquire);
        if (pid == 0 || !mem::slot_held(fd, s)) {
            continue;
        }
        const uint64_t bytes = slot.used[ordinal].load(std::memory_order_relaxed);
        if (bytes > 0 && slot.pid.load(std::memory_order_acquire) == pid) {
            out.push_back(HeldMemory{pid, bytes});
        }
    }
    close(fd);
    return out;
}

unsigned env_unsigned(const char* name, unsigned fallback) {
    const char* text = std::getenv(name);
    return text != nullptr && *text != '\0' ? static_cast<unsigned>(std::strtoul(text, nullptr, 10))
                                            : fallback;
}

constexpr unsigned kFutureStride = 40;

// The entry size a list call writes: its declared one, unless the test chose
// another (above).
unsigned stride_of(unsigned declared, bool is_v3) {
    if (env_unsigned("GPULIMIT_STANDIN_NVML_FUTURE_LAYOUT", 0) != 0) {
        return kFutureStride;
    }
    if (is_v3) {
        const unsigned chosen = env_unsigned("GPULIMIT_STANDIN_NVML_V3_STRIDE", declared);
        return chosen == 16 || chosen == 24 || chosen == 32 ? chosen : declared;
    }
    return declared;
}

// NVML's contract: *infoCount in, the buffer's room in entries; out, how
// many there are. NVML_ERROR_INSUFFICIENT_SIZE (with the count) when they do
// not fit. Each entry is written field by field at `stride` bytes, as a
// driver writes its own layout whatever the caller declared.
nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int* infoCount, void* infos,
                               unsigned stride) {
    NvmlDevice* d = device_of(device);
    if (d == nullptr || infoCount == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    const std::vector<HeldMemory> held = held_memory(d->cuda_ordinal);
    if (*infoCount < held.size()) {
        *infoCount = static_cast<unsigned>(held.size());
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (infos == nullptr && !held.empty()) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    auto* out = static_cast<unsigned char*>(infos);
    for (size_t i = 0; i < held.size(); ++i) {
        unsigned char* entry = out + i * stride;
        const unsigned pid = held[i].pid;
        const unsigned long long bytes = held[i].bytes;
        const unsigned no_instance = 0xFFFFFFFFU;
        const unsigned long long protected_bytes = 0;
        std::memcpy(entry, &pid, sizeof pid);
        std::memcpy(entry + 8, &bytes, sizeof bytes);
        if (stride >= 24) {
            std::memcpy(entry + 16, &no_instance, sizeof no_instance);
            std::memcpy(entry + 20, &no_instance, sizeof no_instance);
        }
        if (stride >= 32) {
            std::memcpy(entry + 24, &protected_bytes, sizeof protected_bytes);
        }
        if (stride > 32) {
            std::memset(entry + 32, 0, stride - 32);
        }
    }
    *infoCount = static_cast<unsigned>(held.size());
    return NVML_SUCCESS;
}

} // namespace

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                 unsigned int* infoCount,
                                                                 nvmlProcessInfo_v1_t* infos) {
    NVML_ENTER();
    return running_processes(device, infoCount, infos,
                             stride_of(sizeof(nvmlProcessInfo_v1_t), false));
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                    unsigned int* infoCount,
                                                                    nvmlProcessInfo_v2_t* infos) {
    NVML_ENTER();
    return running_processes(device, infoCount, infos,
                             stride_of(sizeof(nvmlProcessInfo_v2_t), false));
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                    unsigned int* infoCount,
                                                                    nvmlProcessInfo_t* infos) {
    NVML_ENTER();
    return running_processes(device, infoCount, infos, stride_of(sizeof(nvmlProcessInfo_t), true));
}

// nvml.h (go-nvml's copy, NVML API 13): the version word must be
// nvmlProcessDetailList_v1 and the mode a nvmlProcessMode_t (3 is "all");
// only compute processes are simulated, so graphics and MPS list none.
STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                                  nvmlProcessDetailList_t* plist) {
    NVML_ENTER();
    if (env_unsigned("GPULIMIT_STANDIN_NVML_DETAIL_LIST", 1) == 0) {
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    }
    if (plist == nullptr || device_of(device) == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (plist->version != nvmlProcessDetailList_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    constexpr unsigned kModeAll = 3;
    if (plist->mode > kModeAll) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (plist->mode == NVML_PROCESS_MODE_GRAPHICS || plist->mode == NVML_PROCESS_MODE_MPS) {
        plist->numProcArrayEntries = 0;
        return NVML_SUCCESS;
    }
    return running_processes(device, &plist->numProcArrayEntries, plist->procArray,
                             stride_of(sizeof(nvmlProcessDetail_v1_t), false));
}
