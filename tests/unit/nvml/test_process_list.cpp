// NVML's process lists read without trusting their layout
// (libgpuinit/nvml/src/process_list.cpp), over fake list functions that
// write the layouts real drivers write: 16 bytes (v1), 24 (nvml.h's
// nvmlProcessInfo_t, 580.x), 32 (R535's _v3, and the versioned detail list)
// and a 40-byte layout no NVML has had.
#include "gpuinit/nvml/process_list.hpp"

#include <cstring>
#include <gtest/gtest.h>
#include <malloc.h>
#include <set>
#include <unistd.h>
#include <vector>

namespace gpuinit::nvml {
namespace {

struct FakeProcess {
    uint32_t pid;
    uint64_t bytes;
    uint32_t gpu_instance = kNoInstance;
    uint32_t compute_instance = kNoInstance;
};

// What each fake call writes: entries of `stride` bytes, or an error.
struct FakeCall {
    uint32_t stride = 0; // 0: answers `code` instead
    nvmlReturn_t code = NVML_ERROR_NOT_SUPPORTED;
    int calls = 0;
};

struct Driver {
    std::vector<FakeProcess> processes;
    FakeCall detail, v3, v2, v1;
    // Processes listed once more after they died (a read racing an exit).
    int stale_reads = 0;
    std::vector<FakeProcess> stale;
};
Driver g_driver;
int g_overruns = 0;

nvmlReturn_t write_entries(FakeCall& call, unsigned* count, void* buffer) {
    ++call.calls;
    if (call.stride == 0) {
        return call.code;
    }
    const std::vector<FakeProcess>& listed =
        g_driver.stale_reads > 0 ? g_driver.stale : g_driver.processes;
    if (g_driver.stale_reads > 0) {
        --g_driver.stale_reads;
    }
    if (*count < listed.size()) {
        *count = static_cast<unsigned>(listed.size());
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    auto* out = static_cast<unsigned char*>(buffer);
    // A driver writes what it writes; the test records a write that would
    // go past the reader's buffer instead of making it.
    if (listed.size() * call.stride > ::malloc_usable_size(buffer)) {
        ++g_overruns;
        *count = static_cast<unsigned>(listed.size());
        return NVML_SUCCESS;
    }
    for (size_t i = 0; i < listed.size(); ++i) {
        unsigned char* entry = out + i * call.stride;
        std::memcpy(entry, &listed[i].pid, 4);
        std::memcpy(entry + 8, &listed[i].bytes, 8);
        if (call.stride >= 24) {
            std::memcpy(entry + 16, &listed[i].gpu_instance, 4);
            std::memcpy(entry + 20, &listed[i].compute_instance, 4);
        }
        if (call.stride > 24) {
            std::memset(entry + 24, 0, call.stride - 24);
        }
    }
    *count = static_cast<unsigned>(listed.size());
    return NVML_SUCCESS;
}

nvmlReturn_t fake_detail(nvmlDevice_t, nvmlProcessDetailList_t* list) {
    if (list->version != nvmlProcessDetailList_v1 || list->mode != NVML_PROCESS_MODE_COMPUTE) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return write_entries(g_driver.detail, &list->numProcArrayEntries, list->procArray);
}
nvmlReturn_t fake_v3(nvmlDevice_t, unsigned* count, nvmlProcessInfo_t* infos) {
    return write_entries(g_driver.v3, count, infos);
}
nvmlReturn_t fake_v2(nvmlDevice_t, unsigned* count, nvmlProcessInfo_v2_t* infos) {
    return write_entries(g_driver.v2, count, infos);
}
nvmlReturn_t fake_v1(nvmlDevice_t, unsigned* count, nvmlProcessInfo_v1_t* infos) {
    return write_entries(g_driver.v1, count, infos);
}

std::set<uint32_t> g_alive;
bool fake_alive(uint32_t pid) {
    return g_alive.count(pid) != 0;
}

class ProcessListTest : public ::testing::Test {
  protected:
    void SetUp() override {
        g_driver = Driver{};
        g_overruns = 0;
        g_driver.processes = {{4242, 512ULL << 20}, {4243, 3ULL << 30}, {90001, 7}};
        g_alive = {4242, 4243, 90001};
        functions.nvmlDeviceGetRunningProcessDetailList = fake_detail;
        functions.nvmlDeviceGetComputeRunningProcesses_v3 = fake_v3;
        functions.nvmlDeviceGetComputeRunningProcesses_v2 = fake_v2;
        functions.nvmlDeviceGetComputeRunningProcesses = fake_v1;
    }

    void expect_rows(const ProcessListing& listing) {
        ASSERT_EQ(listing.status, ProcessListing::Status::Ok) << listing.problem;
        ASSERT_EQ(listing.rows.size(), g_driver.processes.size());
        for (size_t i = 0; i < listing.rows.size(); ++i) {
            EXPECT_EQ(listing.rows[i].pid, g_driver.processes[i].pid) << i;
            EXPECT_EQ(listing.rows[i].used_bytes, g_driver.processes[i].bytes) << i;
        }
    }

    Functions functions;
    nvmlDevice_t device = reinterpret_cast<nvmlDevice_t>(0x1000);
};

TEST(ProcessListStride, MeasuredFromTheBytesWritten) {
    for (uint32_t stride : {16U, 24U, 32U}) {
        for (uint32_t count : {1U, 2U, 5U}) {
            std::vector<unsigned char> buffer(256, kSentinel);
            for (uint32_t i = 0; i < count; ++i) {
                // The last field's top byte is 0x00 (a memory figure) or
                // 0xFF (an instance id outside MIG).
                std::memset(buffer.data() + i * stride, 0x11, stride);
                buffer[i * stride + stride - 1] = stride == 24 ? 0xFF : 0x00;
                // Padding the driver never writes keeps the sentinel.
                std::memset(buffer.data() + i * stride + 4, kSentinel, 4);
            }
            EXPECT_EQ(written_stride(buffer.data(), buffer.size(), count), stride)
                << stride << " x " << count;
        }
    }
    std::vector<unsigned char> buffer(256, kSentinel);
    EXPECT_EQ(written_stride(buffer.data(), buffer.size(), 0), 0U);
    std::memset(buffer.data(), 0, 40 * 2);
    EXPECT_EQ(written_stride(buffer.data(), buffer.size(), 2), 0U); // 40-byte entries
    EXPECT_EQ(written_stride(buffer.data(), buffer.size(), 3), 0U); // 26.7 bytes each
    buffer.assign(256, kSentinel);
    std::memset(buffer.data(), 0, 48);
    EXPECT_EQ(written_stride(buffer.data(), buffer.size(), 2), 24U);
    EXPECT_EQ(written_stride(buffer.data(), buffer.size(), 3), 16U);
}

// nvml.h's layout for _v3 (580.x drivers): every entry where it belongs. A
// reader that assumed R535's 32 bytes read the second and third entries at
// the wrong offsets.
TEST_F(ProcessListTest, TheDeclared24ByteLayout) {
    g_driver.v3.stride = 24;
    ProcessLister lister(functions, fake_alive);
    ProcessListing listing = lister.list(device);
    expect_rows(listing);
    EXPECT_EQ(listing.call, ProcessCall::V3);
    EXPECT_EQ(listing.stride, 24U);
    EXPECT_EQ(listing.rows[1].gpu_instance, kNoInstance);
    EXPECT_EQ(lister.rejected(ProcessCall::DetailList), "not supported (NVML error 3)");
}

// R535 drivers write 32-byte entries through _v3 without a version bump.
TEST_F(ProcessListTest, R535s32ByteEntriesThroughV3) {
    g_driver.v3.stride = 32;
    ProcessLister lister(functions, fake_alive);
    ProcessListing listing = lister.list(device);
    expect_rows(listing);
    EXPECT_EQ(listing.call, ProcessCall::V3);
    EXPECT_EQ(listing.stride, 32U);
}

TEST_F(ProcessListTest, SixteenByteEntries) {
    g_driver.v3.stride = 16;
    ProcessLister lister(functions, fake_alive);
    ProcessListing listing = lister.list(device);
    expect_rows(listing);
    EXPECT_EQ(listing.stride, 16U);
    EXPECT_EQ(listing.rows[0].gpu_instance, kNoInstance);
}

TEST_F(ProcessListTest, TheVersionedDetailListFirst) {
    g_driver.detail.stride = 32;
    g_driver.v3.stride = 24;
    ProcessLister lister(functions, fake_alive);
    ProcessListing listing = lister.list(device);
    expect_rows(listing);
    EXPECT_EQ(listing.call, ProcessCall::DetailList);
    EXPECT_EQ(g_driver.v3.calls, 0);
}

TEST_F(ProcessListTest, ADetailListInAnotherLayoutIsRefusedForGood) {
    g_driver.detail.stride = 24; // not nvmlProcessDetail_v1_t
    g_driver.v3.stride = 24;
    ProcessLister lister(functions, fake_alive);
    expect_rows(lister.list(device));
    EXPECT_NE(lister.rejected(ProcessCall::DetailList).find("72 bytes for 3 entries"),
              std::string::npos)
        << lister.rejected(ProcessCall::DetailList);
    expect_rows(lister.list(device));
    EXPECT_EQ(g_driver.detail.calls, 1);
}

TEST_F(ProcessListTest, NoProcessesIsAnEmptyListing) {
    g_driver.processes.clear();
    g_driver.v3.stride = 24;
    ProcessLister lister(functions, fake_alive);
    ProcessListing listing = lister.list(device);
    ASSERT_EQ(listing.status, ProcessListing::Status::Ok);
    EXPECT_TRUE(listing.rows.empty());
    EXPECT_EQ(listing.stride, 0U);
}

TEST_F(ProcessListTest, ManyProcessesGrowTheBuffer) {
    g_driver.processes.clear();
    for (uint32_t pid = 1000; pid < 1300; ++pid) {
        g_driver.processes.push_back({pid, pid * 4096ULL});
        g_alive.insert(pid);
    }
    g_driver.v3.stride = 32;
    ProcessLister lister(functions, fake_alive);
    expect_rows(lister.list(device));
}

// A layout no NVML has: nothing checks out, and the listing says so rather
// than guessing.
TEST_F(ProcessListTest, AnUnknownLayoutEverywhereIsUntrusted) {
    for (FakeCall* call : {&g_driver.detail, &g_driver.v3, &g_driver.v2, &g_driver.v1}) {
        call->stride = 40;
    }
    ProcessLister lister(functions, fake_alive);
    ProcessListing listing = lister.list(device);
    EXPECT_EQ(listing.status, ProcessListing::Status::Untrusted);
    EXPECT_TRUE(listing.rows.empty());
    for (const char* name :
         {"nvmlDeviceGetRunningProcessDetailList", "nvmlDeviceGetComputeRunningProcesses_v3",
          "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses:"}) {
        EXPECT_NE(listing.problem.find(name), std::string::npos) << listing.problem;
    }
    EXPECT_NE(listing.problem.find("120 bytes for 3 entries"), std::string::npos)
        << listing.problem;
    // And it stays so: a call once refused is not asked again.
    EXPECT_EQ(lister.list(device).status, ProcessListing::Status::Untrusted);
    EXPECT_EQ(g_driver.v3.calls, 1);
}

// A driver that widens its entries again (as R535 did, by 8 bytes) writes
// count x its stride: the buffer has room for that, so the stride is
// measured and refused, not written past the buffer's end, even with the
// listing as full as the room asked for.
TEST_F(ProcessListTest, WiderEntriesThanAnyLayoutStayInTheBuffer) {
    for (uint32_t processes : {60U, 300U}) {
        g_driver.processes.clear();
        for (uint32_t pid = 1000; pid < 1000 + processes; ++pid) {
            g_driver.processes.push_back({pid, pid * 4096ULL});
            g_alive.insert(pid);
        }
        for (uint32_t stride : {40U, 48U, 64U}) {
            g_driver.v3 = FakeCall{};
            g_driver.v3.stride = stride;
            ProcessLister lister(functions, fake_alive);
            ProcessListing listing = lister.list(device);
            EXPECT_EQ(g_overruns, 0) << processes << " processes, " << stride << "-byte entries";
            EXPECT_NE(listing.status, ProcessListing::Status::Ok);
            EXPECT_NE(lister.rejected(ProcessCall::V3), "") << stride;
            g_overruns = 0;
        }
    }
}

TEST_F(ProcessListTest, ImplausibleInstanceIdsAreRefused) {
    g_driver.processes[1].gpu_instance = 0x2c80;
    g_driver.processes[1].compute_instance = 0;
    g_driver.v3.stride = 24;
    g_driver.v2.stride = 24;
    g_driver.v1.stride = 16;
    ProcessLister lister(functions, fake_alive);
    ProcessListing listing = lister.list(device);
    // v1 has no instance ids: it is what is left.
    ASSERT_EQ(listing.status, ProcessListing::Status::Ok) << listing.problem;
    EXPECT_EQ(listing.call, ProcessCall::V1);
    EXPECT_NE(lister.rejected(ProcessCall::V3).find("GPU instance 0x2c80"), std::string::npos)
        << lister.rejected(ProcessCall::V3);
}

TEST_F(ProcessListTest, MigInstancesAreKept) {
    g_driver.processes[0].gpu_instance = 7;
    g_driver.processes[0].compute_instance = 0;
    g_driver.v3.stride = 24;
    ProcessLister lister(functions, fake_alive);
    ProcessListing listing = lister.list(device);
    expect_rows(listing);
    EXPECT_EQ(listing.rows[0].gpu_instance, 7U);
    EXPECT_EQ(listing.rows[0].compute_instance, 0U);
}

// A process that exits between the listing and the check: the read is
// repeated once, and the next listing no longer has it.
TEST_F(ProcessListTest, AProcessThatJustExitedIsReadAgain) {
    g_driver.v3.stride = 24;
    g_driver.stale = g_driver.processes;
    g_driver.stale.push_back({5555, 1});
    g_driver.stale_reads = 1;
    ProcessLister lister(functions, fake_alive);
    expect_rows(lister.list(device));
    EXPECT_EQ(g_driver.v3.calls, 2);
}

// A pid that is not a process here, twice: this read fails (nothing is
// concluded from it), but the call is not given up.
TEST_F(ProcessListTest, APidThatIsNoProcessFailsTheRead) {
    g_driver.v3.stride = 24;
    g_alive.erase(4243);
    ProcessLister lister(functions, fake_alive);
    ProcessListing listing = lister.list(device);
    EXPECT_EQ(listing.status, ProcessListing::Status::Failed);
    EXPECT_NE(listing.problem.find("not a live process"), std::string::npos) << listing.problem;
    EXPECT_TRUE(lister.rejected(ProcessCall::V3).empty());
    g_alive.insert(4243);
    expect_rows(lister.list(device));
}

TEST_F(ProcessListTest, AStrideThatChangesIsRefused) {
    g_driver.v3.stride = 24;
    g_driver.v2.stride = 24;
    ProcessLister lister(functions, fake_alive);
    expect_rows(lister.list(device));
    g_driver.v3.stride = 32;
    ProcessListing listing = lister.list(device);
    expect_rows(listing);
    EXPECT_EQ(listing.call, ProcessCall::V2);
    EXPECT_NE(lister.rejected(ProcessCall::V3).find("32-byte entries after 24-byte"),
              std::string::npos);
}

TEST_F(ProcessListTest, MissingFunctionsAreSkipped) {
    functions.nvmlDeviceGetRunningProcessDetailList = nullptr;
    functions.nvmlDeviceGetComputeRunningProcesses_v3 = nullptr;
    g_driver.v2.stride = 24;
    ProcessLister lister(functions, fake_alive);
    ProcessListing listing = lister.list(device);
    expect_rows(listing);
    EXPECT_EQ(listing.call, ProcessCall::V2);
    EXPECT_EQ(lister.rejected(ProcessCall::V3), "not exported by this driver");
}

TEST_F(ProcessListTest, AnNvmlErrorFailsTheReadOnly) {
    g_driver.v3.code = NVML_ERROR_GPU_IS_LOST;
    ProcessLister lister(functions, fake_alive);
    ProcessListing listing = lister.list(device);
    EXPECT_EQ(listing.status, ProcessListing::Status::Failed);
    EXPECT_TRUE(lister.rejected(ProcessCall::V3).empty());
}

TEST(ProcessListPids, LiveProcesses) {
    EXPECT_TRUE(pid_alive(static_cast<uint32_t>(::getpid())));
    EXPECT_TRUE(pid_alive(1));
    EXPECT_FALSE(pid_alive(0));
    EXPECT_FALSE(pid_alive(0xFFFFFFFFU));
}

} // namespace
} // namespace gpuinit::nvml
