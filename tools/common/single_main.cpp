// The main of a one-tool executable (the dynamic development build): the
// same Command the multi-call binary runs. GPUINIT_COMMAND names it.
#include "command.hpp"

int main(int argc, char** argv) {
    return gpuinit::tools::run_command(gpuinit::tools::GPUINIT_COMMAND, argc, argv);
}
