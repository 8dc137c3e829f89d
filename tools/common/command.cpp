#include "command.hpp"

#include "gpuinit/base/process.hpp"
#include "gpuinit/base/text.hpp"

#include <cstdio>

namespace gpuinit::tools {

int run_command(const Command& command, int argc, char** argv) {
    if (auto refused = refuse_elevated_start(command.program); !refused) {
        std::string line =
            std::string(command.program) + ": error: " + printable(refused.error().message) + "\n";
        std::fwrite(line.data(), 1, line.size(), stderr);
        return command.cannot_run_exit;
    }
    argv[0] = const_cast<char*>(command.program);
    return command.run(argc, argv);
}

} // namespace gpuinit::tools
