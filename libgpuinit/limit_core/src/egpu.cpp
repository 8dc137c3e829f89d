// The eGPU variables are read inside foreign processes from an environment the
// container's owner controls: every value is hostile input, and a value this
// code cannot read exactly makes the library fail closed instead of guessing.
// Freestanding: no heap, no exceptions, only libc (snprintf) and headers.
#include "gpuinit/limit/egpu.hpp"

#include <cstdio>
#include <cstring>

namespace gpuinit::limit {
namespace {

// A value as it goes into a message: quoted, control bytes and non-ASCII as
// '?', cut to a length that keeps the message to one readable line.
struct Shown {
    char text[80];
};

// The first `length` bytes of value (a list entry), or all of it.
Shown show(const char* value, size_t length = SIZE_MAX) {
    Shown shown{};
    constexpr size_t kKept = 48;
    size_t out = 0;
    shown.text[out++] = '"';
    size_t i = 0;
    for (; i < length && value[i] != '\0' && i < kKept; ++i) {
        auto byte = static_cast<unsigned char>(value[i]);
        shown.text[out++] = (byte >= 0x20 && byte < 0x7f) ? static_cast<char>(byte) : '?';
    }
    shown.text[out++] = '"';
    if (i < length && value[i] != '\0') {
        std::memcpy(shown.text + out, " (cut)", 7);
    } else {
        shown.text[out] = '\0';
    }
    return shown;
}

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_hex_digit(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
char lower(char c) {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

// Digits only: no sign, no space, no 0x, no empty string; false on overflow
// of `limit`.
bool parse_decimal(const char* text, size_t length, uint64_t limit, uint64_t& value) {
    if (length == 0) {
        return false;
    }
    uint64_t result = 0;
    for (size_t i = 0; i < length; ++i) {
        if (!is_digit(text[i])) {
            return false;
        }
        auto digit = static_cast<uint64_t>(text[i] - '0');
        if (result > (limit - digit) / 10) {
            return false;
        }
        result = result * 10 + digit;
    }
    value = result;
    return true;
}

bool parse_decimal(const char* text, uint64_t limit, uint64_t& value) {
    return parse_decimal(text, std::strlen(text), limit, value);
}

constexpr uint64_t kUint64Max = ~uint64_t{0};

// A positive decimal integer that fits 64 bits, or a message saying so.
bool read_positive(const char* name, const char* value, const char* unit, const char* example,
                   uint64_t& out, Problem& problem) {
    if (!parse_decimal(value, kUint64Max, out) || out == 0) {
        return fail(problem, 0,
                    "%s=%s is not a positive decimal number of %s below 2^64; set it to digits "
                    "only (no sign, spaces, suffix or 0x), such as %s=%s, or unset it",
                    name, show(value).text, unit, name, example);
    }
    return true;
}

// 8-4-4-4-12 hex digits after "GPU-" (already checked).
bool is_gpu_uuid_body(const char* body, size_t length) {
    static constexpr size_t kGroups[] = {8, 4, 4, 4, 12};
    size_t at = 0;
    for (size_t group = 0; group < 5; ++group) {
        if (group > 0) {
            if (at >= length || body[at] != '-') {
                return false;
            }
            ++at;
        }
        for (size_t i = 0; i < kGroups[group]; ++i, ++at) {
            if (at >= length || !is_hex_digit(body[at])) {
                return false;
            }
        }
    }
    return at == length;
}

bool starts_with_nocase(const char* text, size_t length, const char* prefix) {
    size_t prefix_length = std::strlen(prefix);
    if (length < prefix_length) {
        return false;
    }
    for (size_t i = 0; i < prefix_length; ++i) {
        if (lower(text[i]) != lower(prefix[i])) {
            return false;
        }
    }
    return true;
}

constexpr const char* kVisibleFix =
    "list GPU indices (the host's numbering, as nvidia-smi shows it) and GPU UUIDs "
    "(GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) separated by commas without spaces, or all, "
    "none, void";
constexpr const char* kHostDevicesFix =
    "gpu-limit's hook and runtime write GPU UUIDs and PCI addresses (0000:3b:00.0) separated by "
    "commas, or all or none; unset it and let them set it";

int hex_value(char c) {
    if (is_digit(c)) {
        return c - '0';
    }
    c = lower(c);
    return (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
}

// Up to `most` hex digits from text[at], ending at `stop` (or the end).
bool hex_field(const char* text, size_t length, size_t& at, size_t most, char stop,
               uint32_t& value) {
    size_t digits = 0;
    uint32_t result = 0;
    while (at < length && text[at] != stop) {
        int digit = hex_value(text[at]);
        if (digit < 0 || digits == most) {
            return false;
        }
        result = result * 16 + static_cast<uint32_t>(digit);
        ++digits;
        ++at;
    }
    if (digits == 0) {
        return false;
    }
    value = result;
    return true;
}

// One entry of NVIDIA_VISIBLE_DEVICES (`host` false: indices and UUIDs) or
// GPU_LIMIT_DEVICES (`host` true: UUIDs and PCI addresses).
bool parse_entry(const char* name, const char* all, const char* entry, size_t length, bool host,
                 ListedDevice& device, Problem& problem) {
    const char* fix = host ? kHostDevicesFix : kVisibleFix;
    // MIG instances (MIG-<uuid>, MIG-GPU-<uuid>/gi/ci, or GPU:instance) are
    // memory-isolated by the hardware already: a cap on them is meaningless.
    bool mig = starts_with_nocase(entry, length, "MIG-") ||
               (!host && std::memchr(entry, ':', length) != nullptr);
    if (mig) {
        return fail(problem, 0,
                    "%s=%s lists a MIG instance (%s); MIG instances are memory-isolated by the "
                    "GPU already, so run without AMP_VGPU_ENABLE there or list whole GPUs only",
                    name, show(all).text, show(entry, length).text);
    }
    if (starts_with_nocase(entry, length, "GPU-") && length < kUuidSize &&
        is_gpu_uuid_body(entry + 4, length - 4)) {
        device.kind = ListedDevice::Kind::Uuid;
        std::memcpy(device.uuid, "GPU-", 4); // as nvidia-smi and NVML spell it
        for (size_t i = 4; i < length; ++i) {
            device.uuid[i] = lower(entry[i]);
        }
        device.uuid[length] = '\0';
        return true;
    }
    if (host) {
        if (parse_pci_address(entry, length, device.pci)) {
            device.kind = ListedDevice::Kind::Pci;
            return true;
        }
    } else {
        uint64_t index = 0;
        if (parse_decimal(entry, length, UINT32_MAX, index)) {
            device.kind = ListedDevice::Kind::Index;
            device.index = static_cast<uint32_t>(index);
            return true;
        }
    }
    return fail(problem, 0, "%s=%s has an entry that is neither %s nor a GPU UUID (%s); %s", name,
                show(all).text, host ? "a PCI address" : "an index", show(entry, length).text, fix);
}

bool parse_list(const char* name, const char* value, bool host, VisibleDevices& visible,
                Problem& problem) {
    visible = VisibleDevices{};
    const char* fix = host ? kHostDevicesFix : kVisibleFix;
    if (std::strcmp(value, "all") == 0 ||
        (!host && (value[0] == '\0' || std::strcmp(value, "void") == 0))) {
        visible.kind = VisibleDevices::Kind::All;
        return true;
    }
    if (std::strcmp(value, "none") == 0) {
        visible.kind = VisibleDevices::Kind::None;
        return true;
    }
    visible.kind = VisibleDevices::Kind::List;
    const char* entry = value;
    while (true) {
        const char* comma = std::strchr(entry, ',');
        size_t length = comma != nullptr ? static_cast<size_t>(comma - entry) : std::strlen(entry);
        if (length == 0) {
            return fail(problem, 0, "%s=%s has an empty entry; %s", name, show(value).text, fix);
        }
        if (visible.count == kMaxListedDevices) {
            return fail(problem, 0, "%s=%s lists more than %d devices; list each GPU once", name,
                        show(value).text, kMaxListedDevices);
        }
        if (!parse_entry(name, value, entry, length, host, visible.entries[visible.count],
                         problem)) {
            visible = VisibleDevices{};
            return false;
        }
        ++visible.count;
        if (comma == nullptr) {
            return true;
        }
        entry = comma + 1;
    }
}

bool parse_devices(EnvLookup lookup, void* context, Settings& settings, Problem& problem) {
    const char* visible = lookup("NVIDIA_VISIBLE_DEVICES", context);
    if (visible == nullptr) {
        settings.visible = VisibleDevices{};
    } else if (!parse_list("NVIDIA_VISIBLE_DEVICES", visible, false, settings.visible, problem)) {
        return false;
    }
    const char* host = lookup("GPU_LIMIT_DEVICES", context);
    settings.host_devices_given = host != nullptr;
    if (host == nullptr) {
        settings.host_devices = VisibleDevices{};
        return true;
    }
    return parse_list("GPU_LIMIT_DEVICES", host, true, settings.host_devices, problem);
}

bool copy_text(const char* value, char* out, size_t size) {
    size_t length = std::strlen(value);
    if (length >= size) {
        return false;
    }
    std::memcpy(out, value, length + 1);
    return true;
}

bool parse_group(const char* value, char (&group)[kGroupNameSize], Problem& problem) {
    size_t length = std::strlen(value);
    bool good = length > 0 && length < kGroupNameSize && std::strcmp(value, ".") != 0 &&
                std::strcmp(value, "..") != 0;
    for (size_t i = 0; good && i < length; ++i) {
        char c = value[i];
        good =
            is_digit(c) || (lower(c) >= 'a' && lower(c) <= 'z') || c == '.' || c == '_' || c == '-';
    }
    if (!good) {
        return fail(problem, 0,
                    "GPU_LIMIT_GROUP=%s is not a group name; use 1 to %zu of A-Z a-z 0-9 . _ - "
                    "(not . or ..), such as GPU_LIMIT_GROUP=job-42",
                    show(value).text, kGroupNameSize - 1);
    }
    std::memcpy(group, value, length + 1);
    return true;
}

bool parse_absolute_path(const char* name, const char* value, char (&out)[kPathSize],
                         const char* what, Problem& problem) {
    if (value[0] != '/') {
        return fail(problem, 0, "%s=%s is not an absolute path; set it to the absolute path of %s",
                    name, show(value).text, what);
    }
    if (!copy_text(value, out, kPathSize)) {
        return fail(problem, 0, "%s=%s is longer than %zu bytes; use a shorter path to %s", name,
                    show(value).text, kPathSize - 1, what);
    }
    return true;
}

bool parse_memory(EnvLookup lookup, void* context, Settings& settings, Problem& problem) {
    const char* per_device = lookup("GPU_MEM_PER_DEVICE", context);
    const char* dev = lookup("ALIYUN_COM_GPU_MEM_DEV", context);
    const char* container = lookup("ALIYUN_COM_GPU_MEM_CONTAINER", context);
    if (per_device != nullptr && (dev != nullptr || container != nullptr)) {
        return fail(problem, 0,
                    "GPU_MEM_PER_DEVICE=%s and ALIYUN_COM_GPU_MEM_%s=%s are both set; a cap is "
                    "either bytes (GPU_MEM_PER_DEVICE) or a share (ALIYUN_COM_GPU_MEM_CONTAINER "
                    "with optional ALIYUN_COM_GPU_MEM_DEV): unset one",
                    show(per_device).text, container != nullptr ? "CONTAINER" : "DEV",
                    show(container != nullptr ? container : dev).text);
    }
    if (per_device != nullptr) {
        settings.rule = MemoryRule::PerDevice;
        return read_positive("GPU_MEM_PER_DEVICE", per_device, "bytes", "4294967296",
                             settings.mem_per_device, problem);
    }
    if (dev != nullptr && container == nullptr) {
        return fail(problem, 0,
                    "ALIYUN_COM_GPU_MEM_DEV=%s is set without ALIYUN_COM_GPU_MEM_CONTAINER; set "
                    "ALIYUN_COM_GPU_MEM_CONTAINER to the container's part of DEV parts, or unset "
                    "ALIYUN_COM_GPU_MEM_DEV",
                    show(dev).text);
    }
    if (container == nullptr) {
        settings.rule = MemoryRule::None;
        return true;
    }
    if (!read_positive("ALIYUN_COM_GPU_MEM_CONTAINER", container, dev != nullptr ? "parts" : "GiB",
                       "4", settings.ratio_container, problem)) {
        return false;
    }
    if (dev == nullptr) {
        settings.rule = MemoryRule::ContainerGiB;
        return true;
    }
    if (!read_positive("ALIYUN_COM_GPU_MEM_DEV", dev, "parts", "16", settings.ratio_dev, problem)) {
        return false;
    }
    if (settings.ratio_container > settings.ratio_dev) {
        return fail(problem, 0,
                    "ALIYUN_COM_GPU_MEM_CONTAINER=%s is more than ALIYUN_COM_GPU_MEM_DEV=%s; the "
                    "container's share is CONTAINER/DEV of the GPU, so CONTAINER must not exceed "
                    "DEV",
                    show(container).text, show(dev).text);
    }
    settings.rule = MemoryRule::Ratio;
    return true;
}

bool parse_oom(EnvLookup lookup, void* context, Settings& settings, Problem& problem) {
    if (const char* script = lookup("ALIYUN_COM_GPU_OOM_SCRIPT", context); script != nullptr) {
        if (!parse_absolute_path("ALIYUN_COM_GPU_OOM_SCRIPT", script, settings.oom_script,
                                 "the program to run when an allocation is refused, or unset it",
                                 problem)) {
            return false;
        }
    }
    if (const char* policy = lookup("GPU_LIMIT_OOM_POLICY", context); policy != nullptr) {
        if (std::strcmp(policy, "return") == 0) {
            settings.oom_policy = OomPolicy::Return;
        } else if (std::strcmp(policy, "kill") == 0) {
            settings.oom_policy = OomPolicy::Kill;
        } else {
            return fail(problem, 0,
                        "GPU_LIMIT_OOM_POLICY=%s is not a policy; set it to return (the "
                        "allocation fails with out of memory) or kill (run the OOM script, then "
                        "end the process), or unset it",
                        show(policy).text);
        }
    }
    if (const char* timeout = lookup("GPU_LIMIT_OOM_SCRIPT_TIMEOUT", context); timeout != nullptr) {
        uint64_t seconds = 0;
        if (!parse_decimal(timeout, 3600, seconds) || seconds == 0) {
            return fail(problem, 0,
                        "GPU_LIMIT_OOM_SCRIPT_TIMEOUT=%s is not a number of seconds from 1 to "
                        "3600; set it to digits only, such as GPU_LIMIT_OOM_SCRIPT_TIMEOUT=10, "
                        "or unset it",
                        show(timeout).text);
        }
        settings.oom_script_timeout_ms = static_cast<uint32_t>(seconds * 1000);
    }
    return true;
}

// GPU_UTIL_PER_DEVICE: digits only. Unset, 0 or above 95 means no compute
// cap (eGPU's rule), however many digits; anything not a number is refused.
bool parse_compute(EnvLookup lookup, void* context, Settings& settings, Problem& problem) {
    const char* value = lookup("GPU_UTIL_PER_DEVICE", context);
    if (value == nullptr) {
        return true;
    }
    size_t length = std::strlen(value);
    bool digits = length > 0;
    for (size_t i = 0; digits && i < length; ++i) {
        digits = is_digit(value[i]);
    }
    if (!digits) {
        return fail(problem, 0,
                    "GPU_UTIL_PER_DEVICE=%s is not a whole number of percent; set it to digits "
                    "only, 1 to %u (the group's share of each GPU's time), such as "
                    "GPU_UTIL_PER_DEVICE=50, or unset it (0 or above %u also means no compute "
                    "cap)",
                    show(value).text, unsigned(kMaxComputePercent), unsigned(kMaxComputePercent));
    }
    uint64_t percent = 0;
    // A number too long for 64 bits is above 95 all the same.
    if (!parse_decimal(value, length, 1000, percent) || percent > kMaxComputePercent) {
        percent = 0;
    }
    settings.compute_percent = static_cast<uint32_t>(percent);
    return true;
}

} // namespace

bool parse_settings(EnvLookup lookup, void* context, Settings& settings, Problem& problem) {
    settings = Settings{};
    problem = Problem{};
    const char* enable = lookup("AMP_VGPU_ENABLE", context);
    if (enable == nullptr || std::strcmp(enable, "1") != 0) {
        return true; // off: the library passes everything through
    }
    settings.enabled = true;
    if (!parse_memory(lookup, context, settings, problem)) {
        return false;
    }
    if (const char* reserved = lookup("ALIYUN_COM_GPU_MEM_RESERVED", context);
        reserved != nullptr) {
        uint64_t mib = 0;
        if (!parse_decimal(reserved, kUint64Max / kMiB, mib)) {
            return fail(problem, 0,
                        "ALIYUN_COM_GPU_MEM_RESERVED=%s is not a decimal number of MiB (2^20 "
                        "bytes) below 2^44; set it to digits only, such as "
                        "ALIYUN_COM_GPU_MEM_RESERVED=10 (the default), or 0",
                        show(reserved).text);
        }
        settings.reserved_bytes = mib * kMiB;
    }
    // Known before any device is seen: say so now rather than at the first GPU.
    if (settings.rule == MemoryRule::PerDevice &&
        settings.mem_per_device <= settings.reserved_bytes) {
        return fail(problem, 0,
                    "GPU_MEM_PER_DEVICE=%llu bytes is not more than ALIYUN_COM_GPU_MEM_RESERVED "
                    "(%llu MiB), so nothing would be usable; raise GPU_MEM_PER_DEVICE or lower "
                    "ALIYUN_COM_GPU_MEM_RESERVED",
                    static_cast<unsigned long long>(settings.mem_per_device),
                    static_cast<unsigned long long>(settings.reserved_bytes / kMiB));
    }
    if (!parse_devices(lookup, context, settings, problem) ||
        !parse_oom(lookup, context, settings, problem)) {
        return false;
    }
    if (!parse_compute(lookup, context, settings, problem)) {
        return false;
    }
    const char* daemon = lookup("AMP_USE_HOST_DAEMON", context);
    settings.use_host_daemon = daemon != nullptr && std::strcmp(daemon, "1") == 0;
    const char* group = lookup("GPU_LIMIT_GROUP", context);
    if (!parse_group(group != nullptr ? group : "default", settings.group, problem)) {
        return false;
    }
    if (const char* state_dir = lookup("GPU_LIMIT_STATE_DIR", context); state_dir != nullptr) {
        if (!parse_absolute_path("GPU_LIMIT_STATE_DIR", state_dir, settings.state_dir,
                                 "a directory owned by you or root and writable only by its "
                                 "owner, or unset it",
                                 problem)) {
            return false;
        }
    }
    return true;
}

bool device_cap(const Settings& settings, uint64_t physical_total, uint64_t& cap,
                Problem& problem) {
    if (physical_total == 0) {
        return fail(problem, 0,
                    "the driver reports a GPU with 0 bytes of memory; no cap can be computed, "
                    "check the driver with nvidia-smi");
    }
    using Wide = unsigned __int128;
    Wide share = 0;
    const char* formula = "";
    switch (settings.rule) {
    case MemoryRule::None:
        cap = physical_total;
        return true;
    case MemoryRule::PerDevice:
        share = settings.mem_per_device;
        formula = "GPU_MEM_PER_DEVICE";
        break;
    case MemoryRule::Ratio:
        share = Wide{physical_total} * settings.ratio_container / settings.ratio_dev;
        formula = "GPU memory * ALIYUN_COM_GPU_MEM_CONTAINER / ALIYUN_COM_GPU_MEM_DEV";
        break;
    case MemoryRule::ContainerGiB: {
        uint64_t dev_gib = physical_total / kGiB + (physical_total % kGiB != 0 ? 1 : 0);
        share = Wide{physical_total} * settings.ratio_container / dev_gib;
        formula = "GPU memory * ALIYUN_COM_GPU_MEM_CONTAINER / GPU memory in whole GiB";
        break;
    }
    }
    if (share <= settings.reserved_bytes) {
        return fail(problem, 0,
                    "the share %s is %llu bytes on a GPU of %llu bytes, not more than "
                    "ALIYUN_COM_GPU_MEM_RESERVED (%llu MiB), so nothing would be usable; give a "
                    "larger share or a smaller ALIYUN_COM_GPU_MEM_RESERVED",
                    formula, static_cast<unsigned long long>(share),
                    static_cast<unsigned long long>(physical_total),
                    static_cast<unsigned long long>(settings.reserved_bytes / kMiB));
    }
    Wide usable = share - settings.reserved_bytes;
    cap = usable > physical_total ? physical_total : static_cast<uint64_t>(usable);
    return true;
}

bool is_gpu_uuid(const char* text, size_t length) {
    return starts_with_nocase(text, length, "GPU-") && is_gpu_uuid_body(text + 4, length - 4);
}

bool parse_pci_address(const char* text, size_t length, PciAddress& address) {
    // Two or three ':'-separated hex fields before ".function".
    size_t colons = 0;
    for (size_t i = 0; i < length; ++i) {
        colons += text[i] == ':' ? 1 : 0;
    }
    if (colons < 1 || colons > 2) {
        return false;
    }
    PciAddress parsed;
    size_t at = 0;
    if (colons == 2) {
        if (!hex_field(text, length, at, 8, ':', parsed.domain) || at == length) {
            return false;
        }
        ++at;
    }
    if (!hex_field(text, length, at, 2, ':', parsed.bus) || at == length) {
        return false;
    }
    ++at;
    if (!hex_field(text, length, at, 2, '.', parsed.device) || at == length) {
        return false;
    }
    ++at;
    if (!hex_field(text, length, at, 1, '\0', parsed.function) || at != length ||
        parsed.device > 0x1f || parsed.function > 7) {
        return false;
    }
    address = parsed;
    return true;
}

bool same_pci_address(const PciAddress& a, const PciAddress& b) {
    return a.domain == b.domain && a.bus == b.bus && a.device == b.device &&
           a.function == b.function;
}

bool pci_address_before(const PciAddress& a, const PciAddress& b) {
    if (a.domain != b.domain) {
        return a.domain < b.domain;
    }
    if (a.bus != b.bus) {
        return a.bus < b.bus;
    }
    if (a.device != b.device) {
        return a.device < b.device;
    }
    return a.function < b.function;
}

bool VisibleDevices::has_index() const {
    if (kind != Kind::List) {
        return false;
    }
    for (int i = 0; i < count && i < kMaxListedDevices; ++i) {
        if (entries[i].kind == ListedDevice::Kind::Index) {
            return true;
        }
    }
    return false;
}

const VisibleDevices& deciding_devices(const Settings& settings) {
    return settings.host_devices_given ? settings.host_devices : settings.visible;
}

bool device_listed(const VisibleDevices& visible, const SeenDevice& device) {
    switch (visible.kind) {
    case VisibleDevices::Kind::All:
        return true;
    case VisibleDevices::Kind::None:
        return false;
    case VisibleDevices::Kind::List:
        break;
    }
    for (int i = 0; i < visible.count && i < kMaxListedDevices; ++i) {
        const ListedDevice& entry = visible.entries[i];
        switch (entry.kind) {
        case ListedDevice::Kind::Index:
            if (device.host_index >= 0 && entry.index == static_cast<uint32_t>(device.host_index)) {
                return true;
            }
            break;
        case ListedDevice::Kind::Pci:
            if (device.pci_known && same_pci_address(entry.pci, device.pci)) {
                return true;
            }
            break;
        case ListedDevice::Kind::Uuid: {
            if (device.uuid == nullptr) {
                break;
            }
            size_t at = 0;
            while (entry.uuid[at] != '\0' && lower(device.uuid[at]) == lower(entry.uuid[at])) {
                ++at;
            }
            if (entry.uuid[at] == '\0' && device.uuid[at] == '\0') {
                return true;
            }
            break;
        }
        }
    }
    return false;
}

bool match_host_indices(const VisibleDevices& visible, const PciAddress* host, int host_count,
                        bool host_listed, SeenDevice* seen, int seen_count, Problem& problem) {
    for (int i = 0; i < seen_count; ++i) {
        seen[i].host_index = -1;
    }
    if (!visible.has_index()) {
        return true;
    }
    // The first index entry, for the messages.
    uint32_t first = 0;
    uint32_t highest = 0;
    bool any = false;
    for (int i = 0; i < visible.count && i < kMaxListedDevices; ++i) {
        if (visible.entries[i].kind == ListedDevice::Kind::Index) {
            first = any ? first : visible.entries[i].index;
            highest =
                any && highest > visible.entries[i].index ? highest : visible.entries[i].index;
            any = true;
        }
    }
    constexpr const char* kUseUuids =
        "list the GPUs by UUID (nvidia-smi -L on the host), or start the container through "
        "gpu-limit's OCI hook or runtime, which give the library the host's list";
    if (!host_listed || host_count <= 0) {
        return fail(problem, 0,
                    "NVIDIA_VISIBLE_DEVICES names GPU %u by the host's index, but the host's GPU "
                    "list (/proc/driver/nvidia/gpus) cannot be read here, so no GPU can be "
                    "matched to it; %s",
                    first, kUseUuids);
    }
    int matched = 0;
    for (int i = 0; i < seen_count; ++i) {
        if (!seen[i].pci_known) {
            continue;
        }
        int position = 0;
        bool found = false;
        for (int h = 0; h < host_count; ++h) {
            if (same_pci_address(host[h], seen[i].pci)) {
                found = true;
            } else if (pci_address_before(host[h], seen[i].pci)) {
                ++position;
            }
        }
        if (found) {
            seen[i].host_index = position;
            ++matched;
        }
    }
    if (matched != seen_count || seen_count != host_count) {
        for (int i = 0; i < seen_count; ++i) {
            seen[i].host_index = -1;
        }
        return fail(problem, 0,
                    "NVIDIA_VISIBLE_DEVICES names GPU %u by the host's index, but this process "
                    "sees %d of the %d GPUs the host lists (a container given some GPUs, or "
                    "CUDA_VISIBLE_DEVICES), so the index cannot be matched; %s",
                    first, matched, host_count, kUseUuids);
    }
    if (highest >= static_cast<uint32_t>(host_count)) {
        for (int i = 0; i < seen_count; ++i) {
            seen[i].host_index = -1;
        }
        return fail(problem, 0,
                    "NVIDIA_VISIBLE_DEVICES names GPU %u, but the host lists %d GPUs (0 to %d); "
                    "%s",
                    highest, host_count, host_count - 1, kUseUuids);
    }
    return true;
}

bool default_state_dir(uint32_t uid, const char* xdg_runtime_dir, char (&out)[kPathSize],
                       Problem& problem) {
    int written = 0;
    if (uid == 0) {
        written = std::snprintf(out, kPathSize, "/run/gpu-limit");
    } else if (xdg_runtime_dir != nullptr && xdg_runtime_dir[0] == '/') {
        written = std::snprintf(out, kPathSize, "%s/gpu-limit", xdg_runtime_dir);
    } else {
        written = std::snprintf(out, kPathSize, "/tmp/gpu-limit-%u", uid);
    }
    if (written < 0 || static_cast<size_t>(written) >= kPathSize) {
        out[0] = '\0';
        return fail(problem, 0,
                    "XDG_RUNTIME_DIR=%s is too long for a state directory; set "
                    "GPU_LIMIT_STATE_DIR to a shorter absolute path",
                    show(xdg_runtime_dir != nullptr ? xdg_runtime_dir : "").text);
    }
    return true;
}

uint64_t round_up(uint64_t bytes, uint64_t granularity) {
    if (granularity <= 1) {
        return bytes;
    }
    uint64_t remainder = bytes % granularity;
    if (remainder == 0) {
        return bytes;
    }
    uint64_t step = granularity - remainder;
    return bytes > kUint64Max - step ? kUint64Max : bytes + step;
}

} // namespace gpuinit::limit
