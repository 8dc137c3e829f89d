// The OCI state that `gpu-limit oci-hook poststop` reads on its stdin: the
// runtime's (podman hands its hooks the annotations the container's creator
// wrote; runc and crun those of config.json). It names the group whose
// directory the hook removes, so whatever the input:
//   - group_from_state accepts it or refuses with one safe line;
//   - what it accepts is a valid group name, and exactly the state's "id"
//     as the strict parser reads it: never an annotation, a member of
//     another name, or a value from deeper in the document;
//   - an accepted state is a JSON object whose id is a string.
#include "fuzz_check.hpp"
#include "gpuinit/base/json_value.hpp"
#include "gpuinit/limit/oci_spec.hpp"

#include <string>
#include <string_view>

namespace {

using namespace gpuinit;
using namespace gpuinit::fuzz;
namespace oci = limit::oci;

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text = as_text(data, size);
    auto group = oci::group_from_state(text);
    auto parsed = parse_json(text);
    if (!group) {
        check_diagnostic(group.error(), false);
        return 0;
    }
    FUZZ_CHECK(oci::valid_group_name(*group));
    FUZZ_CHECK(parsed.ok());
    FUZZ_CHECK(parsed->is_object());
    const JsonValue* id = parsed->find("id");
    FUZZ_CHECK(id != nullptr && id->is_string());
    FUZZ_CHECK(id->text() == *group);
    return 0;
}
