// gpuinit: every tool in one binary, kmod-style. Installed once, with the
// tools as links to it; it runs the tool its name says (gpu-mknod), or the
// one its first argument names (gpuinit mknod ...).
#include "common/command.hpp"
#include "gpuinit/base/text.hpp"

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

namespace {

void usage(FILE* stream) {
    std::string text = "Usage: gpuinit COMMAND [OPTION]...\n"
                       "       (or run a COMMAND through its own name, such as gpu-mknod)\n\n"
                       "Commands:\n";
    for (const gpuinit::tools::Command* command : gpuinit::tools::all_commands()) {
        text += gpuinit::format("  %-10s %-12s %s\n", command->name, command->program,
                                command->summary);
    }
    text += "\nEach command takes --help. gpuinit --version shows the version.\n";
    std::fwrite(text.data(), 1, text.size(), stream);
}

} // namespace

int main(int argc, char** argv) {
    std::string_view self = argc > 0 && argv[0] != nullptr ? argv[0] : "gpuinit";
    if (size_t slash = self.rfind('/'); slash != std::string_view::npos) {
        self.remove_prefix(slash + 1);
    }
    if (const auto* command = gpuinit::tools::find_program(self); command != nullptr) {
        return gpuinit::tools::run_command(*command, argc, argv);
    }
    if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    if (std::strcmp(argv[1], "--version") == 0 || std::strcmp(argv[1], "-V") == 0) {
        std::puts("gpuinit " GPUINIT_VERSION);
        return 0;
    }
    if (const auto* command = gpuinit::tools::find_command(argv[1]); command != nullptr) {
        return gpuinit::tools::run_command(*command, argc - 1, argv + 1);
    }
    std::string message =
        "gpuinit: unknown command " + gpuinit::quote(argv[1]) + "; 'gpuinit --help' lists them\n";
    std::fwrite(message.data(), 1, message.size(), stderr);
    return 1;
}
