// cuInit: where the limiter initializes (settings, devices, group state).
#include "runtime.hpp"

CUresult gpulimit::hook::cuInit(cuInit_fn self, unsigned int flags) {
    return gpulimit::initialize_from_cuinit(self, flags);
}
