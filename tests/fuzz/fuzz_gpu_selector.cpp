// How the admin names a GPU: GpuSelector::parse and normalize_bdf. A
// selector's text() parses back to the same selector, canonical PCI
// addresses are fixed points, and a selector matches the GPU it names.
#include "fuzz_check.hpp"
#include "gpuinit/host/gpu_information.hpp"
#include "gpuinit/host/gpu_selector.hpp"
#include "gpuinit/host/pci.hpp"

#include <algorithm>
#include <cctype>

namespace {

using namespace gpuinit;
using namespace gpuinit::fuzz;

bool hex_digit(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

// "dddd:bb:dd.f": 4 to 8 lower-case hex digits of domain, the rest fixed.
bool canonical_bdf(std::string_view bdf) {
    size_t domain = bdf.find(':');
    if (domain == std::string_view::npos || domain < 4 || domain > 8 || bdf.size() != domain + 8) {
        return false;
    }
    for (size_t i = 0; i < bdf.size(); ++i) {
        char c = bdf[i];
        size_t at = i - domain; // position after the domain
        bool ok = i < domain           ? hex_digit(c)
                  : at == 0 || at == 3 ? c == ':'
                  : at == 6            ? c == '.'
                                       : hex_digit(c);
        if (!ok) {
            return false;
        }
    }
    // dev 0..1f, fn 0..7
    return bdf[domain + 4] <= '1' && bdf[domain + 7] <= '7';
}

std::string with_case(std::string_view text, bool upper) {
    std::string out(text);
    for (char& c : out) {
        c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                    : std::tolower(static_cast<unsigned char>(c)));
    }
    return out;
}

void check_selector(const GpuSelector& selector, std::string_view input) {
    // text() round-trips to the same selector, and is its own canonical form.
    std::string text = selector.text();
    auto again = GpuSelector::parse(text);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(again->kind() == selector.kind());
    FUZZ_CHECK(again->same_as(selector) && selector.same_as(*again));
    FUZZ_CHECK(again->text() == text);
    FUZZ_CHECK(selector.same_as(selector));

    GpuIdentity gpu{selector.minor(), "", ""};
    switch (selector.kind()) {
    case GpuSelector::Kind::Minor:
        FUZZ_CHECK(selector.minor() <= kMaxGpuMinor);
        FUZZ_CHECK(selector.key().empty());
        FUZZ_CHECK(text == std::to_string(selector.minor()));
        FUZZ_CHECK(parse_decimal(input) == selector.minor());
        break;
    case GpuSelector::Kind::Bdf:
        FUZZ_CHECK(canonical_bdf(selector.key()));
        FUZZ_CHECK(normalize_bdf(input) == selector.key());
        FUZZ_CHECK(normalize_bdf(with_case(input, true)) == selector.key());
        gpu.bdf = selector.key();
        break;
    case GpuSelector::Kind::Uuid:
        FUZZ_CHECK(valid_gpu_uuid(selector.key()));
        FUZZ_CHECK(selector.key() == input);
        gpu.uuid = selector.key();
        break;
    }
    FUZZ_CHECK(selector.matches(gpu));
    FUZZ_CHECK(!selector.matches(GpuIdentity{kMaxGpuMinor + 1, "", ""}));
    if (selector.kind() == GpuSelector::Kind::Uuid) {
        // UUIDs compare without regard to case, as selectors and as GPUs.
        std::string upper = "GPU-" + with_case(selector.key().substr(4), true);
        std::string lower = "GPU-" + with_case(selector.key().substr(4), false);
        FUZZ_CHECK(selector.matches(GpuIdentity{0, "", upper}));
        FUZZ_CHECK(selector.matches(GpuIdentity{0, "", lower}));
        auto other = GpuSelector::parse(lower);
        FUZZ_CHECK(other.ok() && other->same_as(selector) && selector.same_as(*other));
        FUZZ_CHECK(same_uuid(upper, lower));
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view input = as_text(data, size);
    auto selector = GpuSelector::parse(input);
    if (selector) {
        check_selector(*selector, input);
    } else {
        check_diagnostic(selector.error());
        FUZZ_CHECK(!parse_decimal(input, kMaxGpuMinor) && !normalize_bdf(input) &&
                   !valid_gpu_uuid(input));
    }
    // normalize_bdf alone: canonical output, a fixed point, case-blind.
    if (auto bdf = normalize_bdf(input)) {
        FUZZ_CHECK(canonical_bdf(*bdf));
        FUZZ_CHECK(normalize_bdf(*bdf) == *bdf);
        FUZZ_CHECK(normalize_bdf(with_case(input, false)) == *bdf);
    }
    if (valid_gpu_uuid(input)) {
        FUZZ_CHECK(input.starts_with("GPU-") && input.size() > 4 && input.size() <= 64);
    }
    return 0;
}
