// The registration datagram, as anyone on the host or in a container sends
// it to `gpu-limit daemon`'s 0666 socket: parse_register_request either
// takes it or refuses with a reason that is safe in an "ERR <reason>\n"
// reply, never crashes, and takes nothing but canonical requests (what it
// takes formats back to the very same bytes).
#include "fuzz_check.hpp"
#include "gpuinit/limit/daemon_protocol.hpp"
#include "gpuinit/limit/group_state.hpp"

#include <cstring>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace gpuinit;
    const std::string_view text = fuzz::as_text(data, size);
    limit::RegisterRequest request;
    const char* reason = nullptr;
    if (!limit::parse_register_request(text.data(), text.size(), request, reason)) {
        FUZZ_CHECK(reason != nullptr);
        const std::string_view why(reason);
        FUZZ_CHECK(!why.empty() && why.size() < 64);
        FUZZ_CHECK(fuzz::one_safe_line(why));
        FUZZ_CHECK(why.find(' ') == std::string_view::npos);
        return 0;
    }
    FUZZ_CHECK(size < limit::kDaemonMaxMessage);
    FUZZ_CHECK(request.slot >= 0 && request.slot < limit::kMaxSlots);
    const size_t length = ::strnlen(request.group, sizeof request.group);
    FUZZ_CHECK(length < sizeof request.group);
    FUZZ_CHECK(limit::is_group_name(request.group, length));
    char again[limit::kDaemonMaxMessage];
    const size_t written =
        limit::format_register_request(request.group, request.slot, again, sizeof again);
    FUZZ_CHECK(std::string_view(again, written) == text);
    return 0;
}
