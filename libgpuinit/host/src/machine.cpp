#include "gpuinit/host/machine.hpp"

#include "gpuinit/host/pci.hpp"
#include "gpuinit/host/procfs.hpp"

#include <algorithm>
#include <cerrno>

namespace gpuinit {

namespace {

constexpr std::string_view kGpusDir = "proc/driver/nvidia/gpus";

bool has_gpu(const Machine& machine, const std::string& bdf) {
    return std::any_of(machine.gpus.begin(), machine.gpus.end(),
                       [&](const Gpu& gpu) { return gpu.bdf == bdf; });
}

bool is_unusable(const Machine& machine, const std::string& bdf) {
    return std::any_of(machine.unusable.begin(), machine.unusable.end(),
                       [&](const UnusableGpu& gpu) { return gpu.bdf == bdf; });
}

void read_driver_view(const Sysroot& root, const std::vector<std::string>& entries,
                      Machine& machine) {
    for (const std::string& entry : entries) {
        auto bdf = normalize_bdf(entry);
        if (!bdf) {
            machine.warnings.push_back(root.display(std::string(kGpusDir) + "/" + entry) +
                                       ": not a PCI address; ignored");
            continue;
        }
        std::string rel = std::string(kGpusDir) + "/" + entry + "/information";
        auto text = root.read_file(rel, 64u << 10);
        if (!text) {
            machine.unusable.push_back({*bdf, text.error().message, true});
            continue;
        }
        auto info = parse_gpu_information(*text, root.display(rel));
        if (!info) {
            machine.unusable.push_back({*bdf, info.error().message, true});
            continue;
        }
        if (info->excluded) {
            machine.unusable.push_back({*bdf, "excluded by the driver (NVreg_ExcludedGpus)"});
            continue;
        }
        auto clash = std::find_if(machine.gpus.begin(), machine.gpus.end(),
                                  [&](const Gpu& gpu) { return gpu.minor == info->minor; });
        if (clash != machine.gpus.end()) {
            machine.unusable.push_back({*bdf,
                                        root.display(rel) + ": Device Minor " +
                                            std::to_string(info->minor) + " is already used by " +
                                            clash->bdf,
                                        true});
            continue;
        }
        machine.gpus.push_back(Gpu{*bdf, info->minor, info->uuid, info->model});
    }
}

} // namespace

Result<Machine> discover_machine(const Sysroot& root) {
    Machine machine;
    if (root.exists("proc/devices")) {
        auto text = root.read_file("proc/devices");
        if (!text) {
            return text.error();
        }
        auto devices = parse_proc_devices(*text, root.display("proc/devices"));
        if (!devices) {
            return devices.error();
        }
        machine.nvidia_major = devices->major("nvidia");
        if (!machine.nvidia_major) {
            machine.nvidia_major = devices->major("nvidia-frontend");
            machine.legacy_frontend = machine.nvidia_major.has_value();
        }
        machine.uvm_major = devices->major("nvidia-uvm");
        machine.modeset_loaded = devices->major("nvidia-modeset").has_value() ||
                                 root.exists("sys/module/nvidia_modeset");
    }

    auto driver_entries = root.list_dir(kGpusDir);
    if (!driver_entries && driver_entries.error().code != ENOENT) {
        // Present but unreadable (EACCES, ENOTDIR, ELOOP): guessing minors
        // from PCI order here would hide a broken /proc behind a warning.
        return Error{driver_entries.error().code,
                     driver_entries.error().message +
                         "; the driver's GPU minors cannot be read, nothing was changed (check"
                         " that proc is mounted and " +
                         root.display(kGpusDir) + " is the driver's directory)"};
    }
    machine.minors_from_driver = driver_entries.ok();
    if (driver_entries) {
        read_driver_view(root, *driver_entries, machine);
    }

    auto pci = scan_pci(root);
    if (!pci) {
        // Without the driver's view the minors must come from PCI order.
        if (!machine.minors_from_driver && machine.nvidia_major) {
            return pci.error();
        }
        // The GPUs the driver lists still get their nodes; only the check
        // for GPUs it does not list is lost, which the admin must hear of.
        machine.errors.push_back(pci.error().message +
                                 "; GPUs not bound to the nvidia driver cannot be checked (fix"
                                 " or remove that entry and rerun)");
    } else {
        unsigned next_guess = 0;
        for (const PciFunction& function : *pci) {
            if (!is_nvidia_gpu(function)) {
                continue;
            }
            if (!machine.minors_from_driver) {
                machine.gpus.push_back(Gpu{function.bdf, next_guess++, {}, {}});
            } else if (!has_gpu(machine, function.bdf) && !is_unusable(machine, function.bdf)) {
                machine.unusable.push_back(
                    {function.bdf, "not bound to the nvidia driver (vfio-pci, or excluded)"});
            }
        }
        if (!machine.minors_from_driver && machine.nvidia_major) {
            machine.warnings.push_back(root.display(kGpusDir) +
                                       " is absent: minors guessed from PCI order, which is"
                                       " wrong when the driver probes in another order");
        }
    }
    std::sort(machine.gpus.begin(), machine.gpus.end(),
              [](const Gpu& a, const Gpu& b) { return a.minor < b.minor; });
    return machine;
}

} // namespace gpuinit
