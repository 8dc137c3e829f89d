#include "gpuinit/nvml/api.hpp"

#include <cstring>

namespace gpuinit::nvml {

void bind(Functions& functions, SymbolLookup lookup, void* context) {
    // A data pointer from the lookup; POSIX guarantees it converts to a
    // function pointer (memcpy keeps -Wconditionally-supported quiet).
#define GPUINIT_NVML_FUNCTION(name)                                                                \
    {                                                                                              \
        void* address = lookup(context, #name);                                                    \
        std::memcpy(&functions.name, &address, sizeof functions.name);                             \
    }
#include "gpuinit/nvml/functions.def"
#undef GPUINIT_NVML_FUNCTION
}

const void* function_named(const Functions& functions, const char* name) {
#define GPUINIT_NVML_FUNCTION(entry)                                                               \
    if (std::strcmp(name, #entry) == 0) {                                                          \
        return reinterpret_cast<const void*>(functions.entry);                                     \
    }
#include "gpuinit/nvml/functions.def"
#undef GPUINIT_NVML_FUNCTION
    return nullptr;
}

} // namespace gpuinit::nvml
