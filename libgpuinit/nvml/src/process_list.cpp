#include "gpuinit/nvml/process_list.hpp"

#include "gpuinit/base/text.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>

namespace gpuinit::nvml {
namespace {

// The kernel's PID_MAX_LIMIT on 64-bit machines.
constexpr uint32_t kPidMax = 4'194'304;
// GPU and compute instance ids are small (an A100 or H100 has at most 7 GPU
// instances, with ids below 15); anything this large was read from the
// wrong offset.
constexpr uint32_t kMaxInstanceId = 64;
// More processes than this on one GPU is not a listing to believe.
constexpr uint32_t kMaxProcesses = 4096;
constexpr uint32_t kFirstRoom = 64;
// The bytes given for each entry asked for: twice the widest layout. A
// driver that widens an unversioned entry again (R535 appended 8 bytes to
// _v3's) writes count x its stride whatever room it was told; up to this
// wide that lands in the buffer, is measured, and refused.
constexpr size_t kEntryRoom = 2 * size_t{kMaxStride};

bool unavailable(nvmlReturn_t code) {
    return code == NVML_ERROR_NOT_SUPPORTED || code == NVML_ERROR_FUNCTION_NOT_FOUND ||
           code == NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

template <typename Info>
nvmlReturn_t list_into(nvmlReturn_t (*function)(nvmlDevice_t, unsigned*, Info*),
                       nvmlDevice_t device, unsigned char* buffer, uint32_t& count) {
    unsigned room = count;
    nvmlReturn_t code = function(device, &room, reinterpret_cast<Info*>(buffer));
    count = room;
    return code;
}

// The bytes up to the last one that is not the sentinel.
size_t written_bytes(const unsigned char* buffer, size_t size) {
    while (size > 0 && buffer[size - 1] == kSentinel) {
        --size;
    }
    return size;
}

template <typename T>
T load(const unsigned char* at) {
    T value;
    std::memcpy(&value, at, sizeof value);
    return value;
}

} // namespace

const char* call_name(ProcessCall call, ProcessKind kind) {
    const bool graphics = kind == ProcessKind::Graphics;
    switch (call) {
    case ProcessCall::DetailList:
        return "nvmlDeviceGetRunningProcessDetailList";
    case ProcessCall::V3:
        return graphics ? "nvmlDeviceGetGraphicsRunningProcesses_v3"
                        : "nvmlDeviceGetComputeRunningProcesses_v3";
    case ProcessCall::V2:
        return graphics ? "nvmlDeviceGetGraphicsRunningProcesses_v2"
                        : "nvmlDeviceGetComputeRunningProcesses_v2";
    case ProcessCall::V1:
        return graphics ? "nvmlDeviceGetGraphicsRunningProcesses"
                        : "nvmlDeviceGetComputeRunningProcesses";
    }
    return "?";
}

uint32_t written_stride(const unsigned char* buffer, size_t size, uint32_t count) {
    if (count == 0) {
        return 0;
    }
    const size_t written = written_bytes(buffer, size);
    // Each layout ends in a field the driver always writes (an 8-byte
    // memory figure, or the 4-byte compute instance id), and no real value
    // of it ends in the sentinel byte (its top byte is 0x00, or 0xFF for
    // "not available"), so the last entry ends exactly at `written`.
    for (uint32_t stride : {16U, 24U, 32U}) {
        if (written == static_cast<size_t>(stride) * count) {
            return stride;
        }
    }
    return 0;
}

bool pid_alive(uint32_t pid) {
    if (pid == 0 || pid > kPidMax) {
        return false;
    }
    return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

ProcessLister::ProcessLister(const Functions& functions, Alive alive, ProcessKind kind)
    : functions_(functions), alive_(std::move(alive)), kind_(kind) {}

bool ProcessLister::available() const {
    for (size_t i = 0; i < kProcessCalls; ++i) {
        if (function_named(functions_, call_name(static_cast<ProcessCall>(i), kind_)) != nullptr) {
            return true;
        }
    }
    return false;
}

nvmlReturn_t ProcessLister::call_once(ProcessCall call, nvmlDevice_t device, unsigned char* buffer,
                                      uint32_t& count) {
    switch (call) {
    case ProcessCall::DetailList: {
        nvmlProcessDetailList_t request{};
        request.version = nvmlProcessDetailList_v1;
        request.mode =
            kind_ == ProcessKind::Graphics ? NVML_PROCESS_MODE_GRAPHICS : NVML_PROCESS_MODE_COMPUTE;
        request.numProcArrayEntries = count;
        request.procArray = reinterpret_cast<nvmlProcessDetail_v1_t*>(buffer);
        nvmlReturn_t code = functions_.nvmlDeviceGetRunningProcessDetailList(device, &request);
        count = request.numProcArrayEntries;
        return code;
    }
    // read() checked that the function is there.
    case ProcessCall::V3:
        return kind_ == ProcessKind::Graphics
                   ? list_into(functions_.nvmlDeviceGetGraphicsRunningProcesses_v3, device, buffer,
                               count)
                   : list_into(functions_.nvmlDeviceGetComputeRunningProcesses_v3, device, buffer,
                               count);
    case ProcessCall::V2:
        return kind_ == ProcessKind::Graphics
                   ? list_into(functions_.nvmlDeviceGetGraphicsRunningProcesses_v2, device, buffer,
                               count)
                   : list_into(functions_.nvmlDeviceGetComputeRunningProcesses_v2, device, buffer,
                               count);
    case ProcessCall::V1:
        return kind_ == ProcessKind::Graphics
                   ? list_into(functions_.nvmlDeviceGetGraphicsRunningProcesses, device, buffer,
                               count)
                   : list_into(functions_.nvmlDeviceGetComputeRunningProcesses, device, buffer,
                               count);
    }
    return NVML_ERROR_FUNCTION_NOT_FOUND;
}

ProcessLister::Outcome ProcessLister::read(ProcessCall call, nvmlDevice_t device,
                                           ProcessListing& out) {
    CallState& state = state_[static_cast<size_t>(call)];
    const char* name = call_name(call, kind_);
    if (function_named(functions_, name) == nullptr) {
        state.rejected = "not exported by this driver";
        return Outcome::Unavailable;
    }
    uint32_t room = kFirstRoom;
    bool vanished_once = false;
    for (int attempt = 0; attempt < 6; ++attempt) {
        // Room for `room` entries of twice the widest layout, and one more,
        // so a driver that writes wider entries than we know (or one entry
        // too many) shows as a stride we refuse rather than as a write past
        // the buffer's end.
        buffer_.assign((size_t{room} + 1) * kEntryRoom, kSentinel);
        uint32_t count = room;
        nvmlReturn_t code = call_once(call, device, buffer_.data(), count);
        if (code == NVML_ERROR_INSUFFICIENT_SIZE) {
            if (count > kMaxProcesses) {
                out.problem = format("%s says %u processes; not believable", name, count);
                return Outcome::Failed;
            }
            room = count + 16;
            continue;
        }
        if (unavailable(code)) {
            state.rejected = format("not supported (NVML error %d)", static_cast<int>(code));
            return Outcome::Unavailable;
        }
        if (code != NVML_SUCCESS) {
            out.problem = format("%s failed (NVML error %d)", name, static_cast<int>(code));
            return Outcome::Failed;
        }
        if (count > room) {
            state.rejected = format("claimed %u entries in room for %u", count, room);
            return Outcome::Rejected;
        }
        std::vector<ProcessRow> rows;
        uint32_t stride = 0;
        if (count > 0) {
            stride = written_stride(buffer_.data(), buffer_.size(), count);
            const bool expected = call == ProcessCall::DetailList
                                      ? stride == sizeof(nvmlProcessDetail_v1_t)
                                      : stride != 0;
            if (!expected) {
                state.rejected = format("wrote %zu bytes for %u entries, no layout NVML has",
                                        written_bytes(buffer_.data(), buffer_.size()), count);
                return Outcome::Rejected;
            }
            if (state.stride != 0 && stride != state.stride) {
                state.rejected =
                    format("wrote %u-byte entries after %u-byte ones", stride, state.stride);
                return Outcome::Rejected;
            }
            for (uint32_t i = 0; i < count; ++i) {
                const unsigned char* entry = buffer_.data() + static_cast<size_t>(i) * stride;
                ProcessRow row;
                row.pid = load<uint32_t>(entry);
                row.used_bytes = load<uint64_t>(entry + 8);
                if (stride >= 24) {
                    row.gpu_instance = load<uint32_t>(entry + 16);
                    row.compute_instance = load<uint32_t>(entry + 20);
                }
                const bool outside_mig =
                    row.gpu_instance == kNoInstance && row.compute_instance == kNoInstance;
                const bool in_mig =
                    row.gpu_instance < kMaxInstanceId && row.compute_instance < kMaxInstanceId;
                if (row.pid == 0 || row.pid > kPidMax || !(outside_mig || in_mig)) {
                    state.rejected =
                        format("entry %u of %u (%u-byte stride) reads as pid %u, GPU instance %#x, "
                               "compute instance %#x",
                               i, count, stride, row.pid, row.gpu_instance, row.compute_instance);
                    return Outcome::Rejected;
                }
                rows.push_back(row);
            }
            bool all_alive = true;
            for (const ProcessRow& row : rows) {
                all_alive = all_alive && alive_(row.pid);
            }
            if (!all_alive) {
                // A process that exited between the listing and the check
                // is gone from the next listing; one that stays is not a
                // process of this host.
                if (!vanished_once) {
                    vanished_once = true;
                    continue;
                }
                out.problem = format("%s lists a pid that is not a live process here, twice", name);
                return Outcome::Vanished;
            }
            state.stride = stride;
        }
        out.status = ProcessListing::Status::Ok;
        out.rows = std::move(rows);
        out.call = call;
        out.stride = state.stride;
        return Outcome::Ok;
    }
    out.problem = format("%s: the process count kept changing", name);
    return Outcome::Failed;
}

ProcessListing ProcessLister::list(nvmlDevice_t device) {
    ProcessListing out;
    for (size_t i = 0; i < kProcessCalls; ++i) {
        const auto call = static_cast<ProcessCall>(i);
        if (!state_[i].rejected.empty()) {
            continue;
        }
        switch (read(call, device, out)) {
        case Outcome::Ok:
            return out;
        case Outcome::Failed:
        case Outcome::Vanished:
            out.status = ProcessListing::Status::Failed;
            return out;
        case Outcome::Unavailable:
        case Outcome::Rejected:
            break;
        }
    }
    out.status = ProcessListing::Status::Untrusted;
    out.problem = "no NVML process list checks out:";
    for (size_t i = 0; i < kProcessCalls; ++i) {
        out.problem += format(" %s: %s;", call_name(static_cast<ProcessCall>(i), kind_),
                              state_[i].rejected.c_str());
    }
    out.problem.pop_back();
    return out;
}

} // namespace gpuinit::nvml
