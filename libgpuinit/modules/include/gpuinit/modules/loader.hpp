// What the kernel side looks like to the planner and the executor: a small
// interface, so the whole path runs in tests without a kernel.
#pragma once

#include "gpuinit/fs/sysroot.hpp"

#include <string>

namespace gpuinit {

class ModuleLoader {
  public:
    virtual ~ModuleLoader() = default;
    virtual bool is_loaded(const std::string& name) = 0;
    // 0, or a negative errno.
    virtual int insert(const std::string& name, const std::string& path,
                       const std::string& options) = 0;
    // Exit status of the install command run through /bin/sh.
    virtual int run_install(const std::string& name, const std::string& command) = 0;
};

// The running kernel: /sys/module of `kernel_root` (the host's "/"; a
// --root DIR is never the running kernel unless the admin says so), and
// finit_module through libkmod.
class KernelLoader : public ModuleLoader {
  public:
    explicit KernelLoader(const Sysroot& kernel_root) : root_(kernel_root) {}
    bool is_loaded(const std::string& name) override;
    int insert(const std::string& name, const std::string& path,
               const std::string& options) override;
    int run_install(const std::string& name, const std::string& command) override;

  private:
    const Sysroot& root_;
};

} // namespace gpuinit
