// gpu-persist's other hostile inputs: a control request line (from any
// local user), the daemon's reply (to the client) and the state file. The
// input is cut at NUL bytes: the first part is the request, the second the
// reply, the third the state file. Each accepted text renders to one that
// parses back to the same rendering. (Uevents are libudev's to parse.)
#include "fuzz_check.hpp"
#include "gpuinit/persist/control.hpp"
#include "gpuinit/persist/gpu_table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace gpuinit;
    using namespace gpuinit::fuzz;
    std::string_view text = as_text(data, size);
    auto parts = split_at_nul(text);

    auto request = parse_control_request(parts[0]);
    if (request) {
        std::string line = format_control_request(*request);
        FUZZ_CHECK(!line.empty() && line.back() == '\n');
        auto again = parse_control_request(std::string_view(line).substr(0, line.size() - 1));
        FUZZ_CHECK(again && again->kind == request->kind &&
                   again->gpu.has_value() == request->gpu.has_value());
        FUZZ_CHECK(!request->gpu || again->gpu->same_as(*request->gpu));
    } else {
        check_diagnostic(request.error());
    }

    if (parts.size() > 1) {
        auto reply = parse_control_reply(parts[1]);
        if (reply) {
            std::string rendered = format_control_reply(*reply);
            auto again = parse_control_reply(rendered);
            FUZZ_CHECK(again);
            FUZZ_CHECK(again->gpus.size() == reply->gpus.size());
            FUZZ_CHECK(format_control_reply(*again) == rendered);
        } else {
            check_diagnostic(reply.error());
        }
    }

    if (parts.size() > 2) {
        Diagnostics diagnostics;
        auto choices = parse_choices(parts[2], "state", diagnostics);
        for (const Diagnostic& diagnostic : diagnostics.items()) {
            check_diagnostic(diagnostic);
        }
        Diagnostics clean;
        FUZZ_CHECK(parse_choices(format_choices(choices), "state", clean) == choices);
        FUZZ_CHECK(clean.empty());
    }
    return 0;
}
