#include "gpuinit/limit/daemon_nvml.hpp"

#include "gpuinit/base/text.hpp"

#include <algorithm>
#include <cstring>

namespace gpuinit::limit {
namespace {

constexpr unsigned kUuidBuffer = NVML_DEVICE_UUID_V2_BUFFER_SIZE;
constexpr unsigned kMaxDevices = 64;
constexpr unsigned kMaxSamples = 16384;

} // namespace

LibraryNvml::LibraryNvml(const std::string& library) {
    auto opened = nvml::Library::open(library);
    if (!opened) {
        problem_ = opened.error().message;
        return;
    }
    std::string lacking = (*opened)->missing(
        {"nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetUUID"});
    if (!lacking.empty()) {
        problem_ = library + " lacks " + lacking;
        return;
    }
    library_ = std::move(*opened);
    lister_ = std::make_unique<nvml::ProcessLister>(library_->api());
}

bool LibraryNvml::has_processes() const {
    if (library_ == nullptr) {
        return false;
    }
    const nvml::Functions& api = library_->api();
    return api.nvmlDeviceGetRunningProcessDetailList != nullptr ||
           api.nvmlDeviceGetComputeRunningProcesses_v3 != nullptr ||
           api.nvmlDeviceGetComputeRunningProcesses_v2 != nullptr ||
           api.nvmlDeviceGetComputeRunningProcesses != nullptr;
}

bool LibraryNvml::has_utilization() const {
    return library_ != nullptr && library_->api().nvmlDeviceGetProcessUtilization != nullptr;
}

nvmlDevice_t LibraryNvml::handle(unsigned index) const {
    nvmlDevice_t device = nullptr;
    if (library_ == nullptr ||
        library_->api().nvmlDeviceGetHandleByIndex_v2(index, &device) != NVML_SUCCESS) {
        return nullptr;
    }
    return device;
}

std::vector<NvmlDevice> LibraryNvml::devices() {
    std::vector<NvmlDevice> out;
    unsigned count = 0;
    if (library_ == nullptr || library_->api().nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS) {
        return out;
    }
    for (unsigned index = 0; index < count && index < kMaxDevices; ++index) {
        char buffer[kUuidBuffer] = {};
        nvmlDevice_t device = handle(index);
        if (device != nullptr &&
            library_->api().nvmlDeviceGetUUID(device, buffer, sizeof buffer) == NVML_SUCCESS) {
            out.push_back({index, std::string(buffer, ::strnlen(buffer, sizeof buffer))});
        }
    }
    return out;
}

ProcessListing LibraryNvml::processes(unsigned index, std::vector<NvmlProcess>& out,
                                      ProcessListDetail& detail) {
    nvmlDevice_t device = handle(index);
    if (device == nullptr) {
        detail.problem = format("no NVML handle for GPU %u", index);
        return ProcessListing::Failed;
    }
    nvml::ProcessListing listing = lister_->list(device);
    detail.problem = listing.problem;
    switch (listing.status) {
    case nvml::ProcessListing::Status::Ok:
        detail.call = nvml::call_name(listing.call);
        detail.stride = listing.stride;
        for (const nvml::ProcessRow& row : listing.rows) {
            out.push_back({static_cast<int32_t>(row.pid), row.used_bytes == nvml::kUnknownBytes
                                                              ? kNvmlUnknownBytes
                                                              : row.used_bytes});
        }
        return ProcessListing::Listed;
    case nvml::ProcessListing::Status::Failed:
        return ProcessListing::Failed;
    case nvml::ProcessListing::Status::Untrusted:
        return ProcessListing::Untrusted;
    }
    return ProcessListing::Failed;
}

bool LibraryNvml::utilization(unsigned index, uint64_t since_us, std::vector<NvmlSample>& out) {
    nvmlDevice_t device = handle(index);
    auto* sampled = library_ != nullptr ? library_->api().nvmlDeviceGetProcessUtilization : nullptr;
    if (sampled == nullptr || device == nullptr) {
        return false;
    }
    unsigned count = 0;
    nvmlReturn_t code = sampled(device, nullptr, &count, since_us);
    if (code == NVML_ERROR_NOT_FOUND) {
        return true; // no samples since then
    }
    if ((code != NVML_SUCCESS && code != NVML_ERROR_INSUFFICIENT_SIZE) || count == 0) {
        return code == NVML_SUCCESS;
    }
    // Room for more than were counted: samples keep arriving between the
    // two calls.
    std::vector<nvmlProcessUtilizationSample_t> samples(std::min(count * 2 + 16, kMaxSamples));
    count = static_cast<unsigned>(samples.size());
    code = sampled(device, samples.data(), &count, since_us);
    if (code == NVML_ERROR_NOT_FOUND) {
        return true;
    }
    if (code != NVML_SUCCESS) {
        return false;
    }
    for (unsigned i = 0; i < count && i < samples.size(); ++i) {
        out.push_back(
            {static_cast<int32_t>(samples[i].pid), samples[i].smUtil, samples[i].timeStamp});
    }
    return true;
}

} // namespace gpuinit::limit
