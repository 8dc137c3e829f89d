#include "gpuinit/modules/loader.hpp"

#include "gpuinit/base/spawn.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/modules/option_text.hpp"
#include "kmod_context.hpp"

#include <cerrno>

namespace gpuinit {

bool KernelLoader::is_loaded(const std::string& name) {
    std::string dir = "sys/module/" + module_key(name);
    if (auto state = root_.read_file(dir + "/initstate", 64)) {
        std::string_view value = trim(*state);
        return value == "live" || value == "coming";
    }
    // A built-in module has a /sys/module entry but no initstate.
    return root_.exists(dir).value_or(false);
}

int KernelLoader::insert(const std::string& /*name*/, const std::string& path,
                         const std::string& options) {
    const char* no_config[] = {nullptr};
    KmodCtx ctx = new_kmod_context(nullptr, no_config, nullptr);
    if (!ctx) {
        return -ENOMEM;
    }
    kmod_module* raw = nullptr;
    int made = kmod_module_new_from_path(ctx.get(), path.c_str(), &raw);
    if (made < 0) {
        return made;
    }
    KmodModule module(raw);
    return kmod_module_insert_module(module.get(), 0, options.c_str());
}

int KernelLoader::run_install(const std::string& name, const std::string& command) {
    SpawnRequest request;
    request.argv = {"/bin/sh", "-c", command};
    request.extra_env = {"MODPROBE_MODULE=" + name};
    auto status = run_program(request);
    return status ? *status : 127;
}

} // namespace gpuinit
