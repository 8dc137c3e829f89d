// The names file, <root>/run/gpu-mig/names: the profile and MIG UUID of
// every instance as `gpu-mig sync` (root) last learned them from NVML or
// nvidia-smi. Job users read it instead of asking the driver: nvidia-smi
// mig -lci needs root, NVML and nvidia-smi cost a driver round trip per
// call, and under ConstrainDevices a job cannot open the GPUs it was not
// given. It lives beside the leases, in the directory sync makes and users
// trust only when root owns it; the file must be what sync writes (regular,
// one link, the directory's owner, nobody else may write it).
//
// One line per instance, '#' comments:
//   <GPU UUID> <GI> <CI> <profile or -> <MIG UUID or ->
// An instance destroyed and made again with the same GI and CI ids gets a
// new MIG UUID, which this file cannot notice: sync must follow every MIG
// change (it is the documented step).
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/mig/instances.hpp"
#include "gpuinit/mig/names.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

inline constexpr std::string_view kMigNamesFile = "names";
inline constexpr size_t kMigNamesFileLimit = 1u << 20;

// The file's text for `instances` (their profile and uuid as known now;
// unknown ones are written as "-"). `source` says where they came from.
std::string render_mig_names_file(const std::vector<MigInstance>& instances,
                                  std::string_view source);

// Every value is checked as nvidia-smi's would be; a malformed line fails
// with source:line.
Result<MigNames> parse_mig_names_file(std::string_view text, std::string_view source);

// Writes the file into <root>/run/gpu-mig (which sync_leases made) under a
// temporary name, then renames it over the old one: a reader sees the old
// file or the new, never half of one. Mode 0444.
Status write_mig_names_file(const Sysroot& root, std::string_view text);

// nullopt when there is no file (or no lease directory): sync has not run.
// Fails when the directory or the file is not what sync makes, or the file
// does not parse.
Result<std::optional<MigNames>> read_mig_names_file(const Sysroot& root);

// Whether `names` has both the profile and the UUID of every instance.
bool mig_names_cover(const MigNames& names, const std::vector<MigInstance>& instances);

} // namespace gpuinit
