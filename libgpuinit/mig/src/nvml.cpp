// MIG names from NVML, through libgpuinit's NVML module (gpuinit/nvml).
#include "gpuinit/mig/nvml.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/nvml/library.hpp"

#include <cstring>

namespace gpuinit {

std::string profile_from_nvml_name(std::string_view name) {
    // The last word, when the word before it is "MIG".
    std::vector<std::string_view> words = split_words(name);
    if (words.size() < 2 || words[words.size() - 2] != "MIG" || !valid_mig_profile(words.back())) {
        return {};
    }
    return std::string(words.back());
}

namespace {

// More GPUs or MIG devices than this is not a machine NVML describes.
constexpr unsigned kMaxDevices = 1024;
constexpr unsigned kMaxMigDevices = 128;
// The nvidia-smi route, for every failure to use NVML.
constexpr const char* kUseNvidiaSmi =
    "; give the names as nvidia-smi output (--nvidia-smi-output DIR)";

// A string NVML wrote into `buffer`: up to the first NUL, and never past it.
std::string fixed_string(const char* buffer, size_t size) {
    return std::string(buffer, ::strnlen(buffer, size));
}

} // namespace

bool nvml_supported() {
    return nvml::Library::kSupported;
}

Result<MigNames> mig_names_from_nvml(Diagnostics& diagnostics, const std::string& library) {
    if constexpr (!nvml::Library::kSupported) {
        (void)diagnostics;
        return error("this static build does not load " + library +
                     " (NVML): give the names as nvidia-smi output (--nvidia-smi-output DIR), "
                     "or install the NVML helper (gpuinit(8))");
    }
    auto opened = nvml::Library::open(library);
    if (!opened) {
        return error(opened.error().message + kUseNvidiaSmi);
    }
    const nvml::Library& loaded = **opened;
    const nvml::Functions& api = loaded.api();
    if (std::string lacking =
            loaded.missing({"nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
                            "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetMigMode",
                            "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex",
                            "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId"});
        !lacking.empty()) {
        return error(library + " lacks " + lacking +
                     ": a driver older than R470 (MIG UUIDs in the MIG-<uuid> form need R470 "
                     "or later)");
    }
    auto what = [&](nvmlReturn_t code) { return loaded.describe(code); };

    MigNames names("NVML (" + library + ")");
    unsigned count = 0;
    if (nvmlReturn_t code = api.nvmlDeviceGetCount_v2(&count); code != NVML_SUCCESS) {
        return error("nvmlDeviceGetCount failed: " + what(code));
    }
    if (count > kMaxDevices) {
        return error(format("NVML reports %u GPUs; that is not believable", count));
    }
    for (unsigned index = 0; index < count; ++index) {
        std::string gpu_label = format("NVML GPU %u", index);
        nvmlDevice_t device = nullptr;
        char buffer[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
        if (nvmlReturn_t code = api.nvmlDeviceGetHandleByIndex_v2(index, &device);
            code != NVML_SUCCESS) {
            diagnostics.warning(gpu_label + ": no handle: " + what(code) + "; left out");
            continue;
        }
        if (nvmlReturn_t code = api.nvmlDeviceGetUUID(device, buffer, sizeof buffer);
            code != NVML_SUCCESS) {
            diagnostics.warning(gpu_label + ": no UUID: " + what(code) + "; left out");
            continue;
        }
        std::string gpu_uuid = fixed_string(buffer, sizeof buffer);
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
        std::string gpu_name;
        if (api.nvmlDeviceGetName(device, name, sizeof name) == NVML_SUCCESS) {
            gpu_name = fixed_string(name, sizeof name);
        }
        if (Status added = names.add_gpu(gpu_uuid, {index, std::nullopt, gpu_name}); !added) {
            diagnostics.warning(gpu_label + ": " + added.error().message + "; left out");
            continue;
        }
        unsigned current = 0;
        unsigned pending = 0;
        nvmlReturn_t mode = api.nvmlDeviceGetMigMode(device, &current, &pending);
        if (mode == NVML_ERROR_NOT_SUPPORTED ||
            (mode == NVML_SUCCESS && current != NVML_DEVICE_MIG_ENABLE)) {
            continue; // no MIG on this GPU
        }
        if (mode != NVML_SUCCESS) {
            diagnostics.warning(gpu_label + ": no MIG mode: " + what(mode) + "; left out");
            continue;
        }
        unsigned max = 0;
        if (nvmlReturn_t code = api.nvmlDeviceGetMaxMigDeviceCount(device, &max);
            code != NVML_SUCCESS) {
            diagnostics.warning(gpu_label + ": no MIG device count: " + what(code) + "; left out");
            continue;
        }
        // Every index up to the maximum: they may have gaps (a destroyed
        // instance), so NOT_FOUND is not the end.
        for (unsigned m = 0; m < max && m < kMaxMigDevices; ++m) {
            std::string label = gpu_label + format(" MIG device %u", m);
            nvmlDevice_t mig = nullptr;
            nvmlReturn_t code = api.nvmlDeviceGetMigDeviceHandleByIndex(device, m, &mig);
            if (code == NVML_ERROR_NOT_FOUND) {
                continue;
            }
            unsigned gi = 0;
            unsigned ci = 0;
            char mig_uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
            char mig_name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
            if (code != NVML_SUCCESS ||
                (code = api.nvmlDeviceGetGpuInstanceId(mig, &gi)) != NVML_SUCCESS ||
                (code = api.nvmlDeviceGetComputeInstanceId(mig, &ci)) != NVML_SUCCESS) {
                diagnostics.warning(label + ": " + what(code) + "; left out");
                continue;
            }
            if ((code = api.nvmlDeviceGetUUID(mig, mig_uuid, sizeof mig_uuid)) == NVML_SUCCESS) {
                if (Status added =
                        names.add_uuid(gpu_uuid, gi, ci, fixed_string(mig_uuid, sizeof mig_uuid));
                    !added) {
                    diagnostics.warning(label + ": " + added.error().message);
                }
            } else {
                diagnostics.warning(label + ": no UUID: " + what(code));
            }
            if (api.nvmlDeviceGetName(mig, mig_name, sizeof mig_name) == NVML_SUCCESS) {
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

} // namespace gpuinit
