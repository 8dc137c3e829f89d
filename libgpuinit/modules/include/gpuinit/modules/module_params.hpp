// A module's options checked against the parameters the module itself
// declares (its .modinfo), before anything loads. The kernel ignores an
// option it does not know ("unknown parameter ... ignored" in dmesg, and the
// load succeeds) and refuses the whole module for a value its type rejects:
// either way the admin learns of the mistake too late, or not at all.
#pragma once

#include "gpuinit/base/diag.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuinit {

// One parameter as module_param() declares it: "parmtype=NAME:TYPE" in
// .modinfo ("int", "uint", "charp", "bool", "array of int", ...).
// MODULE_PARM_DESC() adds "parm=NAME:DESCRIPTION"; a name with only that
// has an empty type and takes any value.
struct ModuleParam {
    std::string name;
    std::string type;
};

// The parameters from a module's .modinfo entries as (key, value) pairs,
// as kmod_module_get_info() lists them.
std::vector<ModuleParam>
params_from_modinfo(const std::vector<std::pair<std::string, std::string>>& modinfo);

// One option word as it will reach the module ("NVreg_DeviceFileMode=0660"),
// and where it came from: a modprobe.d file and line, a kernel command line
// file, or (no file) the command line.
struct ModuleOption {
    std::string word;
    Location where;
};

enum class OptionProblem {
    UnknownName,  // the module declares no such parameter
    BadValue,     // the kernel's parser for its type would refuse the value
    UndoesPolicy, // nvidia NVreg_ModifyDeviceFiles other than 0
};

struct OptionFinding {
    OptionProblem problem;
    Diagnostic diagnostic; // an error, at the option's origin, with the fix
};

// Whether the kernel's parser for `type` takes `value` (nullopt: the word had
// no '='), as kernel/params.c and lib/kstrtox.c do. An unknown type takes
// anything.
bool param_value_fits(std::string_view type, const std::optional<std::string_view>& value);

// Every problem of `options` for `module` against the parameters it
// declares, in the order of the options. Pure.
std::vector<OptionFinding> check_module_options(std::string_view module,
                                                const std::vector<ModuleOption>& options,
                                                const std::vector<ModuleParam>& params);

} // namespace gpuinit
