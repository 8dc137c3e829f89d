// Facts about how this process was started.
#pragma once

#include "gpuinit/base/result.hpp"

#include <string>

namespace gpuinit {

// Refuses to run setuid or setgid: with AT_SECURE set, or real and
// effective ids that differ, a user could aim a root tool at a tree of their
// own and read root-only files back through its messages.
Status refuse_elevated_start(const char* program);

// Names this process `name` (/proc/PID/comm: what ps, pidof and the SysV
// scripts' pid checks read; the kernel keeps 15 bytes). The kernel names a
// process after the file it executes, and exec_trusted_program executes a
// descriptor: the NVML helper would be named after the descriptor's number
// (Linux before 6.14) or gpuinit-nvml, not after the tool it runs.
void name_process(const char* name);

// Replaces this process with the program at the absolute `path`, given
// `argv` and the environment `envp`, when only root can change it: a
// regular file (not a symlink) owned by root and writable by no one else,
// in a directory with the same properties. The file is opened once and that open is executed, so it
// cannot be swapped between the check and the exec. Returns only on
// failure: ENOENT when there is no such file or directory, EPERM when it is
// not root's alone, ENOEXEC when it is a script or its interpreter is
// missing, the exec's errno otherwise.
Status exec_trusted_program(const std::string& path, char* const* argv, char* const* envp);

} // namespace gpuinit
