#include "gpuinit/modules/module_params.hpp"

#include "gpuinit/base/text.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <limits>

namespace gpuinit {

namespace {

// The kernel's parameq(): '-' and '_' in parameter names are one.
std::string param_key(std::string_view name) {
    std::string key(name);
    std::replace(key.begin(), key.end(), '-', '_');
    return key;
}

// One option word split as the kernel's next_arg() (kernel/params.c) does:
// a leading quote on the word, or on the value, takes one trailing quote off;
// a quote with no opening one stays in the value ("name=5\"" is no int).
struct SplitWord {
    std::string_view name;
    std::optional<std::string_view> value;
};

SplitWord split_word(std::string_view word) {
    bool quoted = word.starts_with('"');
    if (quoted) {
        word.remove_prefix(1);
    }
    SplitWord split;
    size_t equals = word.find('=');
    split.name = word.substr(0, equals);
    if (equals == std::string_view::npos) {
        if (quoted && split.name.ends_with('"')) {
            split.name.remove_suffix(1);
        }
        return split;
    }
    std::string_view value = word.substr(equals + 1);
    if (value.starts_with('"')) {
        value.remove_prefix(1);
        if (value.ends_with('"')) {
            value.remove_suffix(1);
        }
    } else if (quoted && value.ends_with('"')) {
        value.remove_suffix(1);
    }
    split.value = value;
    return split;
}

// lib/kstrtox.c _kstrtoull() with base 0: "0x" and a hex digit is hex, a
// leading 0 octal, else decimal; at least one digit, one trailing newline
// at most, no overflow past `max`.
bool parse_magnitude(std::string_view s, uint64_t max, uint64_t* out) {
    unsigned base = 10;
    if (s.size() >= 3 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') &&
        std::isxdigit(static_cast<unsigned char>(s[2])) != 0) {
        base = 16;
        s.remove_prefix(2);
    } else if (!s.empty() && s[0] == '0') {
        base = 8;
    }
    if (!s.empty() && s.back() == '\n') {
        s.remove_suffix(1);
    }
    if (s.empty()) {
        return false;
    }
    uint64_t value = 0;
    for (char c : s) {
        auto lower = static_cast<unsigned char>(std::tolower(static_cast<unsigned char>(c)));
        unsigned digit = std::isdigit(lower) != 0              ? lower - '0'
                         : (lower >= 'a' && lower <= 'f') != 0 ? lower - 'a' + 10
                                                               : base;
        if (digit >= base || value > (max - digit) / base) {
            return false;
        }
        value = value * base + digit;
    }
    *out = value;
    return true;
}

// kstrtou8/u16/uint/ulong (a '+' allowed) and kstrtos16/int/long (a '-').
bool fits_integer(std::string_view s, unsigned bits, bool is_signed) {
    uint64_t limit = bits == 64 ? std::numeric_limits<uint64_t>::max() : (uint64_t{1} << bits) - 1;
    uint64_t value = 0;
    if (is_signed && !s.empty() && s[0] == '-') {
        return parse_magnitude(s.substr(1), uint64_t{1} << (bits - 1), &value);
    }
    if (!s.empty() && s[0] == '+') {
        s.remove_prefix(1);
    }
    return parse_magnitude(s, is_signed ? limit >> 1 : limit, &value);
}

// lib/kstrtox.c kstrtobool(): the first character decides. The set of recent
// kernels (older ones lack t/f and e/d): nothing a kernel takes is refused.
bool fits_bool(std::string_view s) {
    if (s.empty()) {
        return false;
    }
    switch (s[0]) {
    case 'y':
    case 'Y':
    case 't':
    case 'T':
    case 'e':
    case 'E':
    case '1':
    case 'n':
    case 'N':
    case 'f':
    case 'F':
    case 'd':
    case 'D':
    case '0':
        return true;
    case 'o':
    case 'O':
        return s.size() > 1 && std::strchr("nNfF", s[1]) != nullptr;
    default:
        return false;
    }
}

struct IntegerType {
    std::string_view name;
    unsigned bits;
    bool is_signed;
};

// kernel/params.c's standard types (long and ulong as on 64-bit kernels).
constexpr IntegerType kIntegerTypes[] = {
    {"byte", 8, false},   {"short", 16, true},   {"ushort", 16, false},
    {"int", 32, true},    {"uint", 32, false},   {"long", 64, true},
    {"ulong", 64, false}, {"ullong", 64, false}, {"hexint", 32, false},
};

const IntegerType* integer_type(std::string_view type) {
    for (const IntegerType& candidate : kIntegerTypes) {
        if (candidate.name == type) {
            return &candidate;
        }
    }
    return nullptr;
}

// Types whose values kstrtobool() parses (param_set_bool and the ones
// built on it).
bool is_bool_type(std::string_view type) {
    return type == "bool" || type == "invbool" || type == "bint" || type == "bool_enable_only";
}

// kernel/params.c parse_one() refuses a bare NAME unless the type's ops carry
// KERNEL_PARAM_OPS_FL_NOARG: param_ops_bool, _bool_enable_only and _bint do,
// param_ops_invbool does not.
bool takes_no_value(std::string_view type) {
    return type == "bool" || type == "bint" || type == "bool_enable_only";
}

// The standard types whose ops lack KERNEL_PARAM_OPS_FL_NOARG; a type not
// listed here (a module's own ops) may take a bare NAME.
bool needs_value(std::string_view type) {
    return type == "invbool" || type == "charp" || type == "string" ||
           type.starts_with("array of ") || integer_type(type) != nullptr;
}

// module_param_array() declares "array of TYPE" with a standard TYPE; an
// array of arrays is no type the kernel makes, only a hostile or broken
// .modinfo, and is not followed (each level would be a recursion).
bool is_nested_array(std::string_view type) {
    return type.starts_with("array of ") && type.substr(9).starts_with("array of ");
}

// param_set_charp() refuses more than 1024 bytes.
constexpr size_t kMaxCharp = 1024;

std::string describe_type(std::string_view type) {
    if (const IntegerType* integer = integer_type(type)) {
        return "an " + std::string(type) + " (a " + (integer->is_signed ? "" : "non-negative ") +
               std::to_string(integer->bits) + "-bit number: decimal, 0x hex or 0 octal)";
    }
    if (is_bool_type(type)) {
        return "a " + std::string(type) + " (y/n, 1/0, on/off)";
    }
    if (type == "charp") {
        return "a charp (a string of at most 1024 bytes)";
    }
    if (type.starts_with("array of ") && !is_nested_array(type)) {
        return "an " + std::string(type) + " (comma-separated " + describe_type(type.substr(9)) +
               ")";
    }
    return "a " + std::string(type);
}

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) {
        row[j] = j;
    }
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t above = row[j];
            bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

// The declared name a misspelt one most likely meant: a few edits away.
const ModuleParam* closest(std::string_view name, const std::vector<ModuleParam>& params) {
    const ModuleParam* best = nullptr;
    size_t best_distance = 3;
    for (const ModuleParam& param : params) {
        size_t distance = edit_distance(param_key(name), param_key(param.name));
        if (distance < best_distance) {
            best = &param;
            best_distance = distance;
        }
    }
    return best;
}

// What the kernel accepts for every module without a declaration:
// kernel/module/main.c unknown_module_param_cb() and dynamic debug.
bool is_generic_param(std::string_view key) {
    return key == "async_probe" || key == "dyndbg";
}

Diagnostic finding(const ModuleOption& option, const std::string& message) {
    Diagnostic diagnostic =
        error(option.where.file.empty() ? printable(option.word) + " (command line): " + message
                                        : printable(option.word) + ": " + message);
    diagnostic.where = option.where;
    return diagnostic;
}

} // namespace

std::vector<ModuleParam>
params_from_modinfo(const std::vector<std::pair<std::string, std::string>>& modinfo) {
    std::vector<ModuleParam> params;
    for (const auto& [key, value] : modinfo) {
        if (key != "parm" && key != "parmtype") {
            continue;
        }
        size_t colon = value.find(':');
        std::string name = value.substr(0, colon);
        if (name.empty()) {
            continue;
        }
        auto same = std::find_if(params.begin(), params.end(),
                                 [&](const ModuleParam& param) { return param.name == name; });
        if (same == params.end()) {
            params.push_back({name, ""});
            same = params.end() - 1;
        }
        if (key == "parmtype" && colon != std::string::npos) {
            same->type = value.substr(colon + 1);
        }
    }
    return params;
}

bool param_value_fits(std::string_view type, const std::optional<std::string_view>& value) {
    if (type.empty()) {
        return true;
    }
    if (!value) {
        return takes_no_value(type) || !needs_value(type);
    }
    if (is_bool_type(type)) {
        return fits_bool(*value);
    }
    if (const IntegerType* integer = integer_type(type)) {
        return fits_integer(*value, integer->bits, integer->is_signed);
    }
    if (type == "charp") {
        return value->size() <= kMaxCharp;
    }
    if (type.starts_with("array of ")) {
        if (is_nested_array(type)) {
            return true;
        }
        std::string_view element = type.substr(9);
        std::string_view rest = *value;
        while (true) {
            size_t comma = rest.find(',');
            if (!param_value_fits(element, rest.substr(0, comma))) {
                return false;
            }
            if (comma == std::string_view::npos) {
                return true;
            }
            rest.remove_prefix(comma + 1);
        }
    }
    return true; // string (its length is the module's), or a type this does not know
}

std::vector<OptionFinding> check_module_options(std::string_view module,
                                                const std::vector<ModuleOption>& options,
                                                const std::vector<ModuleParam>& params) {
    std::vector<OptionFinding> findings;
    std::string module_name(module);
    for (const ModuleOption& option : options) {
        auto [name, value] = split_word(option.word);
        std::string key = param_key(name);
        auto param = std::find_if(params.begin(), params.end(),
                                  [&](const ModuleParam& p) { return param_key(p.name) == key; });
        if (param == params.end()) {
            if (is_generic_param(key)) {
                continue;
            }
            const ModuleParam* guess = closest(name, params);
            std::string hint = guess ? " (did you mean " + guess->name + "?)" : "";
            findings.push_back(
                {OptionProblem::UnknownName,
                 finding(option, module_name + " declares no parameter " + printable(name) + hint +
                                     ", so the kernel would ignore it: correct the name or"
                                     " remove the option")});
            continue;
        }
        if (!param_value_fits(param->type, value)) {
            std::string got = value ? quote(*value) : "no value";
            findings.push_back({OptionProblem::BadValue,
                                finding(option, module_name + "'s " + param->name + " is " +
                                                    describe_type(param->type) + ", not " + got +
                                                    ", so the kernel would refuse to load " +
                                                    module_name + ": give it a valid value")});
            continue;
        }
        // NVIDIA's driver (kernel-open/nvidia/nv-reg.h, ModifyDeviceFiles):
        // unless 0, every CUDA or NVML start runs nvidia-modprobe, which
        // resets every /dev/nvidia* to the DeviceFile options.
        std::string_view digits = value.value_or("");
        // Its sign aside (the parameter is an int), a value is 0 or not.
        if (digits.starts_with('+') || digits.starts_with('-')) {
            digits.remove_prefix(1);
        }
        uint64_t number = 1;
        if (module_name == "nvidia" && key == "NVreg_ModifyDeviceFiles" && value &&
            (!parse_magnitude(digits, std::numeric_limits<uint64_t>::max(), &number) ||
             number != 0)) {
            findings.push_back(
                {OptionProblem::UndoesPolicy,
                 finding(option, "every CUDA or NVML start would have nvidia-modprobe reset every"
                                 " /dev/nvidia* to NVreg_DeviceFileUID/GID/Mode, undoing the"
                                 " per-GPU groups of gpu-mknod: set NVreg_ModifyDeviceFiles=0")});
        }
    }
    return findings;
}

} // namespace gpuinit
