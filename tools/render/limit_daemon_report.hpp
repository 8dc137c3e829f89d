// `gpu-limit daemon --once`: one sampling pass of the host daemon, for
// people (text) and for scripts (--json).
#pragma once

#include "gpuinit/limit/daemon.hpp"

#include <string>

namespace gpuinit::tools {

std::string render_daemon_pass_text(const limit::PassReport& report);
std::string render_daemon_pass_json(const limit::PassReport& report);

} // namespace gpuinit::tools
