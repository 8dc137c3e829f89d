// The strict JSON parser of gpu-limit's container tools (json_value.hpp),
// whose input is whatever the container's creator wrote into config.json,
// and the OCI edit over it (oci_spec.hpp), as gpu-limit oci-hook and
// gpu-limit runtime run them. Whatever the input:
//   - parse_json accepts it or refuses with one safe line;
//   - what it accepts serializes to valid UTF-8 with no raw control byte,
//     at most six times the input's size, which parses back to the same tree and
//     serializes to the same text (a fixed point);
//   - parse_spec, group_from_spec, state_owner and group_from_state never
//     crash, refuse with one safe line, and name only valid groups;
//   - a spec that asks for the limit, once edited, is still a valid spec
//     that asks for the limit, has the group and state variables exactly
//     once, has none of our mounts covered by a later one, and editing it
//     again changes nothing.
//
// Input: the document. Its first byte also picks whether the daemon's
// socket is mounted (odd: yes), so both forms of the edit are reached.
#include "fuzz_check.hpp"
#include "gpuinit/base/json_value.hpp"
#include "gpuinit/limit/oci_spec.hpp"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace gpuinit;
using namespace gpuinit::fuzz;
namespace oci = limit::oci;

bool same_tree(const JsonValue& a, const JsonValue& b) {
    if (a.kind() != b.kind() || a.boolean() != b.boolean() || a.text() != b.text() ||
        a.items().size() != b.items().size() || a.members().size() != b.members().size()) {
        return false;
    }
    for (size_t i = 0; i < a.items().size(); ++i) {
        if (!same_tree(a.items()[i], b.items()[i])) {
            return false;
        }
    }
    for (size_t i = 0; i < a.members().size(); ++i) {
        if (a.members()[i].key != b.members()[i].key ||
            !same_tree(a.members()[i].value, b.members()[i].value)) {
            return false;
        }
    }
    return true;
}

bool no_raw_control(std::string_view text) {
    for (char c : text) {
        if (static_cast<unsigned char>(c) < 0x20) {
            return false;
        }
    }
    return true;
}

const std::string* string_member(const JsonValue& object, std::string_view key) {
    if (!object.is_object()) {
        return nullptr;
    }
    const JsonValue* value = object.find(key);
    return value != nullptr && value->is_string() ? &value->text() : nullptr;
}

// Our mount at `destination` from `source` is there and no later mount
// covers it.
void check_mount_visible(const JsonValue& spec, const std::string& destination,
                         const std::string& source) {
    const JsonValue* mounts = spec.find("mounts");
    FUZZ_CHECK(mounts != nullptr && mounts->is_array());
    const JsonValue* last = nullptr;
    for (const JsonValue& mount : mounts->items()) {
        const std::string* at = string_member(mount, "destination");
        if (at != nullptr && oci::covers(oci::normalized_path(*at), destination)) {
            last = &mount;
        }
    }
    FUZZ_CHECK(last != nullptr);
    const std::string* at = string_member(*last, "destination");
    const std::string* from = string_member(*last, "source");
    const std::string* type = string_member(*last, "type");
    FUZZ_CHECK(at != nullptr && oci::normalized_path(*at) == destination);
    FUZZ_CHECK(from != nullptr && *from == source);
    FUZZ_CHECK(type != nullptr && *type == "bind");
}

size_t env_count(const JsonValue& spec, std::string_view prefix, std::string_view exact) {
    const JsonValue* process = spec.find("process");
    FUZZ_CHECK(process != nullptr && process->is_object());
    const JsonValue* env = process->find("env");
    FUZZ_CHECK(env != nullptr && env->is_array());
    size_t count = 0;
    for (const JsonValue& entry : env->items()) {
        FUZZ_CHECK(entry.is_string());
        if (entry.text().compare(0, prefix.size(), prefix) == 0) {
            FUZZ_CHECK(entry.text() == exact);
            ++count;
        }
    }
    return count;
}

void check_json(std::string_view text) {
    auto parsed = parse_json(text);
    if (!parsed) {
        check_diagnostic(parsed.error(), false);
        return;
    }
    std::string once = serialize_json(*parsed);
    FUZZ_CHECK(valid_utf8(once) == once);
    FUZZ_CHECK(no_raw_control(once));
    // Compact, but every control character comes out as \u00XX (JsonWriter's
    // escaper): a raw DEL, one byte, is six; a C1 character, two, is six.
    FUZZ_CHECK(once.size() <= 6 * text.size());
    JsonLimits limits;
    limits.max_bytes = std::max(limits.max_bytes, once.size());
    auto again = parse_json(once, limits);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(same_tree(*parsed, *again));
    FUZZ_CHECK(serialize_json(*again) == once);
}

void check_spec(std::string_view text, bool daemon_socket) {
    if (auto group = oci::group_from_state(text)) {
        FUZZ_CHECK(oci::valid_group_name(*group));
    } else {
        check_diagnostic(group.error(), false);
    }
    auto spec = oci::parse_spec(text);
    if (!spec) {
        check_diagnostic(spec.error(), false);
        return;
    }
    if (auto group = oci::group_from_spec(*spec)) {
        FUZZ_CHECK(oci::valid_group_name(*group));
    }
    if (auto owner = oci::state_owner(*spec); !owner) {
        check_diagnostic(owner.error(), false);
    }
    if (!oci::limit_requested(*spec)) {
        return;
    }
    oci::EditOptions options;
    options.library = "/usr/lib/gpuinit/libgpulimit.so";
    options.state_root = "/run/gpu-limit";
    options.group = "ctr-1";
    options.daemon_socket = daemon_socket;
    oci::edit_spec(*spec, options);
    std::string once = serialize_json(*spec);

    auto edited = oci::parse_spec(once);
    FUZZ_CHECK(edited.ok());
    FUZZ_CHECK(oci::limit_requested(*edited));
    FUZZ_CHECK(env_count(*edited, "GPU_LIMIT_GROUP=", "GPU_LIMIT_GROUP=ctr-1") == 1);
    FUZZ_CHECK(env_count(*edited, "GPU_LIMIT_STATE_DIR=", "GPU_LIMIT_STATE_DIR=/run/gpu-limit") ==
               1);
    check_mount_visible(*edited, oci::kContainerLibrary, options.library);
    check_mount_visible(*edited, oci::kPreloadTarget, "/run/gpu-limit/ld.so.preload");
    check_mount_visible(*edited, "/run/gpu-limit/ctr-1", "/run/gpu-limit/ctr-1");
    if (daemon_socket) {
        check_mount_visible(*edited, "/run/gpu-limit/daemon.sock", "/run/gpu-limit/daemon.sock");
    }
    const JsonValue* annotations = edited->find("annotations");
    FUZZ_CHECK(annotations != nullptr);
    const std::string* mark = string_member(*annotations, oci::kGroupAnnotation);
    FUZZ_CHECK(mark != nullptr && *mark == "ctr-1");

    FUZZ_CHECK(!oci::edit_spec(*edited, options));
    FUZZ_CHECK(serialize_json(*edited) == once);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text = as_text(data, size);
    check_json(text);
    check_spec(text, size > 0 && (data[0] & 1) != 0);
    return 0;
}
