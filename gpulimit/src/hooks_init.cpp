// cuInit: the point where the runtime initializes. Pass-through for now.
#include "runtime.hpp"

GPULIMIT_EXPORT CUresult cuInit(unsigned int flags) {
    return GPULIMIT_CALL_REAL(cuInit, flags);
}
