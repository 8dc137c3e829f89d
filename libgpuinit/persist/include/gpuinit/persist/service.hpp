// The notifier and the log moved to the service layer; this name stays for
// the code that still includes it.
#pragma once

#include "gpuinit/service/log.hpp"
