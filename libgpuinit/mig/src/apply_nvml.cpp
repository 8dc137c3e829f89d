// The MigControl over NVML. Every call and return code is nvml.h's
// (Debian's libnvidia-ml-dev 11.8, gpuinit/nvml/nvml_h.hpp); the profile
// indices past that header's NVML_GPU_INSTANCE_PROFILE_COUNT (8) are those
// of NVIDIA/go-nvml pkg/nvml/nvml.h at 2f9e261f (NVML API 13), and the
// names derived from them are NVIDIA/go-nvlib's (pkg/nvlib/device/
// mig_profile.go at 3c161560): see apply_nvml.hpp.
#include "gpuinit/mig/apply_nvml.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/pci.hpp"
#include "gpuinit/nvml/library.hpp"
#include "gpuinit/nvml/process_list.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gpuinit::mig {

namespace {

// NVML_GPU_INSTANCE_PROFILE_* indices, by go-nvml's nvml.h: 0-7 are in
// 11.8's too, 8 and on came later.
constexpr unsigned kGiProfile1SliceRev1 = 0x7;
constexpr unsigned kGiProfile2SliceRev1 = 0x8;
constexpr unsigned kGiProfile1SliceGfx = 0x0A;
constexpr unsigned kGiProfile2SliceGfx = 0x0B;
constexpr unsigned kGiProfile4SliceGfx = 0x0C;
constexpr unsigned kGiProfile1SliceNoMe = 0x0D;
constexpr unsigned kGiProfile2SliceNoMe = 0x0E;
constexpr unsigned kGiProfile1SliceAllMe = 0x0F;
constexpr unsigned kGiProfile2SliceAllMe = 0x10;
// Every index a driver may answer for (go-nvml's NVML_GPU_INSTANCE_PROFILE_COUNT).
constexpr unsigned kGiProfileIndices = 0x12;
// NVML_COMPUTE_INSTANCE_PROFILE_* (1_SLICE_REV1 7 and 7_SLICE_NVL 8 came
// after 11.8), by go-nvml's NVML_COMPUTE_INSTANCE_PROFILE_COUNT.
constexpr unsigned kCiProfileIndices = 0x9;

} // namespace

unsigned nvml_gi_profile_slices(unsigned profile) {
    // go-nvlib's NewMigProfile, giSlices by index.
    static constexpr unsigned kSlices[kGiProfileIndices] = {1, 2, 3, 4, 7, 8, 6, 1, 2,
                                                            1, 1, 2, 4, 1, 2, 1, 2, 0};
    return profile < kGiProfileIndices ? kSlices[profile] : 0;
}

unsigned mig_memory_gb(uint64_t device_bytes, uint64_t profile_mb) {
    constexpr uint64_t kMiB = uint64_t{1} << 20;
    constexpr uint64_t kGiB = uint64_t{1} << 30;
    if (device_bytes == 0 || profile_mb > (uint64_t{1} << 40)) {
        return 0;
    }
    // go-nvlib's getMigMemorySizeGB in integers: the share in eighths,
    // rounded up, times the whole GiB, rounded half up.
    const uint64_t eighths = (profile_mb * kMiB * 8 + device_bytes - 1) / device_bytes;
    const uint64_t total_gb = (device_bytes + kGiB - 1) / kGiB;
    return static_cast<unsigned>((eighths * total_gb + 4) / 8);
}

std::optional<std::string> nvml_gi_profile_name(unsigned profile, uint64_t profile_mb,
                                                uint64_t device_bytes) {
    const unsigned slices = nvml_gi_profile_slices(profile);
    const unsigned gb = mig_memory_gb(device_bytes, profile_mb);
    if (slices == 0 || gb == 0) {
        return std::nullopt;
    }
    std::string suffix;
    switch (profile) {
    case kGiProfile1SliceRev1:
    case kGiProfile2SliceRev1:
        suffix = "+me";
        break;
    case kGiProfile1SliceAllMe:
    case kGiProfile2SliceAllMe:
        suffix = "+me.all";
        break;
    case kGiProfile1SliceGfx:
    case kGiProfile2SliceGfx:
    case kGiProfile4SliceGfx:
        suffix = "+gfx";
        break;
    case kGiProfile1SliceNoMe:
    case kGiProfile2SliceNoMe:
        suffix = "-me";
        break;
    default:
        break;
    }
    return format("%ug.%ugb", slices, gb) + suffix;
}

std::optional<std::string> nvml_ci_profile_name(unsigned ci_profile, const std::string& gi_name,
                                                unsigned gi_slices) {
    // go-nvlib's ciSlices by index.
    static constexpr unsigned kSlices[kCiProfileIndices] = {1, 2, 3, 4, 7, 8, 6, 1, 7};
    if (ci_profile >= kCiProfileIndices || gi_slices == 0 || kSlices[ci_profile] > gi_slices ||
        gi_name.empty()) {
        return std::nullopt;
    }
    if (kSlices[ci_profile] == gi_slices) {
        return gi_name;
    }
    return format("%uc.", kSlices[ci_profile]) + gi_name;
}

#if !GPUINIT_DLOPEN_NVML

Result<std::unique_ptr<MigControl>> open_nvml_mig_control(Diagnostics& diagnostics,
                                                          const std::string& library,
                                                          MigControl* reset_through) {
    (void)diagnostics;
    (void)reset_through;
    return error(
        "this static build does not load " + library +
            " (NVML): gpu-mig apply uses nvidia-smi; the NVML helper (gpuinit(8)) uses NVML",
        ENOTSUP);
}

#else

namespace {

// More GPUs, instances or placements than this is not a machine NVML describes.
constexpr unsigned kMaxDevices = 1024;
constexpr unsigned kMaxInstances = 64;

constexpr const char* kNeeded[] = {
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceSetMigMode",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
    "nvmlDeviceGetGpuInstances",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlDeviceCreateGpuInstance",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceGetInfo",
    "nvmlGpuInstanceDestroy",
    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    "nvmlGpuInstanceGetComputeInstances",
    "nvmlGpuInstanceGetComputeInstanceById",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlComputeInstanceGetInfo_v2",
    "nvmlComputeInstanceDestroy",
};

std::string fixed_string(const char* buffer, size_t size) {
    return std::string(buffer, ::strnlen(buffer, size));
}

// The errno closest to an NVML failure, for the caller's classification.
int errno_of(nvmlReturn_t code) {
    switch (code) {
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
        return ENOSPC;
    case NVML_ERROR_IN_USE:
        return EBUSY;
    case NVML_ERROR_NOT_SUPPORTED:
        return ENOTSUP;
    case NVML_ERROR_NO_PERMISSION:
        return EPERM;
    case NVML_ERROR_INVALID_ARGUMENT:
        return EINVAL;
    case NVML_ERROR_NOT_FOUND:
        return ENOENT;
    default:
        return EIO;
    }
}

// A GPU-instance profile of one GPU, by NVML index.
struct GiProfile {
    unsigned index = 0;
    nvmlGpuInstanceProfileInfo_t info{};
    std::string name; // empty: NVIDIA's naming does not cover it
    std::vector<nvmlGpuInstancePlacement_t> placements;
};

class NvmlMigControl final : public MigControl {
  public:
    NvmlMigControl(std::unique_ptr<nvml::Library> library, Diagnostics& diagnostics,
                   MigControl* reset_through)
        : library_(std::move(library)), api_(library_->api()), diagnostics_(diagnostics),
          reset_through_(reset_through), lister_(api_),
          graphics_(api_, nvml::pid_alive, nvml::ProcessKind::Graphics) {}

    Result<std::vector<MigGpuState>> gpus() override;
    Status destroy_ci(const GpuIdentity& gpu, unsigned gi, unsigned ci) override;
    Status destroy_gi(const GpuIdentity& gpu, unsigned gi) override;
    Status set_mig_mode(const GpuIdentity& gpu, bool on) override;
    Status reset(const GpuIdentity& gpu) override;
    Result<unsigned> create_gi(const GpuIdentity& gpu, std::string_view profile,
                               std::optional<unsigned> start) override;
    Result<unsigned> create_ci(const GpuIdentity& gpu, unsigned gi,
                               std::string_view profile) override;

  private:
    // "GPU 0 (0000:17:00.0): nvmlX failed: 'Insufficient Resources'".
    Diagnostic failed(const GpuIdentity& gpu, const std::string& what, nvmlReturn_t code) const {
        Diagnostic out =
            error(gpu_subject(gpu) + ": " + what + " failed: " + library_->describe(code),
                  errno_of(code));
        out.where.device = gpu_subject(gpu);
        return out;
    }
    Result<GpuIdentity> identity(nvmlDevice_t device, unsigned index) const;
    Result<nvmlDevice_t> device_of(const GpuIdentity& gpu) const;
    Result<std::vector<GiProfile>> profiles(const GpuIdentity& gpu, nvmlDevice_t device) const;
    Result<nvmlGpuInstance_t> gi_of(const GpuIdentity& gpu, nvmlDevice_t device, unsigned id) const;
    // The GPU's instances, into `state`.
    Status read_instances(nvmlDevice_t device, const std::vector<GiProfile>& known,
                          MigGpuState& state) const;

    std::unique_ptr<nvml::Library> library_;
    const nvml::Functions& api_;
    Diagnostics& diagnostics_;
    MigControl* reset_through_;
    nvml::ProcessLister lister_;
    nvml::ProcessLister graphics_;
};

Result<GpuIdentity> NvmlMigControl::identity(nvmlDevice_t device, unsigned index) const {
    GpuIdentity gpu;
    const std::string label = format("NVML GPU %u", index);
    if (nvmlReturn_t code = api_.nvmlDeviceGetMinorNumber(device, &gpu.minor);
        code != NVML_SUCCESS) {
        return error(label + ": nvmlDeviceGetMinorNumber failed: " + library_->describe(code),
                     errno_of(code));
    }
    nvmlPciInfo_t pci{};
    if (nvmlReturn_t code = api_.nvmlDeviceGetPciInfo_v3(device, &pci); code != NVML_SUCCESS) {
        return error(label + ": nvmlDeviceGetPciInfo failed: " + library_->describe(code),
                     errno_of(code));
    }
    // busId is "00000000:17:00.0": an 8-digit domain, upper case.
    std::string bus = fixed_string(pci.busId, sizeof pci.busId);
    auto bdf = normalize_bdf(bus);
    if (!bdf) {
        return error(label + ": NVML's PCI address " + quote(bus, 40) + " is not one", EIO);
    }
    gpu.bdf = *bdf;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (nvmlReturn_t code = api_.nvmlDeviceGetUUID(device, uuid, sizeof uuid);
        code != NVML_SUCCESS) {
        return error(label + ": nvmlDeviceGetUUID failed: " + library_->describe(code),
                     errno_of(code));
    }
    gpu.uuid = fixed_string(uuid, sizeof uuid);
    if (!valid_gpu_uuid(gpu.uuid)) {
        return error(label + ": NVML's UUID " + quote(gpu.uuid, 80) + " is not a GPU UUID", EIO);
    }
    return gpu;
}

Result<nvmlDevice_t> NvmlMigControl::device_of(const GpuIdentity& gpu) const {
    unsigned count = 0;
    if (nvmlReturn_t code = api_.nvmlDeviceGetCount_v2(&count); code != NVML_SUCCESS) {
        return failed(gpu, "nvmlDeviceGetCount", code);
    }
    for (unsigned index = 0; index < count && index < kMaxDevices; ++index) {
        nvmlDevice_t device = nullptr;
        if (api_.nvmlDeviceGetHandleByIndex_v2(index, &device) != NVML_SUCCESS) {
            continue;
        }
        auto found = identity(device, index);
        if (!found) {
            continue;
        }
        const bool same = !gpu.uuid.empty()  ? same_uuid(found->uuid, gpu.uuid)
                          : !gpu.bdf.empty() ? found->bdf == gpu.bdf
                                             : found->minor == gpu.minor;
        if (same) {
            return device;
        }
    }
    return error(gpu_subject(gpu) + ": NVML does not list this GPU (" +
                     quote(gpu.uuid.empty() ? gpu.bdf : gpu.uuid, 80) +
                     "); nvidia-smi -L lists the GPUs the driver has",
                 ENODEV);
}

Result<std::vector<GiProfile>> NvmlMigControl::profiles(const GpuIdentity& gpu,
                                                        nvmlDevice_t device) const {
    nvmlMemory_t memory{};
    if (nvmlReturn_t code = api_.nvmlDeviceGetMemoryInfo(device, &memory); code != NVML_SUCCESS) {
        return failed(gpu, "nvmlDeviceGetMemoryInfo (which the profile names need)", code);
    }
    std::vector<GiProfile> out;
    for (unsigned index = 0; index < kGiProfileIndices; ++index) {
        GiProfile profile;
        profile.index = index;
        nvmlReturn_t code = api_.nvmlDeviceGetGpuInstanceProfileInfo(device, index, &profile.info);
        // What go-nvlib skips too: a profile this GPU lacks, or an index
        // this driver does not know.
        if (code == NVML_ERROR_NOT_SUPPORTED || code == NVML_ERROR_INVALID_ARGUMENT) {
            continue;
        }
        if (code != NVML_SUCCESS) {
            return failed(gpu, format("nvmlDeviceGetGpuInstanceProfileInfo(%u)", index), code);
        }
        profile.name =
            nvml_gi_profile_name(index, profile.info.memorySizeMB, memory.total).value_or("");
        if (profile.info.instanceCount > kMaxInstances) {
            return error(gpu_subject(gpu) +
                             format(": NVML says profile id %u has %u instances; not believable",
                                    profile.info.id, profile.info.instanceCount),
                         EIO);
        }
        // The count first, with no array (the documented size query, as
        // go-nvml's GetGpuInstancePossiblePlacements asks it).
        nvmlGpuInstancePlacement_t placements[kMaxInstances] = {};
        unsigned count = 0;
        code = api_.nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profile.info.id, nullptr,
                                                                  &count);
        if (code == NVML_SUCCESS && count > kMaxInstances) {
            return error(gpu_subject(gpu) +
                             format(": NVML says profile id %u has %u placements; not believable",
                                    profile.info.id, count),
                         EIO);
        }
        if (code == NVML_SUCCESS && count > 0) {
            code = api_.nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profile.info.id,
                                                                      placements, &count);
        }
        if (code == NVML_SUCCESS) {
            profile.placements.assign(placements, placements + std::min(count, kMaxInstances));
        } else if (code != NVML_ERROR_NOT_SUPPORTED) {
            return failed(gpu,
                          format("nvmlDeviceGetGpuInstancePossiblePlacements(%u)", profile.info.id),
                          code);
        }
        out.push_back(std::move(profile));
    }
    return out;
}

Result<nvmlGpuInstance_t> NvmlMigControl::gi_of(const GpuIdentity& gpu, nvmlDevice_t device,
                                                unsigned id) const {
    nvmlGpuInstance_t instance = nullptr;
    if (nvmlReturn_t code = api_.nvmlDeviceGetGpuInstanceById(device, id, &instance);
        code != NVML_SUCCESS) {
        return failed(gpu, format("nvmlDeviceGetGpuInstanceById(%u)", id), code);
    }
    return instance;
}

Status NvmlMigControl::read_instances(nvmlDevice_t device, const std::vector<GiProfile>& known,
                                      MigGpuState& state) const {
    for (const GiProfile& profile : known) {
        if (!profile.name.empty()) {
            GiPlacements placements;
            placements.profile = profile.name;
            for (const nvmlGpuInstancePlacement_t& placement : profile.placements) {
                placements.size = placement.size;
                placements.starts.push_back(placement.start);
            }
            state.placements.push_back(std::move(placements));
        }
        // An array for every instance the profile can have (checked
        // against kMaxInstances above), its size in `count`.
        nvmlGpuInstance_t instances[kMaxInstances] = {};
        unsigned count = profile.info.instanceCount;
        nvmlReturn_t code =
            api_.nvmlDeviceGetGpuInstances(device, profile.info.id, instances, &count);
        if (code != NVML_SUCCESS) {
            return failed(state.gpu, format("nvmlDeviceGetGpuInstances(%u)", profile.info.id),
                          code);
        }
        for (unsigned i = 0; i < count && i < kMaxInstances; ++i) {
            nvmlGpuInstanceInfo_t info{};
            if ((code = api_.nvmlGpuInstanceGetInfo(instances[i], &info)) != NVML_SUCCESS) {
                return failed(state.gpu, "nvmlGpuInstanceGetInfo", code);
            }
            GiState gi;
            gi.id = info.id;
            // A profile NVIDIA's naming does not cover gets a name no layout
            // has, so that apply destroys its instances rather than missing
            // them.
            gi.profile =
                !profile.name.empty() ? profile.name : format("profile-id-%u", profile.info.id);
            const unsigned gi_slices = nvml_gi_profile_slices(profile.index);
            for (unsigned index = 0; index < kCiProfileIndices; ++index) {
                nvmlComputeInstanceProfileInfo_t ci_profile{};
                code = api_.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    instances[i], index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_profile);
                if (code == NVML_ERROR_NOT_SUPPORTED || code == NVML_ERROR_INVALID_ARGUMENT) {
                    continue;
                }
                if (code != NVML_SUCCESS) {
                    return failed(state.gpu,
                                  format("nvmlGpuInstanceGetComputeInstanceProfileInfo(GI %u, %u)",
                                         gi.id, index),
                                  code);
                }
                if (ci_profile.instanceCount > kMaxInstances) {
                    return error(gpu_subject(state.gpu) +
                                     format(": NVML says CI profile id %u has %u instances; not "
                                            "believable",
                                            ci_profile.id, ci_profile.instanceCount),
                                 EIO);
                }
                nvmlComputeInstance_t cis[kMaxInstances] = {};
                unsigned ci_count = ci_profile.instanceCount;
                code = api_.nvmlGpuInstanceGetComputeInstances(instances[i], ci_profile.id, cis,
                                                               &ci_count);
                if (code != NVML_SUCCESS) {
                    return failed(state.gpu,
                                  format("nvmlGpuInstanceGetComputeInstances(GI %u, %u)", gi.id,
                                         ci_profile.id),
                                  code);
                }
                for (unsigned c = 0; c < ci_count && c < kMaxInstances; ++c) {
                    nvmlComputeInstanceInfo_t ci_info{};
                    if ((code = api_.nvmlComputeInstanceGetInfo_v2(cis[c], &ci_info)) !=
                        NVML_SUCCESS) {
                        return failed(state.gpu, "nvmlComputeInstanceGetInfo", code);
                    }
                    // Two indices can give one profile (1_SLICE_REV1): once.
                    if (std::any_of(gi.cis.begin(), gi.cis.end(),
                                    [&](const CiState& ci) { return ci.id == ci_info.id; })) {
                        continue;
                    }
                    CiState ci;
                    ci.id = ci_info.id;
                    ci.profile = nvml_ci_profile_name(index, profile.name, gi_slices)
                                     .value_or(format("profile-id-%u", ci_profile.id));
                    gi.cis.push_back(std::move(ci));
                }
            }
            std::sort(gi.cis.begin(), gi.cis.end(),
                      [](const CiState& a, const CiState& b) { return a.id < b.id; });
            state.gis.push_back(std::move(gi));
        }
    }
    std::sort(state.gis.begin(), state.gis.end(),
              [](const GiState& a, const GiState& b) { return a.id < b.id; });
    return {};
}

Result<std::vector<MigGpuState>> NvmlMigControl::gpus() {
    unsigned count = 0;
    if (nvmlReturn_t code = api_.nvmlDeviceGetCount_v2(&count); code != NVML_SUCCESS) {
        return error("nvmlDeviceGetCount failed: " + library_->describe(code), errno_of(code));
    }
    if (count > kMaxDevices) {
        return error(format("NVML reports %u GPUs; that is not believable", count), EIO);
    }
    std::vector<MigGpuState> out;
    for (unsigned index = 0; index < count; ++index) {
        nvmlDevice_t device = nullptr;
        if (nvmlReturn_t code = api_.nvmlDeviceGetHandleByIndex_v2(index, &device);
            code != NVML_SUCCESS) {
            diagnostics_.warning(format("NVML GPU %u: no handle: ", index) +
                                 library_->describe(code) + "; left as it is");
            continue;
        }
        auto gpu = identity(device, index);
        if (!gpu) {
            diagnostics_.warning(gpu.error().message + "; left as it is");
            continue;
        }
        MigGpuState state;
        state.gpu = *gpu;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
        if (api_.nvmlDeviceGetName != nullptr &&
            api_.nvmlDeviceGetName(device, name, sizeof name) == NVML_SUCCESS) {
            state.model = fixed_string(name, sizeof name);
        }
        // A GPU whose state cannot be read is reported with its mode
        // unknown, which apply leaves as it is.
        auto unknown = [&](const Diagnostic& why) {
            diagnostics_.warning(why.message + "; left as it is", why.where);
            state.mig.reset();
            state.mig_after.reset();
            state.gis.clear();
            state.placements.clear();
        };
        unsigned current = 0;
        unsigned pending = 0;
        nvmlReturn_t mode = api_.nvmlDeviceGetMigMode(device, &current, &pending);
        if (mode == NVML_ERROR_NOT_SUPPORTED) {
            state.mig = false; // a GPU without MIG
            state.mig_after = false;
            state.mig_capable = false;
        } else if (mode != NVML_SUCCESS) {
            unknown(failed(state.gpu, "nvmlDeviceGetMigMode", mode));
            out.push_back(std::move(state));
            continue;
        } else {
            state.mig = current == NVML_DEVICE_MIG_ENABLE;
            state.mig_after = pending == NVML_DEVICE_MIG_ENABLE;
        }
        if (*state.mig) {
            auto known = profiles(state.gpu, device);
            if (!known) {
                unknown(known.error());
                out.push_back(std::move(state));
                continue;
            }
            if (Status read = read_instances(device, *known, state); !read) {
                unknown(read.error());
                out.push_back(std::move(state));
                continue;
            }
        }
        // Processes are what keeps apply from changing a GPU: a listing
        // that cannot be trusted leaves the GPU as it is. Those with a
        // graphics context count as nvidia-smi counts them (type G): the
        // compute list does not name them ("Any graphics applications (e.g.
        // using OpenGL, DirectX) won't be listed by this function", nvml.h),
        // and a GPU in MIG mode runs them in +gfx instances.
        nvml::ProcessListing listing = lister_.list(device);
        nvml::ProcessListing drawing;
        if (listing.status == nvml::ProcessListing::Status::Ok && graphics_.available()) {
            drawing = graphics_.list(device);
            if (drawing.status != nvml::ProcessListing::Status::Ok) {
                listing.status = drawing.status;
                listing.problem = drawing.problem;
            }
        }
        if (listing.status != nvml::ProcessListing::Status::Ok) {
            Diagnostic why = error(gpu_subject(state.gpu) +
                                   ": its processes cannot be listed: " + listing.problem);
            why.where.device = gpu_subject(state.gpu);
            unknown(why);
            out.push_back(std::move(state));
            continue;
        }
        for (const nvml::ProcessListing* list : {&listing, &drawing}) {
            for (const nvml::ProcessRow& row : list->rows) {
                state.pids.push_back(row.pid);
                if (row.gpu_instance != nvml::kNoInstance &&
                    row.compute_instance != nvml::kNoInstance) {
                    state.used.emplace_back(row.gpu_instance, row.compute_instance);
                }
            }
        }
        std::sort(state.pids.begin(), state.pids.end());
        state.pids.erase(std::unique(state.pids.begin(), state.pids.end()), state.pids.end());
        out.push_back(std::move(state));
    }
    return out;
}

Status NvmlMigControl::destroy_ci(const GpuIdentity& gpu, unsigned gi, unsigned ci) {
    auto device = device_of(gpu);
    if (!device) {
        return device.error();
    }
    auto instance = gi_of(gpu, *device, gi);
    if (!instance) {
        return instance.error();
    }
    nvmlComputeInstance_t compute = nullptr;
    if (nvmlReturn_t code = api_.nvmlGpuInstanceGetComputeInstanceById(*instance, ci, &compute);
        code != NVML_SUCCESS) {
        return failed(gpu, format("nvmlGpuInstanceGetComputeInstanceById(GI %u, CI %u)", gi, ci),
                      code);
    }
    if (nvmlReturn_t code = api_.nvmlComputeInstanceDestroy(compute); code != NVML_SUCCESS) {
        return failed(gpu, format("nvmlComputeInstanceDestroy(GI %u, CI %u)", gi, ci), code);
    }
    return {};
}

Status NvmlMigControl::destroy_gi(const GpuIdentity& gpu, unsigned gi) {
    auto device = device_of(gpu);
    if (!device) {
        return device.error();
    }
    auto instance = gi_of(gpu, *device, gi);
    if (!instance) {
        return instance.error();
    }
    if (nvmlReturn_t code = api_.nvmlGpuInstanceDestroy(*instance); code != NVML_SUCCESS) {
        return failed(gpu, format("nvmlGpuInstanceDestroy(GI %u)", gi), code);
    }
    return {};
}

Status NvmlMigControl::set_mig_mode(const GpuIdentity& gpu, bool on) {
    auto device = device_of(gpu);
    if (!device) {
        return device.error();
    }
    // activationStatus says whether the mode took effect now; when it did
    // not (the GPU is in use, or needs a reset), NVML keeps it pending,
    // which is what this call promises.
    nvmlReturn_t activation = NVML_SUCCESS;
    if (nvmlReturn_t code = api_.nvmlDeviceSetMigMode(
            *device, on ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE, &activation);
        code != NVML_SUCCESS) {
        return failed(gpu, on ? "nvmlDeviceSetMigMode(enable)" : "nvmlDeviceSetMigMode(disable)",
                      code);
    }
    if (activation != NVML_SUCCESS) {
        diagnostics_.warning(gpu_subject(gpu) + ": MIG mode " + (on ? "on" : "off") +
                                 " waits for a GPU reset (NVML's activation status: " +
                                 library_->describe(activation) + ")",
                             Location::of_device(gpu_subject(gpu)));
    }
    return {};
}

Status NvmlMigControl::reset(const GpuIdentity& gpu) {
    auto device = device_of(gpu);
    if (!device) {
        return device.error();
    }
    unsigned current = 0;
    unsigned pending = 0;
    if (nvmlReturn_t code = api_.nvmlDeviceGetMigMode(*device, &current, &pending);
        code != NVML_SUCCESS) {
        return failed(gpu, "nvmlDeviceGetMigMode", code);
    }
    if (current == pending) {
        return {}; // NVML activated the mode when it was set: no reset needed
    }
    if (reset_through_ != nullptr) {
        return reset_through_->reset(gpu);
    }
    Diagnostic out = error(gpu_subject(gpu) +
                               ": NVML has no GPU reset, and its MIG mode change waits for one: "
                               "reset it with nvidia-smi -r -i " +
                               gpu.bdf + " once it is idle",
                           ENOTSUP);
    out.where.device = gpu_subject(gpu);
    return out;
}

Result<unsigned> NvmlMigControl::create_gi(const GpuIdentity& gpu, std::string_view profile,
                                           std::optional<unsigned> start) {
    auto device = device_of(gpu);
    if (!device) {
        return device.error();
    }
    auto known = profiles(gpu, *device);
    if (!known) {
        return known.error();
    }
    auto found = std::find_if(known->begin(), known->end(),
                              [&](const GiProfile& each) { return each.name == profile; });
    if (found == known->end()) {
        std::string names;
        for (const GiProfile& each : *known) {
            names += (names.empty() ? "" : ", ") + each.name;
        }
        Diagnostic out = error(gpu_subject(gpu) + ": NVML has no GPU-instance profile " +
                                   quote(profile, 40) + " on this GPU (it has: " + names + ")",
                               EINVAL);
        out.where.device = gpu_subject(gpu);
        return out;
    }
    const unsigned id = found->info.id;
    nvmlGpuInstance_t instance = nullptr;
    if (start) {
        nvmlGpuInstancePlacement_t placement{};
        placement.start = *start;
        placement.size = found->placements.empty() ? 0 : found->placements.front().size;
        if (nvmlReturn_t code =
                api_.nvmlDeviceCreateGpuInstanceWithPlacement(*device, id, &placement, &instance);
            code != NVML_SUCCESS) {
            return failed(gpu,
                          format("nvmlDeviceCreateGpuInstanceWithPlacement(%s, profile id %u, "
                                 "placement %u)",
                                 found->name.c_str(), id, *start),
                          code);
        }
    } else if (nvmlReturn_t code = api_.nvmlDeviceCreateGpuInstance(*device, id, &instance);
               code != NVML_SUCCESS) {
        return failed(
            gpu, format("nvmlDeviceCreateGpuInstance(%s, profile id %u)", found->name.c_str(), id),
            code);
    }
    nvmlGpuInstanceInfo_t info{};
    if (nvmlReturn_t code = api_.nvmlGpuInstanceGetInfo(instance, &info); code != NVML_SUCCESS) {
        return failed(gpu, "nvmlGpuInstanceGetInfo of the GPU instance just created", code);
    }
    return info.id;
}

Result<unsigned> NvmlMigControl::create_ci(const GpuIdentity& gpu, unsigned gi,
                                           std::string_view profile) {
    auto device = device_of(gpu);
    if (!device) {
        return device.error();
    }
    auto instance = gi_of(gpu, *device, gi);
    if (!instance) {
        return instance.error();
    }
    nvmlGpuInstanceInfo_t gi_info{};
    if (nvmlReturn_t code = api_.nvmlGpuInstanceGetInfo(*instance, &gi_info);
        code != NVML_SUCCESS) {
        return failed(gpu, format("nvmlGpuInstanceGetInfo(GI %u)", gi), code);
    }
    auto known = profiles(gpu, *device);
    if (!known) {
        return known.error();
    }
    auto gi_profile = std::find_if(known->begin(), known->end(), [&](const GiProfile& each) {
        return each.info.id == gi_info.profileId;
    });
    if (gi_profile == known->end() || gi_profile->name.empty()) {
        return error(gpu_subject(gpu) +
                         format(": GPU instance %u has profile id %u, which NVML does not list "
                                "or which has no name",
                                gi, gi_info.profileId),
                     EIO);
    }
    const unsigned gi_slices = nvml_gi_profile_slices(gi_profile->index);
    for (unsigned index = 0; index < kCiProfileIndices; ++index) {
        if (nvml_ci_profile_name(index, gi_profile->name, gi_slices) != profile) {
            continue;
        }
        nvmlComputeInstanceProfileInfo_t ci_profile{};
        nvmlReturn_t code = api_.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            *instance, index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_profile);
        if (code == NVML_ERROR_NOT_SUPPORTED || code == NVML_ERROR_INVALID_ARGUMENT) {
            continue;
        }
        if (code != NVML_SUCCESS) {
            return failed(
                gpu, format("nvmlGpuInstanceGetComputeInstanceProfileInfo(GI %u, %u)", gi, index),
                code);
        }
        nvmlComputeInstance_t compute = nullptr;
        if ((code = api_.nvmlGpuInstanceCreateComputeInstance(*instance, ci_profile.id,
                                                              &compute)) != NVML_SUCCESS) {
            return failed(gpu,
                          format("nvmlGpuInstanceCreateComputeInstance(GI %u, ", gi) +
                              std::string(profile) + format(", profile id %u)", ci_profile.id),
                          code);
        }
        nvmlComputeInstanceInfo_t info{};
        if ((code = api_.nvmlComputeInstanceGetInfo_v2(compute, &info)) != NVML_SUCCESS) {
            return failed(gpu, "nvmlComputeInstanceGetInfo of the compute instance just created",
                          code);
        }
        return info.id;
    }
    Diagnostic out =
        error(gpu_subject(gpu) + ": NVML has no compute-instance profile " + quote(profile, 40) +
                  format(" in GPU instance %u (", gi) + gi_profile->name + ")",
              EINVAL);
    out.where.device = gpu_subject(gpu);
    return out;
}

} // namespace

Result<std::unique_ptr<MigControl>> open_nvml_mig_control(Diagnostics& diagnostics,
                                                          const std::string& library,
                                                          MigControl* reset_through) {
    auto opened = nvml::Library::open(library);
    if (!opened) {
        Diagnostic out = opened.error();
        out.message += "; gpu-mig apply can use nvidia-smi instead";
        out.code = out.code != 0 ? out.code : ENOENT;
        return out;
    }
    std::string lacking;
    for (const char* name : kNeeded) {
        if (nvml::function_named((*opened)->api(), name) == nullptr) {
            lacking += (lacking.empty() ? "" : ", ") + std::string(name);
        }
    }
    if (!lacking.empty()) {
        return error(library + " lacks " + lacking +
                         ": a driver older than R470; gpu-mig apply can use nvidia-smi instead",
                     ENOTSUP);
    }
    return std::unique_ptr<MigControl>(
        new NvmlMigControl(std::move(*opened), diagnostics, reset_through));
}

#endif

} // namespace gpuinit::mig
