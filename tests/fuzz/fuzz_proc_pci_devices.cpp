// /proc/bus/pci/devices: parse_proc_pci_devices, which decides which PCI
// functions the walk may skip. Every entry must be its line's first two
// fields, and the canonical rendering of a result must parse back to it.
#include "fuzz_check.hpp"
#include "gpuinit/host/pci.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace gpuinit;
    using namespace gpuinit::fuzz;
    std::string_view text = as_text(data, size);
    auto listed = parse_proc_pci_devices(text);
    if (!listed) {
        return 0;
    }
    std::vector<std::string_view> lines = split_lines(text);
    FUZZ_CHECK(listed->size() == lines.size());
    std::string canonical;
    for (size_t i = 0; i < listed->size(); ++i) {
        const ProcPciFunction& function = (*listed)[i];
        std::string_view line = lines[i];
        FUZZ_CHECK(line.size() >= 13 && line[4] == '\t');
        FUZZ_CHECK(parse_hex_digits(line.substr(0, 4), 0xffff) == function.bus_devfn);
        FUZZ_CHECK(parse_hex_digits(line.substr(5, 4), 0xffff) == function.vendor);
        canonical += format("%04x\t%04x0000\t0\n", function.bus_devfn, function.vendor);
    }
    auto again = parse_proc_pci_devices(canonical);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(*again == *listed);
    return 0;
}
