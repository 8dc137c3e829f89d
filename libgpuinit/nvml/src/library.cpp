#include "gpuinit/nvml/library.hpp"

#include "gpuinit/base/text.hpp"

#if GPUINIT_DLOPEN_NVML
#include <dlfcn.h>
#endif

namespace gpuinit::nvml {

std::string Library::describe(nvmlReturn_t code) const {
    const char* text =
        functions_.nvmlErrorString != nullptr ? functions_.nvmlErrorString(code) : nullptr;
    return text != nullptr ? quote(text) : format("NVML error %d", static_cast<int>(code));
}

std::string Library::missing(std::initializer_list<const char*> names) const {
    std::string out;
    for (const char* name : names) {
        if (function_named(functions_, name) == nullptr) {
            out += (out.empty() ? "" : ", ") + std::string(name);
        }
    }
    return out;
}

#if !GPUINIT_DLOPEN_NVML

Result<std::unique_ptr<Library>> Library::open(const std::string& library) {
    return error("this static build does not load " + library +
                 " (NVML); install the NVML helper, gpuinit-nvml (gpuinit(8))");
}

Library::~Library() = default;

#else

Result<std::unique_ptr<Library>> Library::open(const std::string& library) {
    ::dlerror();
    void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = ::dlerror();
        return error("cannot load " + library + " (NVML, shipped with the driver): " +
                     printable(why != nullptr ? why : "unknown error"));
    }
    std::unique_ptr<Library> loaded(new Library(handle, library));
    bind(
        loaded->functions_, [](void* context, const char* name) { return ::dlsym(context, name); },
        handle);
    if (std::string lacking = loaded->missing({"nvmlInit_v2", "nvmlShutdown"}); !lacking.empty()) {
        loaded->functions_.nvmlShutdown = nullptr; // nothing to shut down
        return error(library + " lacks " + lacking + ": not NVIDIA's NVML, or older than R400");
    }
    if (nvmlReturn_t code = loaded->functions_.nvmlInit_v2(); code != NVML_SUCCESS) {
        std::string why = loaded->describe(code);
        loaded->functions_.nvmlShutdown = nullptr;
        return error("nvmlInit failed: " + why + "; is the NVIDIA driver loaded?");
    }
    return loaded;
}

Library::~Library() {
    if (functions_.nvmlShutdown != nullptr) {
        functions_.nvmlShutdown();
    }
    ::dlclose(handle_);
}

#endif

} // namespace gpuinit::nvml
