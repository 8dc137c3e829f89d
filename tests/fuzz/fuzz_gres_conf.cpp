// gres.conf (gres.hpp), which `gpu-mig env` reads as a TaskProlog and
// `gres --check` compares: the file, then after a NUL the node name to
// filter on. The keys are those of Slurm's parser (SchedMD/slurm,
// src/interfaces/gres.c, _gres_options: Name, Type, File, MultipleFiles,
// Count, Cores, CPUs, Links, Flags, AutoDetect, and NodeName lines). Also
// the --type-map file, which shares the line reader.
#include "fuzz_check.hpp"
#include "gpuinit/mig/gres.hpp"

#include <algorithm>

namespace {

using namespace gpuinit;
using namespace gpuinit::fuzz;

template <typename T>
void check_failure(const Result<T>& parsed, std::string_view text, std::string_view source) {
    if (!parsed) {
        check_diagnostic(parsed.error());
        FUZZ_CHECK(parsed.error().where.file == source);
        FUZZ_CHECK(parsed.error().where.line >= 1);
        FUZZ_CHECK(parsed.error().where.line <= std::max<size_t>(1, line_count(text)));
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<std::string_view> parts = split_at_nul(as_text(data, size));
    std::string_view text = parts[0];
    std::string_view node = parts.size() > 1 ? parts[1] : std::string_view();
    auto records = parse_gres_conf(text, "gres.conf", node);
    check_failure(records, text, "gres.conf");
    if (records) {
        size_t previous = 0;
        for (const GresConfRecord& record : *records) {
            // Every device names a file, and comes from a line of the text,
            // in file order.
            FUZZ_CHECK(!record.files.empty());
            FUZZ_CHECK(record.line >= 1 && record.line <= line_count(text));
            FUZZ_CHECK(record.line >= previous);
            previous = record.line;
            for (const std::string& file : record.files) {
                FUZZ_CHECK(!file.empty());
            }
        }
        // Without a node filter nothing is skipped: a filter only removes.
        auto all = parse_gres_conf(text, "gres.conf", {});
        if (all) {
            FUZZ_CHECK(all->size() >= records->size());
        }
    }
    auto map = parse_gres_type_map(text, "type-map");
    check_failure(map, text, "type-map");
    return 0;
}
