// The declared MIG layout (layout.hpp), <root>/etc/gpu-mig-layout.conf,
// which gpu-mig apply turns into instance creates and destroys as root:
// whatever the file holds, a refusal names file:line in one safe line, and
// what is accepted is within the driver's bounds and survives its own
// rendering and parse unchanged.
#include "fuzz_check.hpp"
#include "gpuinit/mig/layout.hpp"
#include "gpuinit/mig/names.hpp"

#include <algorithm>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace gpuinit;
    using namespace gpuinit::fuzz;
    std::string_view text = as_text(data, size);
    auto layout = mig::MigLayout::parse(text, "layout");
    if (!layout) {
        check_diagnostic(layout.error());
        FUZZ_CHECK(layout.error().where.file == "layout");
        FUZZ_CHECK(layout.error().where.line >= 1 &&
                   layout.error().where.line <= std::max<size_t>(1, line_count(text)));
        return 0;
    }
    for (const auto& entry : layout->entries()) {
        FUZZ_CHECK(entry.layout.mig || entry.layout.gis.empty());
        FUZZ_CHECK(entry.layout.gis.size() <= mig::kMaxLayoutGis);
        for (const mig::LayoutGi& gi : entry.layout.gis) {
            FUZZ_CHECK(valid_mig_profile(gi.profile) && mig::gi_slices(gi.profile) > 0);
            FUZZ_CHECK(!gi.cis.empty() && gi.cis.size() <= mig::kMaxLayoutCis);
            unsigned used = 0;
            for (const std::string& ci : gi.cis) {
                auto slices = mig::ci_slices_in(ci, gi.profile);
                FUZZ_CHECK(slices.has_value() && valid_mig_profile(ci));
                used += *slices;
            }
            FUZZ_CHECK(used <= mig::gi_slices(gi.profile));
        }
    }
    std::string rendered = layout->render();
    FUZZ_CHECK(one_safe_line(std::string_view(rendered).substr(0, rendered.find('\n'))));
    auto again = mig::MigLayout::parse(rendered, "layout");
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(again->entries().size() == layout->entries().size());
    for (size_t i = 0; i < layout->entries().size(); ++i) {
        const auto& a = layout->entries()[i];
        const auto& b = again->entries()[i];
        FUZZ_CHECK(a.subject == b.subject && a.model == b.model && a.layout.same_as(b.layout));
    }
    FUZZ_CHECK(again->render() == rendered);
    return 0;
}
