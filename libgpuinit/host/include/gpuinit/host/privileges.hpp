// Dropping root for good, with numeric ids only: no NSS, so it works the same
// in a static binary (no getpwnam, initgroups or capng_change_id).
#pragma once

#include "gpuinit/base/result.hpp"

#include <sys/types.h>
#include <vector>

namespace gpuinit {

// Sets exactly these supplementary groups, then the real, effective and saved
// gid and uid, clearing the capability bounding set before giving up uid 0
// and every remaining capability after; sets no_new_privs. Verifies the
// result and fails if anything is left.
Status drop_privileges(uid_t uid, gid_t gid, const std::vector<gid_t>& supplementary_groups);

// Keeps uid 0 but only the capabilities listed (Linux CAP_* numbers):
// clears the rest from the effective, permitted, inheritable and bounding
// sets, and sets no_new_privs. For a helper that must stay root to open
// root-owned device nodes and should be able to do nothing else.
Status keep_only_capabilities(const std::vector<unsigned>& capabilities);

} // namespace gpuinit
