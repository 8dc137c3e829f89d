// The daemon's NVML: the driver's libnvidia-ml.so.1 through libgpuinit's
// NVML module (gpuinit/nvml), as the NvmlSource DaemonCore reads.
#pragma once

#include "gpuinit/limit/daemon.hpp"
#include "gpuinit/nvml/library.hpp"
#include "gpuinit/nvml/process_list.hpp"

#include <memory>
#include <string>

namespace gpuinit::limit {

class LibraryNvml final : public NvmlSource {
  public:
    // Loads and initializes NVML; when it cannot, the source is not
    // available() and problem() says why.
    explicit LibraryNvml(const std::string& library = nvml::kLibraryName);

    const std::string& problem() const { return problem_; }
    // Whether the driver has any process list / per-process utilization.
    bool has_processes() const;
    bool has_utilization() const;

    bool available() const override { return library_ != nullptr; }
    std::vector<NvmlDevice> devices() override;
    ProcessListing processes(unsigned index, std::vector<NvmlProcess>& out,
                             ProcessListDetail& detail) override;
    bool utilization(unsigned index, uint64_t since_us, std::vector<NvmlSample>& out) override;

  private:
    nvmlDevice_t handle(unsigned index) const;

    std::unique_ptr<nvml::Library> library_;
    std::unique_ptr<nvml::ProcessLister> lister_;
    std::string problem_;
};

} // namespace gpuinit::limit
