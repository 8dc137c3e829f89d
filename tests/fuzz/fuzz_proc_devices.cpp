// /proc/devices: parse_proc_devices, the lookups on its result, and a
// round trip through the canonical rendering of the character section.
#include "fuzz_check.hpp"
#include "gpuinit/host/proc_devices.hpp"

#include <algorithm>

namespace gpuinit::fuzz {
namespace {

bool device_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '/' || c == ':';
}

void check_lookups(const CharDevices& devices) {
    for (const auto& [number, name] : devices.entries) {
        // The first entry of a name is the one found.
        size_t first = 0;
        while (devices.entries[first].second != name) {
            ++first;
        }
        FUZZ_CHECK(devices.major(name) == devices.entries[first].first);
        FUZZ_CHECK(devices.line_of(name) == devices.lines[first]);
    }
    for (std::string_view name : {"nvidia", "nvidiactl", "nvidia-uvm", "nvidia-frontend",
                                  "nvidia-modeset", "nvidia-caps", "", "nvidia-"}) {
        FUZZ_CHECK(devices.major(name).has_value() == (devices.line_of(name) != 0));
    }
}

} // namespace
} // namespace gpuinit::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace gpuinit;
    using namespace gpuinit::fuzz;
    std::string_view text = as_text(data, size);
    auto devices = parse_proc_devices(text, "/proc/devices");
    if (!devices) {
        check_diagnostic(devices.error());
        FUZZ_CHECK(devices.error().where.line <= std::max<size_t>(1, line_count(text)));
        return 0;
    }
    const CharDevices& parsed = *devices;
    FUZZ_CHECK(parsed.entries.size() == parsed.lines.size());
    std::vector<std::string_view> lines = split_lines(text);
    size_t previous = 0;
    for (size_t i = 0; i < parsed.entries.size(); ++i) {
        const auto& [number, name] = parsed.entries[i];
        FUZZ_CHECK(number <= 4095);
        FUZZ_CHECK(!name.empty());
        for (char c : name) {
            FUZZ_CHECK(device_name_char(c));
        }
        // Each entry is its line: "<major> <name>", in file order.
        FUZZ_CHECK(parsed.lines[i] > previous && parsed.lines[i] <= lines.size());
        previous = parsed.lines[i];
        auto words = split_words(lines[parsed.lines[i] - 1]);
        FUZZ_CHECK(words.size() == 2 && words[1] == name);
        FUZZ_CHECK(parse_decimal(words[0]) == number);
    }
    check_lookups(parsed);

    // The canonical text of the result parses back to the same entries.
    std::string canonical = "Character devices:\n";
    for (const auto& [number, name] : parsed.entries) {
        canonical += format("%3u ", number) + name + "\n";
    }
    canonical += "\nBlock devices:\n  8 sd\n";
    auto again = parse_proc_devices(canonical, "canonical");
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(again->entries == parsed.entries);
    for (size_t i = 0; i < again->lines.size(); ++i) {
        FUZZ_CHECK(again->lines[i] == i + 2);
    }
    return 0;
}
