// NVML, dlopened. The few types and constants are declared here from NVML's
// documented API (nvml.h, NVML API reference), so that nvml.h is not needed
// at build time. Only the entry points below are resolved.
#include "gpuinit/mig/nvml.hpp"

#include "gpuinit/base/text.hpp"

#include <cstring>
#include <memory>

#if GPUINIT_DLOPEN_NVML
#include <dlfcn.h>
#endif

namespace gpuinit {

std::string profile_from_nvml_name(std::string_view name) {
    // The last word, when the word before it is "MIG".
    std::vector<std::string_view> words = split_words(name);
    if (words.size() < 2 || words[words.size() - 2] != "MIG" || !valid_mig_profile(words.back())) {
        return {};
    }
    return std::string(words.back());
}

#if !GPUINIT_DLOPEN_NVML

bool nvml_supported() {
    return false;
}

Result<MigNames> mig_names_from_nvml(Diagnostics& /*diagnostics*/, const std::string& library) {
    return error("this static build does not load " + library +
                 " (NVML): give the names as nvidia-smi output (--nvidia-smi-output DIR), or use "
                 "the dynamic build");
}

#else

namespace {

// From nvml.h.
using nvmlReturn_t = int;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr unsigned NVML_DEVICE_MIG_ENABLE = 1;
constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
// More GPUs or MIG devices than this is not a machine NVML describes.
constexpr unsigned kMaxDevices = 1024;
constexpr unsigned kMaxMigDevices = 128;

struct Api {
    nvmlReturn_t (*init)();
    nvmlReturn_t (*shutdown)();
    const char* (*error_string)(nvmlReturn_t);
    nvmlReturn_t (*count)(unsigned*);
    nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t*);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned);
    nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned);
    nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned*, unsigned*);
    nvmlReturn_t (*max_mig)(nvmlDevice_t, unsigned*);
    nvmlReturn_t (*mig_by_index)(nvmlDevice_t, unsigned, nvmlDevice_t*);
    nvmlReturn_t (*gi_id)(nvmlDevice_t, unsigned*);
    nvmlReturn_t (*ci_id)(nvmlDevice_t, unsigned*);
};

struct DlClose {
    void operator()(void* handle) const { ::dlclose(handle); }
};
using Library = std::unique_ptr<void, DlClose>;

// nvmlShutdown once nvmlInit succeeded, whatever happens after.
class Session {
  public:
    explicit Session(const Api& api) : api_(api) {}
    ~Session() { api_.shutdown(); }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

  private:
    const Api& api_;
};

template <typename F>
bool resolve(void* handle, const char* symbol, F& function, std::string& missing) {
    // dlsym gives a data pointer; POSIX guarantees it converts to a function.
    void* address = ::dlsym(handle, symbol);
    if (address == nullptr) {
        missing += (missing.empty() ? "" : ", ") + std::string(symbol);
        return false;
    }
    std::memcpy(&function, &address, sizeof function);
    return true;
}

std::string what(const Api& api, nvmlReturn_t code) {
    const char* text = api.error_string != nullptr ? api.error_string(code) : nullptr;
    return text != nullptr ? quote(text) : format("NVML error %d", code);
}

// A string NVML wrote into `buffer`: up to the first NUL, and never past it.
std::string fixed_string(const char* buffer, size_t size) {
    return std::string(buffer, ::strnlen(buffer, size));
}

} // namespace

bool nvml_supported() {
    return true;
}

Result<MigNames> mig_names_from_nvml(Diagnostics& diagnostics, const std::string& library) {
    ::dlerror();
    Library handle(::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL));
    if (!handle) {
        const char* why = ::dlerror();
        return error("cannot load " + library + " (NVML, shipped with the driver): " +
                     printable(why != nullptr ? why : "unknown error") +
                     "; give the names as nvidia-smi output (--nvidia-smi-output DIR)");
    }
    Api api{};
    std::string missing;
    bool all = resolve(handle.get(), "nvmlInit_v2", api.init, missing);
    all = resolve(handle.get(), "nvmlShutdown", api.shutdown, missing) && all;
    all = resolve(handle.get(), "nvmlDeviceGetCount_v2", api.count, missing) && all;
    all = resolve(handle.get(), "nvmlDeviceGetHandleByIndex_v2", api.by_index, missing) && all;
    all = resolve(handle.get(), "nvmlDeviceGetUUID", api.uuid, missing) && all;
    all = resolve(handle.get(), "nvmlDeviceGetName", api.name, missing) && all;
    all = resolve(handle.get(), "nvmlDeviceGetMigMode", api.mig_mode, missing) && all;
    all = resolve(handle.get(), "nvmlDeviceGetMaxMigDeviceCount", api.max_mig, missing) && all;
    all = resolve(handle.get(), "nvmlDeviceGetMigDeviceHandleByIndex", api.mig_by_index, missing) &&
          all;
    all = resolve(handle.get(), "nvmlDeviceGetGpuInstanceId", api.gi_id, missing) && all;
    all = resolve(handle.get(), "nvmlDeviceGetComputeInstanceId", api.ci_id, missing) && all;
    std::string ignored;
    resolve(handle.get(), "nvmlErrorString", api.error_string, ignored); // messages only
    if (!all) {
        return error(library + " lacks " + missing +
                     ": a driver older than R470 (MIG UUIDs in the MIG-<uuid> form need R470 "
                     "or later)");
    }
    if (nvmlReturn_t code = api.init(); code != NVML_SUCCESS) {
        return error("nvmlInit failed: " + what(api, code) +
                     "; is the driver loaded? Or give nvidia-smi output (--nvidia-smi-output "
                     "DIR)");
    }
    Session session(api);

    MigNames names("NVML (" + library + ")");
    unsigned count = 0;
    if (nvmlReturn_t code = api.count(&count); code != NVML_SUCCESS) {
        return error("nvmlDeviceGetCount failed: " + what(api, code));
    }
    if (count > kMaxDevices) {
        return error(format("NVML reports %u GPUs; that is not believable", count));
    }
    for (unsigned index = 0; index < count; ++index) {
        std::string gpu_label = format("NVML GPU %u", index);
        nvmlDevice_t device = nullptr;
        char buffer[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
        if (nvmlReturn_t code = api.by_index(index, &device); code != NVML_SUCCESS) {
            diagnostics.warning(gpu_label + ": no handle: " + what(api, code) + "; left out");
            continue;
        }
        if (nvmlReturn_t code = api.uuid(device, buffer, sizeof buffer); code != NVML_SUCCESS) {
            diagnostics.warning(gpu_label + ": no UUID: " + what(api, code) + "; left out");
            continue;
        }
        std::string gpu_uuid = fixed_string(buffer, sizeof buffer);
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
        std::string gpu_name;
        if (api.name(device, name, sizeof name) == NVML_SUCCESS) {
            gpu_name = fixed_string(name, sizeof name);
        }
        if (Status added = names.add_gpu(gpu_uuid, {index, std::nullopt, gpu_name}); !added) {
            diagnostics.warning(gpu_label + ": " + added.error().message + "; left out");
            continue;
        }
        unsigned current = 0;
        unsigned pending = 0;
        nvmlReturn_t mode = api.mig_mode(device, &current, &pending);
        if (mode == NVML_ERROR_NOT_SUPPORTED ||
            (mode == NVML_SUCCESS && current != NVML_DEVICE_MIG_ENABLE)) {
            continue; // no MIG on this GPU
        }
        if (mode != NVML_SUCCESS) {
            diagnostics.warning(gpu_label + ": no MIG mode: " + what(api, mode) + "; left out");
            continue;
        }
        unsigned max = 0;
        if (nvmlReturn_t code = api.max_mig(device, &max); code != NVML_SUCCESS) {
            diagnostics.warning(gpu_label + ": no MIG device count: " + what(api, code) +
                                "; left out");
            continue;
        }
        // Every index up to the maximum: they may have gaps (a destroyed
        // instance), so NOT_FOUND is not the end.
        for (unsigned m = 0; m < max && m < kMaxMigDevices; ++m) {
            std::string label = gpu_label + format(" MIG device %u", m);
            nvmlDevice_t mig = nullptr;
            nvmlReturn_t code = api.mig_by_index(device, m, &mig);
            if (code == NVML_ERROR_NOT_FOUND) {
                continue;
            }
            unsigned gi = 0;
            unsigned ci = 0;
            char mig_uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
            char mig_name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
            if (code != NVML_SUCCESS || (code = api.gi_id(mig, &gi)) != NVML_SUCCESS ||
                (code = api.ci_id(mig, &ci)) != NVML_SUCCESS) {
                diagnostics.warning(label + ": " + what(api, code) + "; left out");
                continue;
            }
            if ((code = api.uuid(mig, mig_uuid, sizeof mig_uuid)) == NVML_SUCCESS) {
                if (Status added =
                        names.add_uuid(gpu_uuid, gi, ci, fixed_string(mig_uuid, sizeof mig_uuid));
                    !added) {
                    diagnostics.warning(label + ": " + added.error().message);
                }
            } else {
                diagnostics.warning(label + ": no UUID: " + what(api, code));
            }
            if (api.name(mig, mig_name, sizeof mig_name) == NVML_SUCCESS) {
                std::string full = fixed_string(mig_name, sizeof mig_name);
                std::string profile = profile_from_nvml_name(full);
                if (profile.empty()) {
                    diagnostics.warning(label + ": its name " + quote(full) +
                                        " does not end in \"MIG <profile>\"; profile unknown");
                } else if (Status added = names.add_profile(gpu_uuid, gi, ci, profile); !added) {
                    diagnostics.warning(label + ": " + added.error().message);
                }
            }
        }
    }
    return names;
}

#endif

} // namespace gpuinit
