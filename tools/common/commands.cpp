// The command table of the multi-call binary: one line per tool.
#include "command.hpp"

namespace gpuinit::tools {

namespace {

constexpr const Command* kCommands[] = {&kMknodCommand, &kModloadCommand, &kPersistCommand,
                                        &kMigCommand,   &kLimitCommand,   &kLimitRuntimeCommand,
                                        &kStatusCommand};

} // namespace

std::span<const Command* const> all_commands() {
    return kCommands;
}

const Command* find_command(std::string_view name) {
    for (const Command* command : kCommands) {
        if (name == command->name || name == command->program) {
            return command;
        }
    }
    return nullptr;
}

const Command* find_program(std::string_view program) {
    for (const Command* command : kCommands) {
        if (program == command->program) {
            return command;
        }
    }
    return nullptr;
}

} // namespace gpuinit::tools
