// libkmod contexts whose log reaches the diagnostics instead of stderr.
// (Private to the modules layer.)
#pragma once

#include "gpuinit/base/diag.hpp"

#include <libkmod.h>
#include <memory>

namespace gpuinit {

struct KmodCtxDeleter {
    void operator()(kmod_ctx* ctx) const { kmod_unref(ctx); }
};
struct KmodModuleDeleter {
    void operator()(kmod_module* module) const { kmod_module_unref(module); }
};
struct KmodListDeleter {
    void operator()(kmod_list* list) const { kmod_module_unref_list(list); }
};
struct KmodIterDeleter {
    void operator()(kmod_config_iter* iter) const { kmod_config_iter_free_iter(iter); }
};
using KmodCtx = std::unique_ptr<kmod_ctx, KmodCtxDeleter>;
using KmodModule = std::unique_ptr<kmod_module, KmodModuleDeleter>;
using KmodList = std::unique_ptr<kmod_list, KmodListDeleter>;
using KmodIter = std::unique_ptr<kmod_config_iter, KmodIterDeleter>;

// kmod_new(), but what libkmod logs (errors only) becomes warnings in
// `diagnostics`, or is dropped when it is nullptr. kmod_new() parses the
// configuration before a log function can be set and logs to stderr: for
// that call stderr is pointed at a memory stream. Not thread-safe; the
// module tools are single-threaded.
KmodCtx new_kmod_context(const char* modules_dir, const char* const* config_paths,
                         Diagnostics* diagnostics);

} // namespace gpuinit
