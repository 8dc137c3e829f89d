// NVML's functions as one table of pointers, typed by nvml.h. Freestanding
// (no heap, no exceptions, no libstdc++ runtime): libgpulimit.so fills it
// inside foreign processes with its own symbol lookup (glibc's dlsym on the
// driver's handle, since it interposes dlsym), the tools through Library
// (library.hpp). Nothing here loads anything.
#pragma once

#include "gpuinit/nvml/nvml_h.hpp"

namespace gpuinit::nvml {

inline constexpr const char* kLibraryName = "libnvidia-ml.so.1";

struct Functions {
// `name` is a declarator here, which parentheses would not make safer.
// NOLINTNEXTLINE(bugprone-macro-parentheses)
#define GPUINIT_NVML_FUNCTION(name) decltype(&::name) name = nullptr;
#include "gpuinit/nvml/functions.def"
#undef GPUINIT_NVML_FUNCTION
};

// The address of `name` in the library, or null.
using SymbolLookup = void* (*)(void* context, const char* name);

// Fills every pointer of `functions` that `lookup` finds; the rest are null.
void bind(Functions& functions, SymbolLookup lookup, void* context);

// The pointer for an ABI name of functions.def, or null (also for a name
// that is not there); for messages that list what a driver lacks.
const void* function_named(const Functions& functions, const char* name);

} // namespace gpuinit::nvml
