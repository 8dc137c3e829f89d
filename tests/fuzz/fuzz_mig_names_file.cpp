// The MIG names file (names_file.hpp), <root>/run/gpu-mig/names, which job
// users read instead of asking the driver: whatever it holds, only
// well-formed names come out, and what comes out survives its own
// rendering and parse unchanged.
#include "fuzz_check.hpp"
#include "gpuinit/host/gpu_selector.hpp"
#include "gpuinit/mig/names.hpp"
#include "gpuinit/mig/names_file.hpp"

#include <algorithm>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace gpuinit;
    using namespace gpuinit::fuzz;
    std::string_view text = as_text(data, size);
    auto names = parse_mig_names_file(text, "names");
    if (!names) {
        check_diagnostic(names.error());
        FUZZ_CHECK(names.error().where.file == "names");
        FUZZ_CHECK(names.error().where.line >= 1 &&
                   names.error().where.line <= std::max<size_t>(1, line_count(text)));
        return 0;
    }
    std::vector<MigInstance> instances;
    for (const auto& [key, name] : names->instances()) {
        // Kept lowercase ("gpu-..."), so that lookups ignore case.
        FUZZ_CHECK(key.gpu_uuid.starts_with("gpu-") &&
                   valid_gpu_uuid("GPU-" + key.gpu_uuid.substr(4)));
        FUZZ_CHECK(name.profile.empty() || valid_mig_profile(name.profile));
        FUZZ_CHECK(name.uuid.empty() || valid_mig_uuid(name.uuid));
        MigInstance instance;
        instance.gpu_uuid = key.gpu_uuid;
        instance.gi = key.gi;
        instance.ci = key.ci;
        instance.profile = name.profile;
        instance.uuid = name.uuid;
        instances.push_back(instance);
    }
    auto again = parse_mig_names_file(render_mig_names_file(instances, "fuzz"), "names");
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(again->instances().size() == names->instances().size());
    for (const auto& [key, name] : names->instances()) {
        const MigName* found = again->find(key.gpu_uuid, key.gi, key.ci);
        FUZZ_CHECK(found != nullptr && found->profile == name.profile && found->uuid == name.uuid);
    }
    return 0;
}
