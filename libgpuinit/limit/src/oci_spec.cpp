// Tool side (see oci_spec.hpp): uses the standard library, so it must never
// be reached from libgpulimit.so (tests/limiter/abi checks).
#include "gpuinit/limit/oci_spec.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/limit/egpu.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit::limit::oci {

namespace {

constexpr const char* kSwitch = "AMP_VGPU_ENABLE=1";

bool all_strings(const JsonValue& array) {
    return std::all_of(array.items().begin(), array.items().end(),
                       [](const JsonValue& item) { return item.is_string(); });
}

// A JSON number that is a non-negative integer below 2^32, as the spec's
// uid, gid and mapping fields are.
std::optional<uint32_t> as_u32(const JsonValue* value) {
    if (value == nullptr || value->kind() != JsonValue::Kind::Number) {
        return std::nullopt;
    }
    const std::string& text = value->text();
    if (text.empty() || text.size() > 10 ||
        !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return std::nullopt;
    }
    uint64_t number = 0;
    for (char c : text) {
        number = number * 10 + static_cast<uint64_t>(c - '0');
    }
    if (number > UINT32_MAX) {
        return std::nullopt;
    }
    return static_cast<uint32_t>(number);
}

Status check_mappings(const JsonValue* mappings, const char* name) {
    if (mappings == nullptr || mappings->kind() == JsonValue::Kind::Null) {
        return {};
    }
    if (!mappings->is_array()) {
        return error(std::string("the spec's linux.") + name + " is not an array");
    }
    for (const JsonValue& entry : mappings->items()) {
        if (!entry.is_object() || !as_u32(entry.find("containerID")) ||
            !as_u32(entry.find("hostID")) || !as_u32(entry.find("size"))) {
            return error(std::string("an entry of the spec's linux.") + name +
                         " is not {containerID, hostID, size} numbers");
        }
    }
    return {};
}

// Maps `id` through an id mapping array (absent: the identity).
std::optional<uint32_t> map_id(const JsonValue* mappings, uint32_t id) {
    if (mappings == nullptr || !mappings->is_array() || mappings->items().empty()) {
        return id;
    }
    for (const JsonValue& entry : mappings->items()) {
        uint64_t inside = *as_u32(entry.find("containerID"));
        uint64_t outside = *as_u32(entry.find("hostID"));
        uint64_t size = *as_u32(entry.find("size"));
        if (id >= inside && id - inside < size && outside + (id - inside) <= UINT32_MAX) {
            return static_cast<uint32_t>(outside + (id - inside));
        }
    }
    return std::nullopt;
}

bool is_hex_id(std::string_view text) {
    return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
           });
}

const std::string* string_member(const JsonValue& object, std::string_view key) {
    const JsonValue* value = object.is_object() ? object.find(key) : nullptr;
    return value != nullptr && value->is_string() ? &value->text() : nullptr;
}

JsonValue make_mount(const std::string& destination, const std::string& source,
                     std::initializer_list<const char*> options) {
    JsonValue mount = JsonValue::make_object();
    mount.member("destination") = JsonValue::make_string(destination);
    mount.member("type") = JsonValue::make_string("bind");
    mount.member("source") = JsonValue::make_string(source);
    JsonValue& list = mount.member("options");
    list = JsonValue::make_array();
    for (const char* option : options) {
        list.items().push_back(JsonValue::make_string(option));
    }
    return mount;
}

// Adds the bind mount unless the spec's last mount at `destination` or
// above it is already this one: a later mount at the same place, however
// spelt, or over a parent directory would cover ours.
// Whether the mount has each of `options`: a read-write bind of the library
// at our place is not our read-only one.
bool has_every_option(const JsonValue& mount, std::initializer_list<const char*> options) {
    const JsonValue* have = mount.is_object() ? mount.find("options") : nullptr;
    for (const char* option : options) {
        bool found = false;
        if (have != nullptr && have->is_array()) {
            for (const JsonValue& item : have->items()) {
                found = found || (item.is_string() && item.text() == option);
            }
        }
        if (!found) {
            return false;
        }
    }
    return true;
}

bool ensure_mount(JsonValue& mounts, const std::string& destination, const std::string& source,
                  std::initializer_list<const char*> options) {
    const std::string target = normalized_path(destination);
    const JsonValue* last = nullptr;
    for (const JsonValue& mount : mounts.items()) {
        const std::string* at = string_member(mount, "destination");
        if (at != nullptr && covers(normalized_path(*at), target)) {
            last = &mount;
        }
    }
    if (last != nullptr) {
        const std::string* at = string_member(*last, "destination");
        const std::string* from = string_member(*last, "source");
        const std::string* type = string_member(*last, "type");
        if (normalized_path(*at) == target && from != nullptr && *from == source &&
            type != nullptr && *type == "bind" && has_every_option(*last, options)) {
            return false;
        }
    }
    mounts.items().push_back(make_mount(destination, source, options));
    return true;
}

// NAME=value as the only entry of NAME (glibc's getenv takes the first).
// One pass: the config's author may repeat NAME as often as 8 MiB allows,
// and erasing the copies one at a time is quadratic.
bool ensure_env(JsonValue& env, const std::string& name, const std::string& value) {
    std::string wanted = name + "=" + value;
    std::string prefix = name + "=";
    auto& items = env.items();
    auto named = [&](const JsonValue& item) {
        return item.text().compare(0, prefix.size(), prefix) == 0;
    };
    auto first = std::find_if(items.begin(), items.end(), named);
    if (first == items.end()) {
        items.push_back(JsonValue::make_string(wanted));
        return true;
    }
    bool changed = false;
    if (first->text() != wanted) {
        *first = JsonValue::make_string(wanted);
        changed = true;
    }
    auto copies = std::remove_if(first + 1, items.end(), named);
    changed |= copies != items.end();
    items.erase(copies, items.end());
    return changed;
}

bool remove_env(JsonValue& env, const std::string& name) {
    const std::string prefix = name + "=";
    auto& items = env.items();
    const auto before = items.size();
    items.erase(std::remove_if(items.begin(), items.end(),
                               [&](const JsonValue& item) {
                                   return item.text().compare(0, prefix.size(), prefix) == 0;
                               }),
                items.end());
    return items.size() != before;
}

} // namespace

// A container path as the runtime resolves it: absolute, without empty,
// "." or ".." components ("/etc//ld.so.preload/" is "/etc/ld.so.preload";
// ".." stops at the root, as runc's and crun's secure joins do).
std::string normalized_path(std::string_view path) {
    std::vector<std::string_view> parts;
    while (!path.empty()) {
        size_t slash = path.find('/');
        std::string_view part = path.substr(0, slash);
        path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
        if (part.empty() || part == ".") {
            continue;
        }
        if (part == "..") {
            if (!parts.empty()) {
                parts.pop_back();
            }
            continue;
        }
        parts.push_back(part);
    }
    std::string out;
    for (std::string_view part : parts) {
        out += '/';
        out += part;
    }
    return out.empty() ? "/" : out;
}

// A mount at `outer` hides whatever is at `inner`: the same path or a
// directory above it.
bool covers(const std::string& outer, const std::string& inner) {
    return outer == inner || outer == "/" ||
           (inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 &&
            inner[outer.size()] == '/');
}

Result<JsonValue> parse_spec(std::string_view text) {
    auto parsed = parse_json(text);
    if (!parsed) {
        return error("the OCI spec is not valid: " + parsed.error().message);
    }
    JsonValue& spec = *parsed;
    if (!spec.is_object()) {
        return error("the OCI spec is not a JSON object");
    }
    if (const JsonValue* process = spec.find("process"); process != nullptr) {
        if (!process->is_object()) {
            return error("the spec's process is not an object");
        }
        if (const JsonValue* env = process->find("env");
            env != nullptr && (!env->is_array() || !all_strings(*env))) {
            return error("the spec's process.env is not an array of strings");
        }
        if (const JsonValue* user = process->find("user"); user != nullptr) {
            if (!user->is_object()) {
                return error("the spec's process.user is not an object");
            }
            for (const char* key : {"uid", "gid"}) {
                if (user->find(key) != nullptr && !as_u32(user->find(key))) {
                    return error(std::string("the spec's process.user.") + key +
                                 " is not a 32-bit id");
                }
            }
        }
    }
    if (const JsonValue* mounts = spec.find("mounts"); mounts != nullptr) {
        if (!mounts->is_array() ||
            !std::all_of(mounts->items().begin(), mounts->items().end(),
                         [](const JsonValue& mount) { return mount.is_object(); })) {
            return error("the spec's mounts is not an array of objects");
        }
    }
    if (const JsonValue* annotations = spec.find("annotations"); annotations != nullptr) {
        if (!annotations->is_object() ||
            !std::all_of(annotations->members().begin(), annotations->members().end(),
                         [](const JsonMember& entry) { return entry.value.is_string(); })) {
            return error("the spec's annotations is not an object of strings");
        }
    }
    if (const JsonValue* linux_section = spec.find("linux"); linux_section != nullptr) {
        if (!linux_section->is_object()) {
            return error("the spec's linux is not an object");
        }
        for (const char* name : {"uidMappings", "gidMappings"}) {
            if (auto checked = check_mappings(linux_section->find(name), name); !checked) {
                return checked.error();
            }
        }
    }
    return std::move(parsed).value();
}

bool limit_requested(const JsonValue& spec) {
    const JsonValue* process = spec.find("process");
    const JsonValue* env = process != nullptr ? process->find("env") : nullptr;
    if (env == nullptr || !env->is_array()) {
        return false;
    }
    return std::any_of(env->items().begin(), env->items().end(), [](const JsonValue& item) {
        return item.is_string() && item.text() == kSwitch;
    });
}

namespace {

constexpr std::string_view kCdiAnnotationPrefix = "cdi.k8s.io/";
constexpr std::string_view kCdiGpuKind = "nvidia.com/gpu=";

bool is_decimal(std::string_view text) {
    return !text.empty() && text.size() <= 9 &&
           std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string lower_ascii(std::string_view text) {
    std::string out(text);
    for (char& c : out) {
        if (c >= 'A' && c <= 'Z') {
            c = static_cast<char>(c - 'A' + 'a');
        }
    }
    return out;
}

// The union being built: host GPUs by index, and UUIDs the host's list
// cannot confirm (a driver that printed no UUID for some GPU).
struct Chosen {
    bool all = false;
    std::vector<bool> gpus;
    std::vector<std::string> uuids;
};

constexpr const char* kUseWholeGpus =
    "MIG instances are memory-isolated by the GPU already: run without AMP_VGPU_ENABLE there, or "
    "give the container whole GPUs";

// libgpulimit.so refuses a longer GPU_LIMIT_DEVICES.
std::string too_many(const std::string& where) {
    return where + " names more than " + std::to_string(limit::kMaxListedDevices) +
           " GPUs, more than libgpulimit.so takes; name each GPU once";
}

// One name of a GPU as NVIDIA's runtime and CDI specs take it: an index, a
// UUID, "all"; `where` says where it came from, for the messages.
Status choose(std::string_view name, const std::string& where, const HostGpus& host,
              Chosen& chosen) {
    if (name == "all") {
        chosen.all = true;
        return {};
    }
    if (name.substr(0, 4) == "MIG-" || name.find(':') != std::string_view::npos) {
        return error(where + " names the MIG instance " + quote(name) + "; " + kUseWholeGpus);
    }
    if (is_decimal(name)) {
        if (!host.listed) {
            return error(where + " names GPU " + std::string(name) +
                         " by the host's index, but the host's driver lists no GPUs "
                         "(/proc/driver/nvidia/gpus is absent); load the NVIDIA driver, or name "
                         "GPUs by UUID");
        }
        size_t index = std::stoul(std::string(name));
        if (index >= host.gpus.size()) {
            return error(where + " names GPU " + std::string(name) + ", but the host has " +
                         std::to_string(host.gpus.size()) +
                         " GPUs (nvidia-smi -L); name one of them");
        }
        chosen.gpus[index] = true;
        return {};
    }
    if (name.size() > 4 && lower_ascii(name.substr(0, 4)) == "gpu-" && name.size() <= 64 &&
        std::all_of(name.begin() + 4, name.end(), [](char c) {
            return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
                   c == '-';
        })) {
        const std::string uuid = "GPU-" + lower_ascii(name.substr(4));
        bool all_known = host.listed;
        for (size_t i = 0; i < host.gpus.size(); ++i) {
            if (host.gpus[i].uuid.empty()) {
                all_known = false;
            } else if (lower_ascii(host.gpus[i].uuid) == lower_ascii(uuid)) {
                chosen.gpus[i] = true;
                return {};
            }
        }
        if (all_known) {
            return error(where + " names " + quote(name) +
                         ", which no GPU of the host has (nvidia-smi -L); name one of them");
        }
        // Passed on as given: in the one form the library takes, and no
        // more of them than it takes (the list is the config author's).
        if (!limit::is_gpu_uuid(uuid.data(), uuid.size())) {
            return error(where + " names " + quote(name) +
                         ", which is no GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx); name "
                         "GPUs as nvidia-smi -L shows them");
        }
        if (std::find(chosen.uuids.begin(), chosen.uuids.end(), uuid) == chosen.uuids.end()) {
            if (chosen.uuids.size() >= static_cast<size_t>(limit::kMaxListedDevices)) {
                return error(too_many(where));
            }
            chosen.uuids.push_back(uuid);
        }
        return {};
    }
    return error(where + " names " + quote(name) +
                 ", which is neither a GPU index, a GPU UUID nor all; name GPUs as nvidia-smi -L "
                 "shows them");
}

// A comma-separated list of names (NVIDIA_VISIBLE_DEVICES, a CDI annotation);
// `cdi` true: only entries of kind nvidia.com/gpu count, by their name.
Status choose_list(std::string_view list, bool cdi, const std::string& where, const HostGpus& host,
                   Chosen& chosen) {
    size_t start = 0;
    while (start <= list.size()) {
        size_t comma = list.find(',', start);
        std::string_view entry = trim(list.substr(
            start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
        start = comma == std::string_view::npos ? list.size() + 1 : comma + 1;
        if (entry.substr(0, kCdiGpuKind.size()) == kCdiGpuKind) {
            entry.remove_prefix(kCdiGpuKind.size());
        } else if (cdi || entry.empty() || entry == "none" || entry == "void") {
            continue; // another vendor's device, or nothing
        }
        if (auto chose = choose(entry, where, host, chosen); !chose) {
            return chose;
        }
    }
    return {};
}

} // namespace

Result<std::optional<std::string>> container_devices(const JsonValue& spec, const HostGpus& host) {
    Chosen chosen;
    chosen.gpus.assign(host.gpus.size(), false);
    bool named = false;
    if (const JsonValue* linux_section = spec.find("linux"); linux_section != nullptr) {
        const JsonValue* devices = linux_section->find("devices");
        if (devices != nullptr && devices->is_array()) {
            for (const JsonValue& device : devices->items()) {
                const JsonValue* type = device.is_object() ? device.find("type") : nullptr;
                auto major = device.is_object() ? as_u32(device.find("major")) : std::nullopt;
                auto minor = device.is_object() ? as_u32(device.find("minor")) : std::nullopt;
                // "u" (unbuffered) is a character node to runc as "c" is
                // (libcontainer/specconv/spec_linux.go, stringToDeviceRune).
                if (type == nullptr || !type->is_string() ||
                    (type->text() != "c" && type->text() != "u") || !major ||
                    *major != kNvidiaMajor || !minor || *minor > kMaxGpuMinor) {
                    continue;
                }
                named = true;
                const JsonValue* path = device.find("path");
                const std::string node =
                    "linux.devices " +
                    (path != nullptr && path->is_string() ? quote(path->text()) : std::string("")) +
                    " (195:" + std::to_string(*minor) + ")";
                auto found = std::find_if(host.gpus.begin(), host.gpus.end(),
                                          [&](const HostGpu& gpu) { return gpu.minor == *minor; });
                if (found == host.gpus.end()) {
                    return error("the spec's " + node + " is no GPU of the host (no Device Minor " +
                                 std::to_string(*minor) +
                                 " in /proc/driver/nvidia/gpus); give the container the host's "
                                 "device nodes");
                }
                chosen.gpus[static_cast<size_t>(found - host.gpus.begin())] = true;
            }
        }
    }
    if (const JsonValue* annotations = spec.find("annotations");
        annotations != nullptr && annotations->is_object()) {
        for (const JsonMember& member : annotations->members()) {
            if (member.key.compare(0, kCdiAnnotationPrefix.size(), kCdiAnnotationPrefix) != 0 ||
                !member.value.is_string()) {
                continue;
            }
            if (member.value.text().find(kCdiGpuKind) != std::string::npos) {
                named = true;
            }
            if (auto chose = choose_list(member.value.text(), true,
                                         "the annotation " + quote(member.key), host, chosen);
                !chose) {
                return chose.error();
            }
        }
    }
    const JsonValue* process = spec.find("process");
    const JsonValue* env = process != nullptr ? process->find("env") : nullptr;
    if (env != nullptr && env->is_array()) {
        constexpr std::string_view kVisible = "NVIDIA_VISIBLE_DEVICES=";
        const JsonValue* last = nullptr;
        for (const JsonValue& item : env->items()) {
            if (item.is_string() && item.text().compare(0, kVisible.size(), kVisible) == 0) {
                last = &item;
            }
        }
        if (last != nullptr) {
            std::string_view value = std::string_view(last->text()).substr(kVisible.size());
            if (!value.empty() && value != "none" && value != "void") {
                named = true;
            }
            if (auto chose = choose_list(value, false,
                                         "NVIDIA_VISIBLE_DEVICES=" + shorten(std::string(value)),
                                         host, chosen);
                !chose) {
                return chose.error();
            }
        }
    }
    if (!named) {
        return std::optional<std::string>();
    }
    if (chosen.all) {
        return std::optional<std::string>("all");
    }
    if (static_cast<size_t>(std::count(chosen.gpus.begin(), chosen.gpus.end(), true)) +
            chosen.uuids.size() >
        static_cast<size_t>(limit::kMaxListedDevices)) {
        return error(too_many("the spec"));
    }
    std::string list;
    for (size_t i = 0; i < host.gpus.size(); ++i) {
        if (chosen.gpus[i]) {
            list += (list.empty() ? "" : ",") +
                    (host.gpus[i].uuid.empty() ? host.gpus[i].pci : host.gpus[i].uuid);
        }
    }
    for (const std::string& uuid : chosen.uuids) {
        list += (list.empty() ? "" : ",") + uuid;
    }
    if (list.empty()) {
        return std::optional<std::string>("none");
    }
    return std::optional<std::string>(list);
}

bool edit_spec(JsonValue& spec, const EditOptions& options) {
    bool changed = false;
    JsonValue& mounts = spec.member("mounts");
    if (!mounts.is_array()) {
        mounts = JsonValue::make_array();
        changed = true;
    }
    const std::string group_dir = options.state_root + "/" + options.group;
    changed |=
        ensure_mount(mounts, kContainerLibrary, options.library, {"bind", "ro", "nosuid", "nodev"});
    changed |= ensure_mount(mounts, kPreloadTarget, options.state_root + "/" + kPreloadFile,
                            {"bind", "ro", "nosuid", "nodev", "noexec"});
    changed |=
        ensure_mount(mounts, group_dir, group_dir, {"bind", "rw", "nosuid", "nodev", "noexec"});
    if (options.daemon_socket) {
        const std::string socket = options.state_root + "/" + kDaemonSocket;
        changed |=
            ensure_mount(mounts, socket, socket, {"bind", "rw", "nosuid", "nodev", "noexec"});
    }

    JsonValue& process = spec.member("process");
    if (!process.is_object()) {
        process = JsonValue::make_object();
        changed = true;
    }
    JsonValue& env = process.member("env");
    if (!env.is_array()) {
        env = JsonValue::make_array();
        changed = true;
    }
    changed |= ensure_env(env, "GPU_LIMIT_STATE_DIR", options.state_root);
    changed |= ensure_env(env, "GPU_LIMIT_GROUP", options.group);
    if (options.daemon_socket) {
        // Where the socket is bound: the library's default is
        // /run/gpu-limit/daemon.sock, which another state root is not.
        changed |=
            ensure_env(env, "GPU_LIMIT_DAEMON_SOCKET", options.state_root + "/" + kDaemonSocket);
    }
    if (options.devices) {
        changed |= ensure_env(env, "GPU_LIMIT_DEVICES", *options.devices);
    } else {
        changed |= remove_env(env, "GPU_LIMIT_DEVICES");
    }

    JsonValue& annotations = spec.member("annotations");
    if (!annotations.is_object()) {
        annotations = JsonValue::make_object();
        changed = true;
    }
    JsonValue& mark = annotations.member(kGroupAnnotation);
    if (!mark.is_string() || mark.text() != options.group) {
        mark = JsonValue::make_string(options.group);
        changed = true;
    }
    return changed;
}

bool valid_group_name(std::string_view name) {
    if (name.empty() || name.size() > 64 || name == "." || name == "..") {
        return false;
    }
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               c == '.' || c == '_' || c == '-';
    });
}

std::optional<std::string> group_from_spec(const JsonValue& spec) {
    if (const JsonValue* linux_section = spec.find("linux"); linux_section != nullptr) {
        if (const std::string* path = string_member(*linux_section, "cgroupsPath")) {
            std::string_view last = *path;
            if (size_t cut = last.find_last_of("/:"); cut != std::string_view::npos) {
                last.remove_prefix(cut + 1);
            }
            for (std::string_view prefix : {"libpod-", "crio-", "docker-"}) {
                if (last.substr(0, prefix.size()) == prefix) {
                    last.remove_prefix(prefix.size());
                    break;
                }
            }
            if (last.size() > 6 && last.substr(last.size() - 6) == ".scope") {
                last.remove_suffix(6);
            }
            if (is_hex_id(last)) {
                return std::string(last);
            }
        }
    }
    // Not an annotation, CRI-O's or ours: the container's creator writes
    // those (podman run --annotation), and one naming another container's
    // group would hand it over.
    return std::nullopt;
}

Result<HostOwner> state_owner(const JsonValue& spec) {
    uint32_t uid = 0;
    uint32_t gid = 0;
    if (const JsonValue* process = spec.find("process"); process != nullptr) {
        if (const JsonValue* user = process->find("user"); user != nullptr && user->is_object()) {
            uid = as_u32(user->find("uid")).value_or(0);
            gid = as_u32(user->find("gid")).value_or(0);
        }
    }
    const JsonValue* linux_section = spec.find("linux");
    const JsonValue* uid_map =
        linux_section != nullptr ? linux_section->find("uidMappings") : nullptr;
    const JsonValue* gid_map =
        linux_section != nullptr ? linux_section->find("gidMappings") : nullptr;
    auto host_uid = map_id(uid_map, uid);
    auto host_gid = map_id(gid_map, gid);
    if (!host_uid || !host_gid) {
        return error(format("the container's user %u:%u is outside the spec's uidMappings or "
                            "gidMappings: no host owner for its state directory",
                            uid, gid));
    }
    return HostOwner{*host_uid, *host_gid};
}

namespace {

// The options of runc's and crun's command lines that take a value (every
// other option is a flag); "=VALUE" forms are one word.
bool global_takes_value(std::string_view option) {
    for (std::string_view name :
         {"root", "log", "log-format", "criu", "rootless", "cgroup-manager", "log-level"}) {
        if (option == std::string("--") + std::string(name) ||
            option == std::string("-") + std::string(name)) {
            return true;
        }
    }
    return false;
}

bool command_takes_value(std::string_view command, std::string_view option) {
    if (command == "create" || command == "run") {
        for (std::string_view name :
             {"--bundle", "-b", "--console-socket", "--pid-file", "--preserve-fds", "--config",
              "-f", "-bundle", "-console-socket", "-pid-file", "-preserve-fds"}) {
            if (option == name) {
                return true;
            }
        }
    }
    if (command == "exec") {
        for (std::string_view name :
             {"--console-socket", "--cwd", "--env", "-e", "--process", "-p", "--pid-file", "--user",
              "-u", "--additional-gids", "-g", "--apparmor", "--process-label", "--cap", "-c",
              "--preserve-fds", "--cgroup"}) {
            if (option == name) {
                return true;
            }
        }
    }
    return false;
}

} // namespace

Result<RuntimeCall> parse_runtime_args(const std::vector<std::string>& args) {
    RuntimeCall call;
    size_t at = 0;
    if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
        call.help = true;
        return call;
    }
    if (args.size() == 1 && (args[0] == "--version" || args[0] == "-v")) {
        call.version = true;
        call.forward = args;
        return call;
    }
    // Ours first: daemon.json's runtimeArgs come before the shim's words.
    while (at < args.size()) {
        std::string_view word = args[at];
        std::optional<std::string>* target = nullptr;
        std::string_view name;
        for (auto [option, slot] :
             {std::pair{std::string_view("--runtime-path"), &call.runtime_path},
              std::pair{std::string_view("--library"), &call.library},
              std::pair{std::string_view("--state-root"), &call.state_root},
              std::pair{std::string_view("--host-root"), &call.host_root}}) {
            if (word == option || word.substr(0, option.size() + 1) == std::string(option) + "=") {
                target = slot;
                name = option;
            }
        }
        if (target == nullptr) {
            break;
        }
        if (word.size() > name.size()) {
            *target = std::string(word.substr(name.size() + 1));
            ++at;
        } else if (at + 1 < args.size()) {
            *target = args[at + 1];
            at += 2;
        } else {
            return error(std::string(name) + " needs a value");
        }
        if ((*target)->empty()) {
            return error(std::string(name) + " needs a value");
        }
    }
    call.forward.assign(args.begin() + static_cast<std::ptrdiff_t>(at), args.end());

    size_t i = 0;
    const auto& words = call.forward;
    for (; i < words.size(); ++i) {
        const std::string& word = words[i];
        if (word == "--") {
            ++i;
            break;
        }
        if (word.empty() || word[0] != '-') {
            break;
        }
        if (word.find('=') == std::string::npos && global_takes_value(word)) {
            ++i;
        }
    }
    if (i >= words.size()) {
        return call; // no command: --version, --help of the runtime's own
    }
    call.command = words[i++];
    bool options_end = false;
    for (; i < words.size(); ++i) {
        const std::string& word = words[i];
        if (!options_end && word == "--") {
            options_end = true;
            continue;
        }
        if (options_end || word.empty() || word[0] != '-') {
            call.id = word;
            break;
        }
        std::string option = word;
        std::optional<std::string> value;
        if (size_t equals = word.find('='); equals != std::string::npos) {
            option = word.substr(0, equals);
            value = word.substr(equals + 1);
        } else if (command_takes_value(call.command, word)) {
            if (i + 1 >= words.size()) {
                return error(quote(call.command) + "'s option " + quote(word) + " needs a value");
            }
            value = words[++i];
        }
        if (call.command == "create" || call.command == "run") {
            if (option == "--bundle" || option == "-b" || option == "-bundle") {
                call.bundle = value;
            } else if (option == "--config" || option == "-f") {
                call.config = value;
            }
        }
    }
    return call;
}

Result<std::string> group_from_state(std::string_view text) {
    auto parsed = parse_json(text);
    if (!parsed) {
        return error("the OCI state is not valid: " + parsed.error().message);
    }
    if (!parsed->is_object()) {
        return error("the OCI state is not a JSON object");
    }
    // The id alone: podman hands poststop hooks the annotations the
    // container's creator wrote, which must not point the cleanup at
    // another container's directory.
    const std::string* id = string_member(*parsed, "id");
    if (id == nullptr) {
        return error("the OCI state has no id");
    }
    if (!valid_group_name(*id)) {
        return error("the container id " + quote(*id) +
                     " is not a group name ([A-Za-z0-9._-], 1 to 64 characters)");
    }
    return *id;
}

} // namespace gpuinit::limit::oci
