// gpu-limit for containers, the flow of `gpu-limit oci-hook` and `gpu-limit
// runtime` (tool side, not freestanding): a config in, the edit
// (oci_spec.hpp) and the host's files (oci_host.hpp), the config out. The
// tools parse their options and render; everything they do is here.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/limit/oci_host.hpp"
#include "gpuinit/limit/oci_spec.hpp"

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit::limit::oci {

// An OCI config is kilobytes; a state less.
inline constexpr size_t kMaxConfigBytes = 8u << 20;

// The host's GPUs in the host's numbering: a port, since this layer does
// not read the host's driver (the host layer's read_numbered_gpus does).
// Called only for a config that asks for the limit.
using HostGpuReader = std::function<Result<HostGpus>()>;

struct Settings {
    std::string library;                 // host path of libgpulimit.so
    std::string state_root = kStateRoot; // host path, the same in the container
    HostGpuReader host_gpus;
};

struct Edited {
    bool changed = false; // false: the input is the output, byte for byte
    std::string text;     // the edited config when changed
    std::string group;    // the group made for it when changed
};

// The config text in, the text out. `group` is the container's id as the
// runtime passed it (the shim's command line); empty for the precreate
// hook, which takes it from the spec (group_from_spec) or makes one up. A
// config the strict parser refuses is left alone unless it mentions
// AMP_VGPU_ENABLE. Checks the library, reads the host's GPUs, makes the
// group's directory (prepare_host: an existing group is refused, and then
// nothing is returned to mount).
Result<Edited> edit_config(std::string_view text, std::string group, const Settings& settings);

// All of `fd`, at most kMaxConfigBytes; `what` names it in messages.
Result<std::string> read_bounded(int fd, const std::string& what);
Status write_all(int fd, std::string_view data, const std::string& what);

// The precreate hook: the config from `in`, the config (edited or as it
// was) to `out`; on failure nothing is written.
Status run_precreate(int in, int out, const Settings& settings);

struct Removal {
    std::string group;
    Cleanup outcome = Cleanup::Absent;
};
// The poststop hook: the OCI state from `in` (group_from_state: its id,
// nothing else) and the group's directory removed (remove_group).
Result<Removal> run_poststop(int in, const std::string& state_root);

// The runtime shim before `create`/`run`: rewrites the bundle's config.json
// (SafeDir::write_atomic: the runtime reads the old config or the new,
// whole; the old file's owner and mode kept). `settings` as edit_config.
Status edit_bundle(const RuntimeCall& call, const Settings& settings);

} // namespace gpuinit::limit::oci
