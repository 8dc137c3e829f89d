// nvidia-smi's output (names.hpp): -L, mig -lgi, mig -lci and -q -x, one
// input cut at NUL bytes into these four texts (a fifth part is -lgipp, a
// sixth -lgip); each parser alone, then the join and its application to
// instances. Seeds include the real captures of tests/fixture/captures.
#include "fuzz_check.hpp"
#include "gpuinit/host/gpu_selector.hpp"
#include "gpuinit/host/pci.hpp"
#include "gpuinit/mig/names.hpp"

#include <algorithm>
#include <map>

namespace {

using namespace gpuinit;
using namespace gpuinit::fuzz;

// A failed parse names its text and a line in it.
template <typename T>
void check_parse(const Result<T>& parsed, std::string_view text, std::string_view source) {
    if (!parsed) {
        check_diagnostic(parsed.error());
        FUZZ_CHECK(parsed.error().where.file == source);
        FUZZ_CHECK(parsed.error().where.line <= std::max<size_t>(1, line_count(text)));
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<std::string_view> parts = split_at_nul(as_text(data, size));
    NvidiaSmiTexts texts;
    std::optional<std::string>* slots[] = {&texts.list, &texts.lgi, &texts.lci, &texts.query_xml};
    for (size_t i = 0; i < parts.size() && i < std::size(slots); ++i) {
        *slots[i] = std::string(parts[i]);
    }
    texts.list_source = "L.txt";
    texts.lgi_source = "mig-lgi.txt";
    texts.lci_source = "mig-lci.txt";
    texts.query_source = "q.xml";

    std::string_view list_text = texts.list ? std::string_view(*texts.list) : "";
    auto list = parse_nvidia_smi_list(list_text, "L.txt");
    check_parse(list, list_text, "L.txt");
    if (list) {
        for (const SmiListGpu& gpu : *list) {
            FUZZ_CHECK(valid_gpu_uuid(gpu.uuid));
            FUZZ_CHECK(gpu.line >= 1 && gpu.line <= line_count(list_text));
            for (const SmiListMig& mig : gpu.migs) {
                FUZZ_CHECK(valid_mig_uuid(mig.uuid) && !old_mig_uuid_form(mig.uuid));
                FUZZ_CHECK(valid_mig_profile(mig.profile));
                FUZZ_CHECK(mig.line > gpu.line);
            }
        }
    }
    if (texts.lgi) {
        auto lgi = parse_nvidia_smi_lgi(*texts.lgi, "mig-lgi.txt");
        check_parse(lgi, *texts.lgi, "mig-lgi.txt");
        for (const SmiGpuInstance& row : lgi.value_or({})) {
            FUZZ_CHECK(row.gi <= 14 && valid_mig_profile(row.profile));
        }
    }
    if (texts.lci) {
        auto lci = parse_nvidia_smi_lci(*texts.lci, "mig-lci.txt");
        check_parse(lci, *texts.lci, "mig-lci.txt");
        for (const SmiComputeInstance& row : lci.value_or({})) {
            FUZZ_CHECK(row.gi <= 14 && row.ci <= 7 && valid_mig_profile(row.profile));
        }
    }
    if (texts.query_xml) {
        auto xml = parse_nvidia_smi_query_xml(*texts.query_xml, "q.xml");
        check_parse(xml, *texts.query_xml, "q.xml");
        for (const SmiQueryGpu& gpu : xml.value_or({})) {
            FUZZ_CHECK(valid_gpu_uuid(gpu.uuid));
            FUZZ_CHECK(gpu.bdf.empty() || normalize_bdf(gpu.bdf) == gpu.bdf);
            FUZZ_CHECK(!gpu.mig_not_supported || !gpu.mig_current);
            for (const SmiQueryMig& mig : gpu.migs) {
                FUZZ_CHECK(mig.gi <= 14 && mig.ci <= 7);
            }
        }
    }

    if (parts.size() > 4) {
        auto lgipp = parse_nvidia_smi_lgipp(parts[4], "mig-lgipp.txt");
        check_parse(lgipp, parts[4], "mig-lgipp.txt");
        for (const SmiPlacements& row : lgipp.value_or({})) {
            FUZZ_CHECK(row.size >= 1 && row.size <= 64);
            FUZZ_CHECK(!row.starts.empty() && row.starts.size() <= 64);
            for (unsigned start : row.starts) {
                FUZZ_CHECK(start < 64);
            }
        }
    }

    if (parts.size() > 5) {
        auto lgip = parse_nvidia_smi_lgip(parts[5], "mig-lgip.txt");
        check_parse(lgip, parts[5], "mig-lgip.txt");
        for (const SmiGiProfile& row : lgip.value_or({})) {
            FUZZ_CHECK(valid_mig_profile(row.profile) && row.profile_id <= 255);
            FUZZ_CHECK(row.free <= row.total && row.total <= 255);
            const SmiGiProfile* found = find_gi_profile(*lgip, row.gpu_index, row.profile);
            FUZZ_CHECK(found != nullptr && found->profile_id == row.profile_id);
        }
    }

    Diagnostics diagnostics;
    auto names = mig_names_from_nvidia_smi(texts, diagnostics);
    FUZZ_CHECK(names.ok() || !list.ok() || !names.error().where.file.empty());
    if (!list) {
        FUZZ_CHECK(!names);
    }
    if (!names) {
        check_diagnostic(names.error());
        return 0;
    }
    // -L's name for a MIG device is the name of the instance it is joined
    // to (the name NVML and Slurm's AutoDetect=nvml use), whatever -lci says.
    std::map<std::string, std::string> list_profiles; // MIG UUID -> -L's profile
    for (const SmiListGpu& gpu : *list) {
        for (const SmiListMig& mig : gpu.migs) {
            list_profiles[mig.uuid] = mig.profile;
        }
    }
    // Only well-formed names come out, and each MIG UUID names one instance.
    std::vector<std::string> uuids;
    std::vector<MigInstance> instances;
    for (const auto& [key, name] : names->instances()) {
        FUZZ_CHECK(key.gi <= 14 && key.ci <= 7);
        FUZZ_CHECK(name.profile.empty() || valid_mig_profile(name.profile));
        FUZZ_CHECK(name.uuid.empty() || valid_mig_uuid(name.uuid));
        FUZZ_CHECK(!name.uuid.empty() || !name.profile.empty());
        if (!name.uuid.empty()) {
            uuids.push_back(name.uuid);
            auto listed = list_profiles.find(name.uuid);
            FUZZ_CHECK(listed != list_profiles.end() && listed->second == name.profile);
        }
        FUZZ_CHECK(names->gpu(key.gpu_uuid) != nullptr);
        MigInstance instance;
        instance.gpu_uuid = key.gpu_uuid;
        instance.gi = key.gi;
        instance.ci = key.ci;
        instances.push_back(instance);
    }
    std::sort(uuids.begin(), uuids.end());
    FUZZ_CHECK(std::adjacent_find(uuids.begin(), uuids.end()) == uuids.end());
    // One instance no source names.
    MigInstance unnamed;
    unnamed.gpu_minor = 9;
    unnamed.gi = 3;
    unnamed.ci = 7;
    instances.push_back(unnamed);
    apply_mig_names(instances, *names, diagnostics);
    for (const MigInstance& instance : instances) {
        const MigName* name = names->find(instance.gpu_uuid, instance.gi, instance.ci);
        if (instance.gpu_uuid.empty()) {
            FUZZ_CHECK(instance.profile.empty() && instance.uuid.empty());
        } else {
            FUZZ_CHECK(name != nullptr && name->profile == instance.profile &&
                       name->uuid == instance.uuid);
        }
    }
    FUZZ_CHECK(diagnostics.count(Severity::Error) == 0);
    for (const Diagnostic& diagnostic : diagnostics.items()) {
        check_diagnostic(diagnostic);
    }
    return 0;
}
