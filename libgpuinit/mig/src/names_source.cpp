#include "gpuinit/mig/names_source.hpp"

#include "gpuinit/mig/names.hpp"
#include "gpuinit/mig/names_file.hpp"
#include "gpuinit/mig/nvml.hpp"

#include <algorithm>
#include <optional>

namespace gpuinit {

namespace {

// What failed, without the advice after it: the caller says the fix once.
// NVML's messages go on with the loader's or NVML's own words after ": "
// or a parenthesis; its first clause says enough.
std::string without_advice(const std::string& message, bool first_clause = false) {
    size_t end = message.find("; ");
    if (first_clause) {
        end = std::min({end, message.find(": "), message.find(" (")});
    }
    return message.substr(0, end);
}

// Names from the driver now: NVML (dynamic build), else nvidia-smi. A
// failure says, briefly, why each gave none.
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
        nvml_failure = "NVML: " + without_advice(names.error().message, true) + "; ";
    }
    auto names = run_nvidia_smi(diagnostics);
    if (!names) {
        Diagnostic failure = names.error();
        failure.message = nvml_failure + without_advice(failure.message);
        return failure;
    }
    return names;
}

std::string applied(std::vector<MigInstance>& instances, const MigNames& names,
                    Diagnostics& diagnostics, std::string_view why = {}) {
    apply_mig_names(instances, names, diagnostics, why);
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
    // One warning either way: what stays unknown, and why the driver did
    // not name it.
    const std::string& why = live.error().message;
    if (file) {
        return applied(instances, *file, diagnostics, why);
    }
    return applied(instances, MigNames(), diagnostics, why);
}

} // namespace gpuinit
