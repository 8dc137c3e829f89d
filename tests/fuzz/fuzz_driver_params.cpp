// /proc/driver/nvidia/params: parse_driver_params, then raw() and number()
// for every parameter it holds and those the driver check asks for.
#include "fuzz_check.hpp"
#include "gpuinit/host/driver_params.hpp"
#include "gpuinit/host/kv_reader.hpp"

#include <algorithm>

namespace {

bool quoted(std::string_view value) {
    return value.size() >= 2 && value.front() == '"' && value.back() == '"';
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace gpuinit;
    using namespace gpuinit::fuzz;
    std::string_view text = as_text(data, size);
    auto params = parse_driver_params(text, "/proc/driver/nvidia/params");
    if (!params) {
        check_diagnostic(params.error());
        FUZZ_CHECK(params.error().where.line <= std::max<size_t>(1, line_count(text)));
        return 0;
    }
    FUZZ_CHECK(params->values.size() == params->lines.size());
    FUZZ_CHECK(params->source == "/proc/driver/nvidia/params");
    auto entries = read_key_values(text, "params", KeyStyle::Identifier);
    FUZZ_CHECK(entries.ok() && entries->size() == params->values.size());
    for (size_t i = 0; i < params->values.size(); ++i) {
        const auto& [name, value] = params->values[i];
        FUZZ_CHECK((*entries)[i].key == name && (*entries)[i].value == value);
        FUZZ_CHECK(params->lines[i] == (*entries)[i].line);
        // Names are unique, so raw() finds this very value.
        FUZZ_CHECK(params->raw(name) == &value);
        FUZZ_CHECK(quoted(value) || parse_decimal(value).has_value());
        auto number = params->number(name);
        std::string_view inner = quoted(value) ? std::string_view(value).substr(1, value.size() - 2)
                                               : std::string_view(value);
        if (auto expected = parse_decimal(inner)) {
            FUZZ_CHECK(number.ok() && number->has_value() && **number == *expected);
        } else {
            // There but not a number: an error naming the line, never "absent".
            FUZZ_CHECK(!number.ok());
            check_diagnostic(number.error());
            FUZZ_CHECK(number.error().where.line == params->lines[i]);
        }
    }
    for (std::string_view name : {"ModifyDeviceFiles", "DeviceFileUID", "DeviceFileGID",
                                  "DeviceFileMode", "RegistryDwords", "NoSuchParameter"}) {
        auto number = params->number(name);
        if (params->raw(name) == nullptr) {
            FUZZ_CHECK(number.ok() && !number->has_value());
        } else if (!number) {
            check_diagnostic(number.error());
        }
    }
    return 0;
}
