// cuInit: where the limiter initializes (settings, devices, group state).
#include "runtime.hpp"

GPULIMIT_EXPORT CUresult cuInit(unsigned int flags) {
    return gpulimit::initialize_from_cuinit(flags);
}
