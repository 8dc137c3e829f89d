// gpu-persist's client output: the daemon's state for people and for scripts.
#pragma once

#include "common/report.hpp"
#include "gpuinit/persist/client.hpp"

#include <string>

namespace gpuinit::tools {

Rendered render_persist_text(const ClientReply& reply);
std::string render_persist_json(const ClientReply& reply, int exit_code);

} // namespace gpuinit::tools
