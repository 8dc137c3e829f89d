#include "gpuinit/host/machine.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/gpu_information.hpp"
#include "gpuinit/host/pci.hpp"
#include "gpuinit/host/proc_devices.hpp"

#include <algorithm>
#include <cerrno>

namespace gpuinit {

namespace {

bool listed(const Machine& machine, const std::string& bdf) {
    return std::any_of(machine.gpus.begin(), machine.gpus.end(),
                       [&](const Gpu& gpu) { return gpu.bdf == bdf; }) ||
           std::any_of(machine.unusable.begin(), machine.unusable.end(),
                       [&](const UnusableGpu& gpu) { return gpu.bdf == bdf; });
}

// The majors, rejecting what no kernel would register: 0 (unnamed) and 1
// (mem), and a uvm or caps major equal to the GPUs' (that would make
// /dev/nvidia-uvm a GPU node and open it to everyone).
Status read_majors(const Sysroot& root, const std::string& text, Machine& machine) {
    std::string source = root.display("proc/devices");
    auto devices = parse_proc_devices(text, source);
    if (!devices) {
        return devices.error();
    }
    const char* gpu_name = devices->major("nvidia") ? "nvidia" : "nvidia-frontend";
    machine.nvidia_major = devices->major(gpu_name);
    machine.uvm_major = devices->major("nvidia-uvm");
    machine.caps_major = devices->major("nvidia-caps");
    machine.modeset_loaded = devices->major("nvidia-modeset").has_value() ||
                             root.exists("sys/module/nvidia_modeset").value_or(false);
    for (const char* name : {gpu_name, "nvidiactl", "nvidia-uvm", "nvidia-caps"}) {
        auto major = devices->major(name);
        if (major && *major <= 1) {
            return parse_error(source, devices->line_of(name),
                               format("%s has major %u, which no driver gets (0 is unnamed, 1 is"
                                      " mem); nothing was changed",
                                      name, *major));
        }
    }
    for (const char* name : {"nvidia-uvm", "nvidia-caps"}) {
        auto major = devices->major(name);
        if (major && machine.nvidia_major && *major == *machine.nvidia_major) {
            return parse_error(source, devices->line_of(name),
                               format("%s has major %u, the GPUs' own; its nodes would open the"
                                      " GPUs to everyone, so nothing was changed",
                                      name, *major));
        }
    }
    return {};
}

void read_driver_view(const Sysroot& root, const std::vector<std::string>& entries,
                      Machine& machine, Diagnostics& diagnostics) {
    for (const std::string& entry : entries) {
        std::string dir = std::string(kDriverGpusPath) + "/" + entry;
        auto bdf = normalize_bdf(entry);
        if (!bdf) {
            diagnostics.warning(root.display(dir) + ": not a PCI address; ignored");
            continue;
        }
        std::string rel = dir + "/information";
        std::string source = root.display(rel);
        auto text = root.read_file(rel);
        if (!text) {
            machine.unusable.push_back({*bdf, text.error().text(), Severity::Error});
            continue;
        }
        auto info = parse_gpu_information(*text, source);
        if (!info) {
            machine.unusable.push_back({*bdf, info.error().text(), Severity::Error});
            continue;
        }
        if (!info->bus_location.empty() && normalize_bdf(info->bus_location) != *bdf) {
            diagnostics.warning(format("%s:%zu: Bus Location is %s, not %s as the directory says;"
                                       " the directory's address is used",
                                       source.c_str(), info->bus_location_line,
                                       quote(info->bus_location).c_str(), bdf->c_str()));
        }
        if (info->excluded) {
            machine.unusable.push_back({*bdf, "excluded by the driver (NVreg_ExcludedGpus)"});
            continue;
        }
        auto clash = std::find_if(machine.gpus.begin(), machine.gpus.end(),
                                  [&](const Gpu& gpu) { return gpu.minor == info->minor; });
        if (clash != machine.gpus.end()) {
            machine.unusable.push_back({*bdf,
                                        format("%s: Device Minor %u is already used by %s",
                                               source.c_str(), info->minor, clash->bdf.c_str()),
                                        Severity::Error});
            continue;
        }
        machine.gpus.push_back(Gpu{*bdf, info->minor, info->uuid, info->model});
    }
}

// Two GPUs that report one UUID cannot be told apart by a UUID rule: both
// lose their node rather than one getting the other's access.
void reject_duplicate_uuids(Machine& machine) {
    std::vector<Gpu> kept;
    for (const Gpu& gpu : machine.gpus) {
        auto twin = std::find_if(machine.gpus.begin(), machine.gpus.end(), [&](const Gpu& other) {
            return &other != &gpu && !gpu.uuid.empty() && same_uuid(other.uuid, gpu.uuid);
        });
        if (twin == machine.gpus.end()) {
            kept.push_back(gpu);
            continue;
        }
        machine.unusable.push_back(
            {gpu.bdf,
             format("it reports UUID %s, as does %s: the driver's view is inconsistent and a"
                    " UUID rule cannot tell them apart (check the driver and"
                    " /proc/driver/nvidia/gpus/*/information)",
                    gpu.uuid.c_str(), twin->bdf.c_str()),
             Severity::Error});
    }
    machine.gpus = std::move(kept);
}

// The driver names only the GPUs it lists (its Model line); pci.ids names
// the ones it does not list too.
void add_pci_names(const Sysroot& root, Machine& machine, Diagnostics& diagnostics) {
    std::vector<std::string> bdfs;
    for (const Gpu& gpu : machine.gpus) {
        bdfs.push_back(gpu.bdf);
    }
    for (const UnusableGpu& gpu : machine.unusable) {
        bdfs.push_back(gpu.bdf);
    }
    std::vector<std::string> names = pci_device_names(root, bdfs, diagnostics);
    for (size_t i = 0; i < bdfs.size(); ++i) {
        if (!names[i].empty()) {
            machine.pci_names[bdfs[i]] = std::move(names[i]);
        }
    }
}

} // namespace

Result<Machine> read_driver_gpus(const Sysroot& root, Diagnostics& diagnostics) {
    Machine machine;
    auto entries = root.list_dir(kDriverGpusPath);
    if (!entries) {
        if (entries.error().code != ENOENT) {
            return entries.error();
        }
        machine.minors_from_driver = false;
        return machine;
    }
    read_driver_view(root, *entries, machine, diagnostics);
    reject_duplicate_uuids(machine);
    std::sort(machine.gpus.begin(), machine.gpus.end(),
              [](const Gpu& a, const Gpu& b) { return a.minor < b.minor; });
    return machine;
}

const std::string& Machine::pci_name(const std::string& bdf) const {
    static const std::string kNone;
    auto found = pci_names.find(bdf);
    return found == pci_names.end() ? kNone : found->second;
}

std::string Gpu::subject() const {
    return format("GPU %u (%s)", minor, bdf.c_str());
}

Result<Machine> discover_machine(const Sysroot& root, Diagnostics& diagnostics,
                                 const PciNeed& pci) {
    Machine machine;
    // Read at once: a missing file (ENOENT, ENOTDIR) is what exists() would
    // have said no to, and any other error the one the read after it gave.
    auto devices_text = root.read_file("proc/devices");
    if (devices_text) {
        if (auto read = read_majors(root, *devices_text, machine); !read) {
            return read.error();
        }
    } else if (devices_text.error().code != ENOENT && devices_text.error().code != ENOTDIR) {
        return devices_text.error();
    }

    auto view = read_driver_gpus(root, diagnostics);
    if (!view) {
        // Present but unreadable (EACCES, ENOTDIR, ELOOP): guessing minors
        // from PCI order here would hide a broken /proc behind a warning.
        Diagnostic broken = view.error();
        broken.message += "; the driver's GPU minors cannot be read, nothing was changed (check"
                          " that proc is mounted and " +
                          root.display(kDriverGpusPath) + " is the driver's directory)";
        return broken;
    }
    machine.minors_from_driver = view->minors_from_driver;
    machine.gpus = std::move(view->gpus);
    machine.unusable = std::move(view->unusable);

    // Without the driver's view, every minor is a guess from PCI order.
    PciNeed need = machine.minors_from_driver ? pci : PciNeed{};
    if (need.scope != PciNeed::Scope::None) {
        std::optional<std::string> only;
        if (need.scope == PciNeed::Scope::One) {
            only = need.bdf;
        }
        // What the driver lists needs no second look: only GPUs it does not
        // list are reported from the walk.
        std::vector<std::string> known;
        known.reserve(machine.gpus.size() + machine.unusable.size());
        for (const Gpu& gpu : machine.gpus) {
            known.push_back(gpu.bdf);
        }
        for (const UnusableGpu& gpu : machine.unusable) {
            known.push_back(gpu.bdf);
        }
        auto gpus = scan_nvidia_gpus(root, only, known);
        if (!gpus) {
            if (!machine.minors_from_driver && machine.nvidia_major) {
                return gpus.error();
            }
            // The GPUs the driver lists still get their nodes; only the check
            // for GPUs it does not list is lost, which the admin must hear of.
            diagnostics.error(gpus.error().text() +
                              "; GPUs not bound to the nvidia driver cannot be checked (fix or"
                              " remove that entry and rerun)");
        } else if (machine.minors_from_driver) {
            for (const PciFunction& function : *gpus) {
                if (!listed(machine, function.bdf)) {
                    machine.unusable.push_back(
                        {function.bdf, "not bound to the nvidia driver (vfio-pci, or excluded)"});
                }
            }
        } else {
            unsigned next_guess = 0;
            for (const PciFunction& function : *gpus) {
                // 254 and 255 are nvidia-modeset's and nvidiactl's.
                if (next_guess > kMaxGpuMinor) {
                    machine.unusable.push_back(
                        {function.bdf,
                         format("more than %u GPUs in PCI order and no driver view to take minors"
                                " from; load a driver that has /proc/driver/nvidia/gpus",
                                kMaxGpuMinor + 1),
                         Severity::Error});
                    continue;
                }
                machine.gpus.push_back(Gpu{function.bdf, next_guess++, {}, {}});
            }
            if (machine.nvidia_major) {
                diagnostics.warning(root.display(kDriverGpusPath) +
                                    " is absent: minors guessed from PCI order, which is wrong"
                                    " when the driver probes in another order");
            }
        }
    }
    std::sort(machine.gpus.begin(), machine.gpus.end(),
              [](const Gpu& a, const Gpu& b) { return a.minor < b.minor; });
    if (pci.names) {
        add_pci_names(root, machine, diagnostics);
    }
    return machine;
}

} // namespace gpuinit
