#include "gpuinit/host/gpu_information.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/gpu_selector.hpp"
#include "gpuinit/host/kv_reader.hpp"

namespace gpuinit {

Result<GpuInformation> parse_gpu_information(std::string_view text, std::string_view source) {
    auto entries = read_key_values(text, source, KeyStyle::Words);
    if (!entries) {
        return entries.error();
    }
    GpuInformation info;
    const KeyValue* minor = find_key(*entries, "Device Minor");
    if (minor == nullptr) {
        size_t last = entries->empty() ? 1 : entries->back().line;
        return parse_error(source, last,
                           "no 'Device Minor:' line; the driver did not assign this GPU a minor");
    }
    auto number = parse_decimal(minor->value, kMaxGpuMinor);
    if (!number) {
        return parse_error(source, minor->line,
                           format("Device Minor %s is not a number 0..%u",
                                  quote(minor->value).c_str(), kMaxGpuMinor));
    }
    info.minor = static_cast<unsigned>(*number);
    if (const KeyValue* uuid = find_key(*entries, "GPU UUID")) {
        if (!valid_gpu_uuid(uuid->value)) {
            return parse_error(source, uuid->line,
                               "GPU UUID " + quote(uuid->value) +
                                   " is not 'GPU-' and up to 60 hex digits and dashes");
        }
        info.uuid = uuid->value;
    }
    if (const KeyValue* model = find_key(*entries, "Model")) {
        info.model = model->value;
    }
    if (const KeyValue* location = find_key(*entries, "Bus Location")) {
        info.bus_location = location->value;
        info.bus_location_line = location->line;
    }
    if (const KeyValue* excluded = find_key(*entries, "GPU Excluded")) {
        info.excluded = excluded->value == "Yes";
    }
    return info;
}

} // namespace gpuinit
