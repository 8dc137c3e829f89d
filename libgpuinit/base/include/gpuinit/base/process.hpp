// Facts about how this process was started.
#pragma once

#include "gpuinit/base/result.hpp"

namespace gpuinit {

// Refuses to run setuid or setgid: with AT_SECURE set, or real and
// effective ids that differ, a user could aim a root tool at a tree of their
// own and read root-only files back through its messages.
Status refuse_elevated_start(const char* program);

} // namespace gpuinit
