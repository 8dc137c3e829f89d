// NVML's list of the processes with a compute context on a device (or,
// with ProcessKind::Graphics, a graphics one), read without trusting the
// layout the driver writes.
//
// nvml.h declares the entries nvmlDeviceGetComputeRunningProcesses_v3 fills
// as nvmlProcessInfo_t, 24 bytes, but R535 drivers (535.54.03 among them)
// write 32-byte entries there (usedGpuCcProtectedMemory appended, no version
// bump), and later drivers write 24 again; 580.159.04 writes 16 (v1), 24
// (_v2, _v3) and 32 (nvmlDeviceGetRunningProcessDetailList). A reader that
// assumes one layout reads every entry after the first at the wrong offset.
// So each read hands the driver a buffer with room for the widest layout,
// filled with a sentinel, and measures the stride from the bytes written;
// the rows are then checked (live pids, MIG ids that are 0xFFFFFFFF or
// plausible). A call whose output does not check out is not used again; when
// none does, the listing is Untrusted, and the caller must not act on it.
#pragma once

#include "gpuinit/nvml/api.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gpuinit::nvml {

inline constexpr uint64_t kUnknownBytes = UINT64_MAX; // NVML_VALUE_NOT_AVAILABLE
inline constexpr uint32_t kNoInstance = 0xFFFFFFFFu;  // outside MIG

struct ProcessRow {
    uint32_t pid = 0;
    uint64_t used_bytes = kUnknownBytes;
    uint32_t gpu_instance = kNoInstance;
    uint32_t compute_instance = kNoInstance;
};

// The calls, in the order they are tried: the versioned one first.
enum class ProcessCall : uint8_t { DetailList, V3, V2, V1 };
inline constexpr size_t kProcessCalls = 4;
// Compute contexts (nvidia-smi's C) or graphics ones (G): the same calls
// with Graphics for Compute in their names, and the DetailList's mode.
enum class ProcessKind : uint8_t { Compute, Graphics };
// Its ABI name ("nvmlDeviceGetComputeRunningProcesses_v3").
const char* call_name(ProcessCall call, ProcessKind kind = ProcessKind::Compute);

struct ProcessListing {
    enum class Status : uint8_t {
        Ok,        // rows are the device's processes
        Failed,    // this read failed (an NVML error, or a process that
                   // vanished between the list and its check): try later
        Untrusted, // no call's output checks out on this driver: act on none
    };
    Status status = Status::Failed;
    std::vector<ProcessRow> rows;
    ProcessCall call = ProcessCall::DetailList; // Ok: the call that answered
    uint32_t stride = 0;                        // Ok: its entries' size; 0 before any entry
    std::string problem;                        // Failed, Untrusted: one line
};

// The stride of `count` entries written at the start of a buffer that was
// filled with kSentinel: the bytes up to the last one changed, divided by
// the count; 0 unless that is 16, 24 or 32 bytes and the last entry's last
// field ends there. Pure, for tests.
inline constexpr unsigned char kSentinel = 0xA5;
inline constexpr uint32_t kMaxStride = 32;
uint32_t written_stride(const unsigned char* buffer, size_t size, uint32_t count);

// Whether pid is a live process on this host (kill(pid, 0)).
bool pid_alive(uint32_t pid);

class ProcessLister {
  public:
    using Alive = std::function<bool(uint32_t pid)>;
    explicit ProcessLister(const Functions& functions, Alive alive = pid_alive,
                           ProcessKind kind = ProcessKind::Compute);
    // Whether this driver has any call of this kind at all.
    bool available() const;

    ProcessListing list(nvmlDevice_t device);

    // Why a call was given up for good; empty while it is usable.
    const std::string& rejected(ProcessCall call) const {
        return state_[static_cast<size_t>(call)].rejected;
    }
    // The stride a call was measured at; 0 before it listed anything.
    uint32_t stride(ProcessCall call) const { return state_[static_cast<size_t>(call)].stride; }

  private:
    struct CallState {
        std::string rejected;
        uint32_t stride = 0;
    };
    enum class Outcome : uint8_t { Ok, Unavailable, Rejected, Failed, Vanished };
    Outcome read(ProcessCall call, nvmlDevice_t device, ProcessListing& out);
    nvmlReturn_t call_once(ProcessCall call, nvmlDevice_t device, unsigned char* buffer,
                           uint32_t& count);

    const Functions& functions_;
    Alive alive_;
    ProcessKind kind_;
    std::array<CallState, kProcessCalls> state_{};
    std::vector<unsigned char> buffer_;
};

} // namespace gpuinit::nvml
