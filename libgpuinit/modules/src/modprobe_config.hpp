// The configuration modprobe would use for a root. (Private to the modules
// layer.)
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <libkmod.h>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace gpuinit {

// The largest modprobe.d file taken, and all of them together: more is a
// mistake (a log, a core dump) that would cost seconds and memory to parse.
inline constexpr size_t kMaxModprobeFile = 1u << 20;
inline constexpr size_t kMaxModprobeTotal = 8u << 20;

// The modprobe.d files of the root, as full paths in kmod's order (a name
// in an earlier directory hides the same name in a later one, then sorted by
// name), each checked to be a regular file within the limits before libkmod
// opens it: a FIFO would hang it, a huge file would stall it.
// `relative` (when given) gets the same files relative to the root.
Result<std::vector<std::string>> modprobe_d_files(const Sysroot& root, Diagnostics& diagnostics,
                                                  std::vector<std::string>* relative = nullptr);

struct ModprobeConfig {
    std::vector<std::pair<std::string, std::string>> options; // (module pattern, options)
    std::vector<Location> option_origins;                     // for each of `options`
    std::vector<std::string> blacklist;                       // module keys
    std::set<std::string> builtin;                            // module keys
};

// What `ctx` read from the files, plus the kernel command line of the root:
// kmod_new() always appends the host's /proc/cmdline, so for another root
// those entries are dropped and the root's own proc/cmdline used instead.
// `files` are the modprobe.d files relative to the root, in kmod's order:
// libkmod does not say which line an entry came from, so they are read
// again to find it.
ModprobeConfig read_modprobe_config(kmod_ctx* ctx, const Sysroot& root,
                                    const std::string& modules_rel,
                                    const std::vector<std::string>& files);

} // namespace gpuinit
