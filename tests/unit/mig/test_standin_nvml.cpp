// The stand-in NVML for MIG changes (tests/fixture/standin_nvml.c), loaded
// by path as gpuinit loads the driver's: what nvml.h documents for each
// call, and one driver state shared with the stand-in nvidia-smi.
#include "gpuinit/nvml/nvml_h.hpp"
#include "machine_fixture.hpp"
#include "mig_standin.h"
#include "temp_dir.hpp"

#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <string>
#include <sys/wait.h>

namespace {

class StandinNvml : public ::testing::Test {
  protected:
    void SetUp() override {
        setenv("GPUINIT_STANDIN_MIG", dir_.path().c_str(), 1);
        setenv("GPUINIT_STANDIN_GPUS", "2", 1);
        library_ = dlopen(STANDIN_NVML_LIBRARY, RTLD_NOW | RTLD_LOCAL);
        ASSERT_NE(library_, nullptr) << dlerror();
        standin_gpu gpu;
        standin_h100(&gpu, 1);
        ASSERT_EQ(standin_save(&gpu, (dir_ / "gpu0").c_str()), 0);
        ASSERT_EQ(call<nvmlReturn_t (*)()>("nvmlInit_v2")(), NVML_SUCCESS);
        ASSERT_EQ(call<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>("nvmlDeviceGetHandleByIndex_v2")(
                      0, &device_),
                  NVML_SUCCESS);
    }
    void TearDown() override {
        if (library_ != nullptr) {
            call<nvmlReturn_t (*)()>("nvmlShutdown")();
            dlclose(library_);
        }
        unsetenv("GPUINIT_STANDIN_MIG");
        unsetenv("GPUINIT_STANDIN_GPUS");
        unsetenv("GPUINIT_STANDIN_NVML_ACTIVATION");
    }

    template <typename F>
    F call(const char* name) {
        void* symbol = dlsym(library_, name);
        EXPECT_NE(symbol, nullptr) << name;
        return reinterpret_cast<F>(symbol);
    }

    standin_gpu gpu(unsigned index) {
        standin_gpu state;
        EXPECT_EQ(standin_load(&state, (dir_ / ("gpu" + std::to_string(index))).c_str()), 0);
        return state;
    }

    int smi(const std::string& args) {
        int status =
            std::system((std::string(STANDIN_NVIDIA_SMI) + " " + args + " >/dev/null").c_str());
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }

    gpuinit::testing::TempDir dir_;
    void* library_ = nullptr;
    nvmlDevice_t device_ = nullptr;
};

} // namespace

TEST_F(StandinNvml, GivesProfilesByNvmlsIndexAndCreatesWherePlaced) {
    auto profile_info =
        call<nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlGpuInstanceProfileInfo_t*)>(
            "nvmlDeviceGetGpuInstanceProfileInfo");
    nvmlGpuInstanceProfileInfo_t info{};
    ASSERT_EQ(profile_info(device_, NVML_GPU_INSTANCE_PROFILE_3_SLICE, &info), NVML_SUCCESS);
    EXPECT_EQ(info.id, 9u); // nvidia-smi's id of 3g.40gb, what the creates take
    EXPECT_EQ(info.instanceCount, 2u);
    EXPECT_EQ(profile_info(device_, NVML_GPU_INSTANCE_PROFILE_8_SLICE, &info),
              NVML_ERROR_NOT_SUPPORTED);

    auto placements =
        call<nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlGpuInstancePlacement_t*, unsigned*)>(
            "nvmlDeviceGetGpuInstancePossiblePlacements_v2");
    nvmlGpuInstancePlacement_t spans[8];
    unsigned count = 0;
    ASSERT_EQ(placements(device_, 9, nullptr, &count), NVML_SUCCESS);
    EXPECT_EQ(count, 2u);
    ASSERT_EQ(placements(device_, 9, spans, &count), NVML_SUCCESS);
    EXPECT_EQ(spans[1].start, 4u);
    EXPECT_EQ(spans[1].size, 4u);

    auto create =
        call<nvmlReturn_t (*)(nvmlDevice_t, unsigned, const nvmlGpuInstancePlacement_t*,
                              nvmlGpuInstance_t*)>("nvmlDeviceCreateGpuInstanceWithPlacement");
    nvmlGpuInstance_t gi = nullptr;
    nvmlGpuInstancePlacement_t at{0, 4};
    ASSERT_EQ(create(device_, 9, &at, &gi), NVML_SUCCESS);
    nvmlGpuInstanceInfo_t gi_info{};
    ASSERT_EQ(call<nvmlReturn_t (*)(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t*)>(
                  "nvmlGpuInstanceGetInfo")(gi, &gi_info),
              NVML_SUCCESS);
    EXPECT_EQ(gi_info.id, 2u); // the half at 0
    EXPECT_EQ(gi_info.placement.start, 0u);
    EXPECT_EQ(create(device_, 9, &at, &gi), NVML_ERROR_INSUFFICIENT_RESOURCES);
    at.start = 2;
    EXPECT_EQ(create(device_, 9, &at, &gi), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(gpu(0).gis[2].used); // in the driver's state, for every process
}

TEST_F(StandinNvml, ComputeInstancesKeepTheirGiAndOneStateWithNvidiaSmi) {
    nvmlGpuInstance_t gi = nullptr;
    ASSERT_EQ(call<nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlGpuInstance_t*)>(
                  "nvmlDeviceCreateGpuInstance")(device_, 9, &gi),
              NVML_SUCCESS);
    auto create_ci = call<nvmlReturn_t (*)(nvmlGpuInstance_t, unsigned, nvmlComputeInstance_t*)>(
        "nvmlGpuInstanceCreateComputeInstance");
    nvmlComputeInstance_t ci = nullptr;
    ASSERT_EQ(create_ci(gi, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, &ci), NVML_SUCCESS);
    EXPECT_EQ(create_ci(gi, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, &ci),
              NVML_ERROR_INSUFFICIENT_RESOURCES);
    EXPECT_EQ(create_ci(gi, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, &ci), NVML_ERROR_NOT_SUPPORTED);
    auto destroy_gi = call<nvmlReturn_t (*)(nvmlGpuInstance_t)>("nvmlGpuInstanceDestroy");
    EXPECT_EQ(destroy_gi(gi), NVML_ERROR_IN_USE);

    // nvidia-smi, another process, removes the CI and the GI: NVML's
    // handles to them are then no longer valid.
    setenv("GPUINIT_STANDIN_GPUS", "2", 1);
    EXPECT_EQ(smi("mig -i 0 -dci"), 0);
    EXPECT_EQ(smi("mig -i 0 -dgi"), 0);
    EXPECT_EQ(destroy_gi(gi), NVML_ERROR_INVALID_ARGUMENT);
    nvmlGpuInstance_t again = nullptr;
    EXPECT_EQ(call<nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlGpuInstance_t*)>(
                  "nvmlDeviceGetGpuInstanceById")(device_, 1, &again),
              NVML_ERROR_NOT_FOUND);
}

TEST_F(StandinNvml, AModeChangeActivatesUnlessTheGpuIsInUse) {
    auto set_mode =
        call<nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlReturn_t*)>("nvmlDeviceSetMigMode");
    auto get_mode =
        call<nvmlReturn_t (*)(nvmlDevice_t, unsigned*, unsigned*)>("nvmlDeviceGetMigMode");
    setenv("GPUINIT_STANDIN_NVML_ACTIVATION", "in-use", 1);
    nvmlReturn_t activation = NVML_SUCCESS;
    ASSERT_EQ(set_mode(device_, NVML_DEVICE_MIG_DISABLE, &activation), NVML_SUCCESS);
    EXPECT_EQ(activation, NVML_ERROR_IN_USE);
    unsigned current = 9;
    unsigned pending = 9;
    ASSERT_EQ(get_mode(device_, &current, &pending), NVML_SUCCESS);
    EXPECT_EQ(current, 1u);
    EXPECT_EQ(pending, 0u);
    unsetenv("GPUINIT_STANDIN_NVML_ACTIVATION");
    ASSERT_EQ(set_mode(device_, NVML_DEVICE_MIG_DISABLE, &activation), NVML_SUCCESS);
    EXPECT_EQ(activation, NVML_SUCCESS);
    ASSERT_EQ(get_mode(device_, &current, &pending), NVML_SUCCESS);
    EXPECT_EQ(current, 0u);
    nvmlGpuInstance_t gi = nullptr;
    EXPECT_EQ(call<nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlGpuInstance_t*)>(
                  "nvmlDeviceCreateGpuInstance")(device_, 19, &gi),
              NVML_ERROR_NOT_SUPPORTED);
}

TEST_F(StandinNvml, ListsTheProcessesAsNvmlhDocumentsTheCount) {
    auto list = call<nvmlReturn_t (*)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*)>(
        "nvmlDeviceGetComputeRunningProcesses_v3");
    unsigned count = 0;
    ASSERT_EQ(list(device_, &count, nullptr), NVML_SUCCESS); // none running
    EXPECT_EQ(count, 0u);
    setenv("GPUINIT_STANDIN_PIDS", "1:77,0:4242,0:4243", 1);
    EXPECT_EQ(list(device_, &count, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(count, 2u);
    nvmlProcessInfo_t infos[2]{};
    ASSERT_EQ(list(device_, &count, infos), NVML_SUCCESS);
    ASSERT_EQ(count, 2u);
    EXPECT_EQ(infos[0].pid, 4242u);
    EXPECT_EQ(infos[1].pid, 4243u);
    EXPECT_EQ(infos[0].gpuInstanceId, 0xFFFFFFFFu); // no CI yet
    // With MIG on, the parent device's list is the aggregate: a CI's ids.
    nvmlGpuInstance_t gi = nullptr;
    ASSERT_EQ(call<nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlGpuInstance_t*)>(
                  "nvmlDeviceCreateGpuInstance")(device_, 9, &gi),
              NVML_SUCCESS);
    nvmlComputeInstance_t ci = nullptr;
    ASSERT_EQ(
        call<nvmlReturn_t (*)(nvmlGpuInstance_t, unsigned, nvmlComputeInstance_t*)>(
            "nvmlGpuInstanceCreateComputeInstance")(gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &ci),
        NVML_SUCCESS);
    ASSERT_EQ(list(device_, &count, infos), NVML_SUCCESS);
    nvmlGpuInstanceInfo_t gi_info{};
    ASSERT_EQ(call<nvmlReturn_t (*)(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t*)>(
                  "nvmlGpuInstanceGetInfo")(gi, &gi_info),
              NVML_SUCCESS);
    EXPECT_EQ(infos[0].gpuInstanceId, gi_info.id);
    EXPECT_EQ(infos[0].computeInstanceId, 0u);
    unsetenv("GPUINIT_STANDIN_PIDS");
}

TEST_F(StandinNvml, NamesEachGpuAsTheStandinNvidiaSmiDoes) {
    nvmlDevice_t second = nullptr;
    ASSERT_EQ(call<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>("nvmlDeviceGetHandleByIndex_v2")(
                  1, &second),
              NVML_SUCCESS);
    nvmlPciInfo_t pci{};
    ASSERT_EQ(call<nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*)>("nvmlDeviceGetPciInfo_v3")(
                  second, &pci),
              NVML_SUCCESS);
    EXPECT_STREQ(pci.busId, "00000000:27:00.0");
    unsigned minor = 9;
    ASSERT_EQ(
        call<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>("nvmlDeviceGetMinorNumber")(second, &minor),
        NVML_SUCCESS);
    EXPECT_EQ(minor, 1u);
    auto uuid = call<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>("nvmlDeviceGetUUID");
    char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    ASSERT_EQ(uuid(second, text, sizeof text), NVML_SUCCESS);
    EXPECT_EQ(std::string(text), gpuinit::testing::fake_uuid(1));
    EXPECT_EQ(uuid(second, text, 8), NVML_ERROR_INSUFFICIENT_SIZE);
    nvmlMemory_t memory{};
    ASSERT_EQ(call<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>("nvmlDeviceGetMemoryInfo")(
                  second, &memory),
              NVML_SUCCESS);
    EXPECT_EQ(memory.total, 81559ull << 20); // the H100 capture's -q
}
