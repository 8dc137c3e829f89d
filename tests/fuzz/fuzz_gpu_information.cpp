// /proc/driver/nvidia/gpus/<bdf>/information: parse_gpu_information and
// what the callers do with the result (the UUID and bus location become GPU
// selectors and PCI addresses).
#include "fuzz_check.hpp"
#include "gpuinit/host/gpu_information.hpp"
#include "gpuinit/host/gpu_selector.hpp"
#include "gpuinit/host/kv_reader.hpp"
#include "gpuinit/host/pci.hpp"

#include <algorithm>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace gpuinit;
    using namespace gpuinit::fuzz;
    std::string_view text = as_text(data, size);
    auto info = parse_gpu_information(text, "information");
    auto entries = read_key_values(text, "information", KeyStyle::Words);
    if (!info) {
        check_diagnostic(info.error());
        FUZZ_CHECK(info.error().where.line <= std::max<size_t>(1, line_count(text)));
        return 0;
    }
    // A file the parser takes is one the key:value reader takes.
    FUZZ_CHECK(entries.ok());
    FUZZ_CHECK(info->minor <= kMaxGpuMinor);
    const KeyValue* minor = find_key(*entries, "Device Minor");
    FUZZ_CHECK(minor != nullptr && parse_decimal(minor->value) == info->minor);

    // The minor, and the UUID when there is one, name this GPU as selectors.
    auto by_minor = GpuSelector::parse(std::to_string(info->minor));
    FUZZ_CHECK(by_minor.ok() && by_minor->kind() == GpuSelector::Kind::Minor);
    GpuIdentity identity{info->minor, normalize_bdf(info->bus_location).value_or(""), info->uuid};
    FUZZ_CHECK(by_minor->matches(identity));
    if (!info->uuid.empty()) {
        FUZZ_CHECK(valid_gpu_uuid(info->uuid));
        auto by_uuid = GpuSelector::parse(info->uuid);
        FUZZ_CHECK(by_uuid.ok() && by_uuid->kind() == GpuSelector::Kind::Uuid);
        FUZZ_CHECK(by_uuid->matches(identity));
    }
    if (!identity.bdf.empty()) {
        auto by_bdf = GpuSelector::parse(identity.bdf);
        FUZZ_CHECK(by_bdf.ok() && by_bdf->kind() == GpuSelector::Kind::Bdf);
        FUZZ_CHECK(by_bdf->matches(identity));
    }
    // Values come from the reader: trimmed, no control characters.
    for (const std::string& value : {info->model, info->uuid, info->bus_location}) {
        FUZZ_CHECK(trim(value) == value);
        FUZZ_CHECK(std::none_of(value.begin(), value.end(), [](char c) {
            return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
        }));
    }
    FUZZ_CHECK(info->bus_location_line != 0 || info->bus_location.empty());
    FUZZ_CHECK(info->bus_location_line <= line_count(text));
    const KeyValue* excluded = find_key(*entries, "GPU Excluded");
    FUZZ_CHECK(info->excluded == (excluded != nullptr && excluded->value == "Yes"));
    // Messages quote the values the callers print.
    FUZZ_CHECK(one_safe_line(quote(info->model)));
    FUZZ_CHECK(one_safe_line(quote(info->bus_location)));
    return 0;
}
