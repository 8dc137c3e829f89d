// NVML loaded and initialized: libnvidia-ml.so.1, the driver's own library,
// dlopened by the dynamic build only. It is never linked (the driver ships
// it, and a machine without it still runs every tool), and the static build
// never references dlopen (glibc's static dlopen warns, and the static link
// treats warnings as errors), so there open() always fails, saying so.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/nvml/api.hpp"

#include <initializer_list>
#include <memory>
#include <string>

namespace gpuinit::nvml {

class Library {
  public:
    // Whether this build can load NVML at all; a constant, so that a caller
    // can leave its NVML code out of the static build.
    static constexpr bool kSupported = GPUINIT_DLOPEN_NVML != 0;

    // Loads `library` (a file name the dynamic loader searches for, or a
    // path), finds every function of functions.def it has, and calls
    // nvmlInit_v2. Fails when it cannot be loaded, lacks nvmlInit_v2 or
    // nvmlShutdown, or nvmlInit fails.
    static Result<std::unique_ptr<Library>> open(const std::string& library = kLibraryName);

    ~Library(); // nvmlShutdown, then unloads it
    Library(const Library&) = delete;
    Library& operator=(const Library&) = delete;

    const Functions& api() const { return functions_; }
    const std::string& name() const { return name_; }

    // NVML's own text for a code, quoted, or "NVML error N".
    std::string describe(nvmlReturn_t code) const;

    // The names among `names` (ABI names of functions.def) this driver
    // lacks, comma-separated; "" when it has them all.
    std::string missing(std::initializer_list<const char*> names) const;

  private:
    Library(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}

    void* handle_;
    std::string name_;
    Functions functions_;
};

} // namespace gpuinit::nvml
