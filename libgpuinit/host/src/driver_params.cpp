#include "gpuinit/host/driver_params.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/kv_reader.hpp"

namespace gpuinit {

namespace {

std::string_view unquoted(std::string_view value) {
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        return value.substr(1, value.size() - 2);
    }
    return value;
}

} // namespace

const std::string* DriverParams::raw(std::string_view name) const {
    for (const auto& [key, value] : values) {
        if (key == name) {
            return &value;
        }
    }
    return nullptr;
}

Result<std::optional<uint64_t>> DriverParams::number(std::string_view name) const {
    for (size_t i = 0; i < values.size(); ++i) {
        if (values[i].first != name) {
            continue;
        }
        auto parsed = parse_decimal(unquoted(values[i].second));
        if (!parsed) {
            return parse_error(source, lines[i],
                               std::string(name) + " is " + quote(values[i].second) +
                                   ", not a number; the driver's setting cannot be judged");
        }
        return std::optional<uint64_t>(*parsed);
    }
    return std::optional<uint64_t>();
}

Result<DriverParams> parse_driver_params(std::string_view text, std::string_view source) {
    auto entries = read_key_values(text, source, KeyStyle::Identifier);
    if (!entries) {
        return entries.error();
    }
    DriverParams params;
    params.source = source;
    for (const KeyValue& entry : *entries) {
        bool quoted =
            entry.value.size() >= 2 && entry.value.front() == '"' && entry.value.back() == '"';
        if (!quoted && !parse_decimal(entry.value)) {
            return parse_error(source, entry.line,
                               "value of " + std::string(entry.key) +
                                   " is neither a decimal number nor a quoted string");
        }
        params.values.emplace_back(std::string(entry.key), std::string(entry.value));
        params.lines.push_back(entry.line);
    }
    return params;
}

} // namespace gpuinit
