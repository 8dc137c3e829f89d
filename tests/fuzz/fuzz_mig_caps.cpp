// The driver's MIG capability files (mig_topology.hpp): the input cut at
// NUL bytes into /proc/driver/nvidia-caps/mig-minors, then access files
// (/proc/driver/nvidia/capabilities/.../access). Their format is
// nv_procfs_read_mig_minors ("gpu%d/%s %d") and nv_cap_procfs_read
// ("DeviceFileMinor: %d", "DeviceFileMode: %d", "DeviceFileModify: %d") in
// kernel-open/nvidia/nv-caps.c of NVIDIA/open-gpu-kernel-modules (tag
// 595.45.04). Whatever they hold: the table maps names to distinct minors,
// and an access file gives a mode of at most 0777 and a modify of 0 or 1.
#include "fuzz_check.hpp"
#include "gpuinit/host/mig_topology.hpp"

#include <set>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace gpuinit;
    using namespace gpuinit::fuzz;
    std::vector<std::string_view> parts = split_at_nul(as_text(data, size));
    auto minors = parse_mig_minors(parts[0], "mig-minors");
    if (!minors) {
        check_diagnostic(minors.error());
        FUZZ_CHECK(minors.error().where.file == "mig-minors");
    } else {
        std::set<unsigned> seen;
        for (const auto& [name, minor] : *minors) {
            FUZZ_CHECK(!name.empty());
            FUZZ_CHECK(one_safe_line(name));
            FUZZ_CHECK(seen.insert(minor).second);
        }
        FUZZ_CHECK(minors->size() <= line_count(parts[0]));
    }
    for (size_t i = 1; i < parts.size(); ++i) {
        auto cap = parse_mig_access(parts[i], "access");
        if (!cap) {
            check_diagnostic(cap.error());
            continue;
        }
        FUZZ_CHECK(cap->mode <= 0777);
        // A number the driver's 20-bit minors can hold.
        FUZZ_CHECK(cap->minor < (1u << 20));
    }
    return 0;
}
