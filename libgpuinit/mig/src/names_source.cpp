#include "gpuinit/mig/names_source.hpp"

#include "gpuinit/mig/names.hpp"
#include "gpuinit/mig/names_file.hpp"
#include "gpuinit/mig/nvml.hpp"

#include <optional>

namespace gpuinit {

namespace {

// Names from the driver now: NVML (dynamic build), else nvidia-smi.
Result<MigNames> driver_names(Diagnostics& diagnostics) {
    std::string nvml_failure;
    if (nvml_supported()) {
        Diagnostics nvml_diagnostics;
        auto names = mig_names_from_nvml(nvml_diagnostics);
        if (names) {
            for (const Diagnostic& item : nvml_diagnostics.items()) {
                diagnostics.add(item);
            }
            return names;
        }
        nvml_failure = "NVML: " + names.error().message + "; ";
    }
    auto names = run_nvidia_smi(diagnostics);
    if (!names) {
        Diagnostic failure = names.error();
        failure.message = nvml_failure + failure.message;
        return failure;
    }
    return names;
}

std::string applied(std::vector<MigInstance>& instances, const MigNames& names,
                    Diagnostics& diagnostics) {
    apply_mig_names(instances, names, diagnostics);
    return names.source();
}

} // namespace

Result<std::string> name_mig_instances(const Sysroot& root, const MigNamesRequest& request,
                                       std::vector<MigInstance>& instances,
                                       Diagnostics& diagnostics) {
    if (instances.empty()) {
        return std::string();
    }
    if (!request.smi_output.empty()) {
        auto names = load_nvidia_smi_output(request.smi_output, diagnostics);
        if (!names) {
            return names.error();
        }
        return applied(instances, *names, diagnostics);
    }
    std::optional<MigNames> file;
    if (request.first == MigNamesFirst::File) {
        if (auto read = read_mig_names_file(root); !read) {
            diagnostics.warning(read.error().text());
        } else {
            file = std::move(*read);
        }
        if (file && mig_names_cover(*file, instances)) {
            return applied(instances, *file, diagnostics);
        }
    }
    auto live = driver_names(diagnostics);
    if (live) {
        return applied(instances, *live, diagnostics);
    }
    if (file) {
        diagnostics.warning("MIG names from the driver: " + live.error().message +
                            "; using the names file of the last gpu-mig sync, which lacks some");
        return applied(instances, *file, diagnostics);
    }
    diagnostics.warning("MIG names from the driver: " + live.error().message +
                        "; profiles and MIG UUIDs stay unknown");
    return std::string();
}

} // namespace gpuinit
