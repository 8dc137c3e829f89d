// The host-side commands of gpu-limit, each in a file of its own; gpu-limit
// hands them its command line from the command word on (argv[0] is the word).
#pragma once

namespace gpuinit::tools {

// gpu-limit daemon: tools/gpu-limit-daemon.cpp.
int limit_daemon_main(int argc, char** argv);
// gpu-limit oci-hook (a podman/CRI-O precreate and poststop hook) and
// gpu-limit runtime (an OCI runtime shim for docker): tools/gpu-limit-oci.cpp.
int limit_oci_hook_main(int argc, char** argv);
int limit_runtime_main(int argc, char** argv);

} // namespace gpuinit::tools
