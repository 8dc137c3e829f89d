/* A stand-in for the driver's libnvidia-ml.so.1, for test_nvml.cpp: only the
 * entry points gpuinit resolves, over a fixed layout of two GPUs.
 *   NVML GPU 0: GPU-558ce121-...0001 (the fixture's minor 1), MIG on; MIG
 *     device 0 = GI 7 CI 0 (1g.10gb), device 1 missing (a gap), device 2 =
 *     GI 1 CI 0 (2c.3g.40gb), device 3 = GI 1 CI 1 (1c.3g.40gb).
 *   NVML GPU 1: GPU-558ce120-...0000 (minor 0), MIG off.
 * FAKE_NVML_SCENARIO changes it: "init-fails" (no driver), "old-uuid" (MIG
 * UUIDs in the pre-R470 MIG-GPU-<uuid>/<gi>/<ci> form), "odd-name" (a MIG
 * device name without "MIG <profile>"), "blackwell" (GPU 0 an RTX PRO 6000
 * Blackwell: GI 7 a 1g.24gb-me, GI 1 a 2g.48gb with two 1c.2g.48gb CIs). */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h> /* NVIDIA's own declarations: a definition here that disagrees fails to compile */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* nvml.h leaves the device opaque; this is the stand-in's. */
struct nvmlDevice_st {
    int gpu; /* NVML index of the GPU (or the parent) */
    int mig; /* MIG device index, -1 for a GPU */
    unsigned gi;
    unsigned ci;
    const char* profile;
};

static struct nvmlDevice_st gpus[2] = {{0, -1, 0, 0, NULL}, {1, -1, 0, 0, NULL}};
static struct nvmlDevice_st migs[4] = {{0, 0, 7, 0, "1g.10gb"},
                                       {0, 1, 0, 0, NULL},
                                       {0, 2, 1, 0, "2c.3g.40gb"},
                                       {0, 3, 1, 1, "1c.3g.40gb"}};
static const char* blackwell_profiles[4] = {"1g.24gb-me", NULL, "1c.2g.48gb", "1c.2g.48gb"};
static const char* gpu_uuids[2] = {"GPU-558ce121-5b8b-16a1-87d4-ce157bba0001",
                                   "GPU-558ce120-5b8b-16a1-87d4-ce157bba0000"};
static int initialized;

static int scenario(const char* name) {
    const char* value = getenv("FAKE_NVML_SCENARIO");
    return value != NULL && strcmp(value, name) == 0;
}

static nvmlReturn_t copy(const char* text, char* out, unsigned length) {
    if (strlen(text) + 1 > length) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(out, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) {
    if (scenario("init-fails")) {
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    initialized = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
    initialized = 0;
    return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t code) {
    return code == NVML_ERROR_DRIVER_NOT_LOADED ? "Driver Not Loaded"
           : code == NVML_ERROR_NOT_FOUND       ? "Not Found"
                                                : "Unknown Error";
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
    if (!initialized) {
        return NVML_ERROR_UNINITIALIZED;
    }
    *count = 2;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
    if (index >= 2) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *device = &gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
    char text[96];
    if (device->mig < 0) {
        return copy(gpu_uuids[device->gpu], uuid, length);
    }
    if (scenario("old-uuid")) {
        snprintf(text, sizeof text, "MIG-%s/%u/%u", gpu_uuids[device->gpu], device->gi, device->ci);
    } else {
        snprintf(text, sizeof text, "MIG-3c4c5a28-%04x-5001-a%03x-0007e54946%02x",
                 0x1000u + device->gi, device->ci, 10u * device->gi + device->ci);
    }
    return copy(text, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
    char text[96];
    const char* gpu = device->gpu == 0 && scenario("blackwell")
                          ? "NVIDIA RTX PRO 6000 Blackwell Server Edition"
                          : "NVIDIA A100 80GB PCIe";
    if (device->mig < 0 || scenario("odd-name")) {
        return copy(gpu, name, length);
    }
    snprintf(text, sizeof text, "%s MIG %s", gpu,
             scenario("blackwell") ? blackwell_profiles[device->mig] : device->profile);
    return copy(text, name, length);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                  unsigned int* pending) {
    *current = device->gpu == 0 ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pending = *current;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
    *count = device->gpu == 0 ? 7 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t* mig) {
    if (device->gpu != 0 || index >= 4 || migs[index].profile == NULL) {
        return NVML_ERROR_NOT_FOUND;
    }
    *mig = &migs[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
    if (device->mig < 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *id = device->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
    if (device->mig < 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *id = device->ci;
    return NVML_SUCCESS;
}
