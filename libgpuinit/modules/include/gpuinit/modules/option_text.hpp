// Module option text as modprobe handles it: names where '-' and '_' are
// one, "key=value" words with quoted values, and the kernel command line's
// "module.param=value" and "modprobe.blacklist=" words.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuinit {

// kmod treats '-' and '_' in module names alike: "nvidia-uvm" -> "nvidia_uvm".
std::string module_key(std::string_view name);

// Splits "a=1 b=\"x y\"" into words, keeping quoted values whole.
std::vector<std::string> option_words(std::string_view text);

// Merges option strings: a later "key=value" replaces an earlier one with the
// same key, in place; new keys are appended. A quote a layer leaves open is
// closed at the end of that layer, so it cannot take in a later layer.
std::string merge_module_options(const std::vector<std::string>& layers);

// A kernel command line as kmod reads it.
struct KernelCmdline {
    std::vector<std::pair<std::string, std::string>> options; // (module key, "param=value")
    std::vector<std::string> blacklist;                       // module keys
};

KernelCmdline parse_kernel_cmdline(std::string_view cmdline);

} // namespace gpuinit
