#include "kmod_context.hpp"

#include "gpuinit/base/text.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <syslog.h>

namespace gpuinit {

namespace {

void add_kmod_line(Diagnostics* diagnostics, std::string_view line) {
    line = trim(line);
    if (diagnostics == nullptr || line.empty()) {
        return;
    }
    // "libkmod: function: message": the function name helps nobody.
    constexpr std::string_view kPrefix = "libkmod: ";
    if (line.starts_with(kPrefix)) {
        line.remove_prefix(kPrefix.size());
        if (size_t colon = line.find(": "); colon != std::string_view::npos) {
            line.remove_prefix(colon + 2);
        }
    }
    diagnostics->warning("libkmod: " + printable(line));
}

__attribute__((format(printf, 6, 0))) void
log_to_diagnostics(void* data, int priority, const char* /*file*/, int /*line*/, const char* /*fn*/,
                   const char* format_text, va_list args) {
    if (priority > LOG_ERR) {
        return;
    }
    char buffer[1024];
    std::vsnprintf(buffer, sizeof buffer, format_text, args);
    add_kmod_line(static_cast<Diagnostics*>(data), buffer);
}

} // namespace

KmodCtx new_kmod_context(const char* modules_dir, const char* const* config_paths,
                         Diagnostics* diagnostics) {
    char* captured = nullptr;
    size_t captured_size = 0;
    FILE* memory = ::open_memstream(&captured, &captured_size);
    FILE* saved = stderr;
    if (memory != nullptr) {
        stderr = memory;
    }
    KmodCtx ctx(kmod_new(modules_dir, config_paths));
    if (ctx) {
        kmod_set_log_priority(ctx.get(), LOG_ERR);
        kmod_set_log_fn(ctx.get(), log_to_diagnostics, diagnostics);
    }
    stderr = saved;
    if (memory != nullptr) {
        std::fclose(memory);
        for (std::string_view line : split_lines(std::string_view(captured, captured_size))) {
            add_kmod_line(diagnostics, line);
        }
        std::free(captured);
    }
    return ctx;
}

} // namespace gpuinit
