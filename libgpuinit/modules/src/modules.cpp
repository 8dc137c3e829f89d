#include "gpuinit/modules/modules.hpp"

#include "gpuinit/base/text.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fnmatch.h>
#include <libkmod.h>
#include <map>
#include <memory>
#include <set>
#include <spawn.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>

namespace gpuinit {

namespace {

struct CtxDeleter {
    void operator()(kmod_ctx* ctx) const { kmod_unref(ctx); }
};
struct ModuleDeleter {
    void operator()(kmod_module* module) const { kmod_module_unref(module); }
};
struct ListDeleter {
    void operator()(kmod_list* list) const { kmod_module_unref_list(list); }
};
struct IterDeleter {
    void operator()(kmod_config_iter* iter) const { kmod_config_iter_free_iter(iter); }
};
using KmodCtx = std::unique_ptr<kmod_ctx, CtxDeleter>;
using KmodModule = std::unique_ptr<kmod_module, ModuleDeleter>;
using KmodList = std::unique_ptr<kmod_list, ListDeleter>;
using KmodIter = std::unique_ptr<kmod_config_iter, IterDeleter>;

// kmod treats '-' and '_' in module names alike.
std::string module_key(std::string_view name) {
    std::string key(name);
    for (char& c : key) {
        c = c == '-' ? '_' : c;
    }
    return key;
}

// Splits "a=1 b=\"x y\"" into words, keeping quoted values whole.
std::vector<std::string> option_words(std::string_view text) {
    std::vector<std::string> words;
    std::string current;
    bool quoted = false;
    for (char c : text) {
        if (c == '"') {
            quoted = !quoted;
        }
        if (!quoted && (c == ' ' || c == '\t' || c == '\n')) {
            if (!current.empty()) {
                words.push_back(std::move(current));
                current.clear();
            }
            continue;
        }
        current += c;
    }
    if (!current.empty()) {
        words.push_back(std::move(current));
    }
    return words;
}

// A kernel command line as kmod reads it: "mod.param=value" words become
// options of mod, "modprobe.blacklist=a,b" blacklists a and b.
struct KernelCmdline {
    std::vector<std::pair<std::string, std::string>> options; // (module, "param=value")
    std::vector<std::string> blacklist;
};

KernelCmdline parse_kernel_cmdline(std::string_view cmdline) {
    KernelCmdline parsed;
    for (const std::string& word : option_words(cmdline)) {
        size_t dot = word.find('.');
        size_t equals = word.find('=');
        if (dot == std::string::npos || dot == 0 || (equals != std::string::npos && equals < dot)) {
            continue;
        }
        std::string module = module_key(word.substr(0, dot));
        std::string param = word.substr(dot + 1);
        if (module == "modprobe" && param.rfind("blacklist=", 0) == 0) {
            std::string_view names = std::string_view(param).substr(10);
            while (!names.empty()) {
                size_t comma = names.find(',');
                std::string_view name = names.substr(0, comma);
                if (!name.empty()) {
                    parsed.blacklist.push_back(module_key(name));
                }
                names = comma == std::string_view::npos ? "" : names.substr(comma + 1);
            }
            continue;
        }
        parsed.options.emplace_back(std::move(module), std::move(param));
    }
    return parsed;
}

// kmod_new() always parses the host's /proc/cmdline and appends what it finds
// after the entries of the config files. A context without config files
// holds exactly those entries; their count is what to drop from the tail.
struct KmodCmdlineEntries {
    size_t options = 0;
    size_t blacklist = 0;
};

size_t count_entries(kmod_config_iter* raw) {
    KmodIter iter(raw);
    size_t n = 0;
    while (iter && kmod_config_iter_next(iter.get())) {
        ++n;
    }
    return n;
}

KmodCmdlineEntries host_cmdline_entries(const std::string& modules_dir) {
    const char* no_config[] = {nullptr};
    KmodCtx ctx(kmod_new(modules_dir.c_str(), no_config));
    if (!ctx) {
        return {};
    }
    return {count_entries(kmod_config_get_options(ctx.get())),
            count_entries(kmod_config_get_blacklists(ctx.get()))};
}

std::string module_dir_error(const std::string& dir) {
    return " in " + dir + " (is the driver built for this kernel? is depmod run?)";
}

class Planner {
  public:
    Planner(kmod_ctx* ctx, const Sysroot& root, const std::string& modules_rel,
            const ModloadOptions& options, ModuleLoader& loader, ModulePlan& plan,
            ModloadFailure& failure)
        : ctx_(ctx), options_(options), loader_(loader), plan_(plan), failure_(failure) {
        collect_config(root, modules_rel);
        // Command-line options apply wherever the module turns up, also as
        // a dependency of a module requested before it.
        for (const ModuleRequest& request : options.modules) {
            auto& extra = command_line_[module_key(request.name)];
            extra.insert(extra.end(), request.options.begin(), request.options.end());
        }
    }

    // Like modprobe: every module the name or alias resolves to.
    bool plan_request(const ModuleRequest& request) {
        kmod_list* raw = nullptr;
        int found = kmod_module_new_from_lookup(ctx_, request.name.c_str(), &raw);
        KmodList list(raw);
        if (found < 0 || !list) {
            return fail(kModloadNotFound, "module " + request.name + " not found" +
                                              module_dir_error(plan_.modules_dir));
        }
        std::string requested = module_key(request.name);
        std::vector<KmodModule> modules;
        kmod_list* entry = nullptr;
        kmod_list_foreach(entry, list.get()) {
            KmodModule module(kmod_module_get_module(entry));
            if (options_.force || !is_blacklisted(kmod_module_get_name(module.get()))) {
                modules.push_back(std::move(module));
            }
        }
        if (modules.empty()) {
            return fail(kModloadBlacklisted,
                        "module " + request.name +
                            " is blacklisted (modprobe.d or modprobe.blacklist= on the kernel"
                            " command line); remove the blacklist or pass --force");
        }
        for (const KmodModule& module : modules) {
            std::string name = module_key(kmod_module_get_name(module.get()));
            if (name != requested) {
                // Requested through an alias: modprobe.d options given for the
                // alias and this command line's belong to the module.
                aliases_[name] = requested;
                auto& extra = command_line_[name];
                extra.insert(extra.end(), request.options.begin(), request.options.end());
            }
            if (!plan_module(module.get())) {
                return false;
            }
        }
        return true;
    }

  private:
    bool fail(int code, std::string message) {
        failure_ = ModloadFailure{code, std::move(message)};
        return false;
    }

    // modprobe.d's options and blacklist, and the kernel command line of the
    // root being loaded for. kmod_new() always adds the host's /proc/cmdline;
    // for another root those entries are dropped and the root's own
    // proc/cmdline is used instead, so a fixture or a copied machine never
    // sees what the host booted with.
    void collect_config(const Sysroot& root, const std::string& modules_rel) {
        KmodCmdlineEntries from_host;
        if (!root.is_host()) {
            from_host = host_cmdline_entries(plan_.modules_dir);
        }
        KmodIter options(kmod_config_get_options(ctx_));
        while (options && kmod_config_iter_next(options.get())) {
            config_options_.emplace_back(module_key(kmod_config_iter_get_key(options.get())),
                                         kmod_config_iter_get_value(options.get()));
        }
        KmodIter blacklist(kmod_config_get_blacklists(ctx_));
        while (blacklist && kmod_config_iter_next(blacklist.get())) {
            blacklist_.push_back(module_key(kmod_config_iter_get_key(blacklist.get())));
        }
        config_options_.resize(config_options_.size() -
                               std::min(from_host.options, config_options_.size()));
        blacklist_.resize(blacklist_.size() - std::min(from_host.blacklist, blacklist_.size()));
        if (!root.is_host()) {
            if (auto text = root.read_file("proc/cmdline")) {
                KernelCmdline cmdline = parse_kernel_cmdline(*text);
                config_options_.insert(config_options_.end(), cmdline.options.begin(),
                                       cmdline.options.end());
                blacklist_.insert(blacklist_.end(), cmdline.blacklist.begin(),
                                  cmdline.blacklist.end());
            }
        }
        if (auto text = root.read_file(modules_rel + "/modules.builtin")) {
            for (std::string_view line : split_lines(*text)) {
                std::string_view base = line.substr(line.rfind('/') + 1);
                if (base.size() > 3 && base.substr(base.size() - 3) == ".ko") {
                    builtin_.insert(module_key(base.substr(0, base.size() - 3)));
                }
            }
        }
    }

    bool is_blacklisted(const std::string& name) const {
        return std::find(blacklist_.begin(), blacklist_.end(), module_key(name)) !=
               blacklist_.end();
    }

    // As kmod_module_get_options(): entries whose name matches the module (a
    // glob) or is the alias it was requested by, in file order; then this
    // command line's.
    std::string options_for(const std::string& name) const {
        auto alias = aliases_.find(name);
        std::vector<std::string> layers;
        for (const auto& [pattern, value] : config_options_) {
            if (::fnmatch(pattern.c_str(), name.c_str(), 0) == 0 ||
                (alias != aliases_.end() && pattern == alias->second)) {
                layers.push_back(value);
            }
        }
        if (auto extra = command_line_.find(name); extra != command_line_.end()) {
            layers.insert(layers.end(), extra->second.begin(), extra->second.end());
        }
        return merge_module_options(layers);
    }

    // What modprobe puts in place of $CMDLINE_OPTS in an install command.
    std::string install_command(const std::string& name, std::string command) const {
        auto extra = command_line_.find(name);
        std::string options =
            extra == command_line_.end() ? "" : merge_module_options(extra->second);
        constexpr std::string_view kVariable = "$CMDLINE_OPTS";
        for (size_t at = command.find(kVariable); at != std::string::npos;
             at = command.find(kVariable, at + options.size())) {
            command.replace(at, kVariable.size(), options);
        }
        return command;
    }

    bool plan_list(kmod_list* list) {
        kmod_list* entry = nullptr;
        kmod_list_foreach(entry, list) {
            KmodModule dependency(kmod_module_get_module(entry));
            if (!plan_module(dependency.get())) {
                return false;
            }
        }
        return true;
    }

    bool plan_module(kmod_module* module) {
        std::string name = kmod_module_get_name(module);
        std::string key = module_key(name);
        if (!visited_.insert(key).second) {
            return true;
        }
        if (loader_.is_loaded(name)) {
            plan_.steps.push_back({ModuleStep::Kind::AlreadyLoaded, name, "", "", ""});
            return true;
        }
        kmod_list* pre_raw = nullptr;
        kmod_list* post_raw = nullptr;
        kmod_module_get_softdeps(module, &pre_raw, &post_raw);
        KmodList pre(pre_raw);
        KmodList post(post_raw);
        if (!plan_list(pre.get())) {
            return false;
        }
        const char* install = kmod_module_get_install_commands(module);
        if (install != nullptr && options_.run_install) {
            plan_.steps.push_back(
                {ModuleStep::Kind::RunInstall, name, "", "", install_command(key, install)});
        } else {
            KmodList dependencies(kmod_module_get_dependencies(module));
            if (!plan_list(dependencies.get())) {
                return false;
            }
            const char* path = kmod_module_get_path(module);
            if (path == nullptr && builtin_.count(key) != 0) {
                plan_.steps.push_back({ModuleStep::Kind::Builtin, name, "", "", ""});
            } else if (path == nullptr) {
                return fail(kModloadNotFound, "module " + name + " has no file" +
                                                  module_dir_error(plan_.modules_dir));
            } else {
                plan_.steps.push_back({ModuleStep::Kind::Insert, name, path, options_for(key), ""});
            }
        }
        return plan_list(post.get());
    }

    kmod_ctx* ctx_;
    const ModloadOptions& options_;
    ModuleLoader& loader_;
    ModulePlan& plan_;
    ModloadFailure& failure_;
    std::set<std::string> visited_;
    std::set<std::string> builtin_;
    std::vector<std::pair<std::string, std::string>> config_options_;
    std::vector<std::string> blacklist_;
    std::map<std::string, std::string> aliases_; // module -> the alias it was asked for by
    std::map<std::string, std::vector<std::string>> command_line_;
};

std::string default_release(const Sysroot& root, ModloadFailure* failure) {
    if (root.is_host()) {
        struct utsname name {};
        ::uname(&name);
        return name.release;
    }
    auto releases = root.list_dir("lib/modules");
    if (releases && releases->size() == 1) {
        return releases->front();
    }
    *failure =
        ModloadFailure{kModloadUsage, "cannot tell which kernel release under " +
                                          root.display("lib/modules") + " to use; pass --release"};
    return "";
}

ModloadFailure insert_failure(const ModuleStep& step, int error) {
    std::string what = "cannot insert " + step.name + " (" + step.path + "): ";
    switch (error) {
    case ENOENT:
        // The file was opened: the kernel says ENOENT for an unresolved symbol.
        return {kModloadBadModule,
                what + "unknown symbol in module: a module it needs is not loaded, or it was"
                       " built for another driver version; see 'dmesg | tail' for which"};
    case ENOEXEC:
    case EINVAL:
        return {kModloadBadModule, what + std::strerror(error) +
                                       ": unknown symbol, bad parameter or vermagic mismatch;"
                                       " see 'dmesg | tail' for which"};
    case ENOSYS:
        return {kModloadOtherError,
                what + "this kernel cannot load modules (built without CONFIG_MODULES, or a"
                       " container's seccomp filter); load it on the host"};
    case EKEYREJECTED:
        return {kModloadKeyRejected,
                what + "signature rejected by the kernel (Secure Boot): sign the module with a"
                       " key enrolled with mokutil, or use the distribution's signed driver"};
    case EPERM:
    case EACCES:
        return {kModloadPermission,
                what + std::strerror(error) +
                    ": run as root; module loading may be disabled (kernel.modules_disabled,"
                    " lockdown)"};
    default:
        return {kModloadOtherError, what + std::strerror(error)};
    }
}

} // namespace

std::string merge_module_options(const std::vector<std::string>& layers) {
    std::vector<std::string> merged;
    for (const std::string& layer : layers) {
        for (std::string& word : option_words(layer)) {
            std::string key = word.substr(0, word.find('='));
            auto same = std::find_if(merged.begin(), merged.end(), [&](const std::string& w) {
                return w.substr(0, w.find('=')) == key;
            });
            if (same != merged.end()) {
                *same = std::move(word);
            } else {
                merged.push_back(std::move(word));
            }
        }
    }
    std::string text;
    for (const std::string& word : merged) {
        text += text.empty() ? word : " " + word;
    }
    return text;
}

Result<ModulePlan> plan_modules(const Sysroot& root, const ModloadOptions& options,
                                ModuleLoader& loader, ModloadFailure* failure) {
    ModulePlan plan;
    std::string release =
        options.release.empty() ? default_release(root, failure) : options.release;
    if (release.empty()) {
        return Error{EINVAL, failure->message};
    }
    plan.modules_dir = root.path("lib/modules/" + release);
    if (!root.exists("lib/modules/" + release + "/modules.dep.bin")) {
        *failure =
            ModloadFailure{kModloadNotFound, "no module index in " + plan.modules_dir +
                                                 " (modules.dep.bin); run depmod " + release};
        return Error{ENOENT, failure->message};
    }
    // kmod's precedence: a file in an earlier directory hides one with the
    // same name in a later one.
    std::string dirs[] = {root.path("etc/modprobe.d"), root.path("run/modprobe.d"),
                          root.path("usr/lib/modprobe.d"), root.path("lib/modprobe.d")};
    const char* config_paths[] = {dirs[0].c_str(), dirs[1].c_str(), dirs[2].c_str(),
                                  dirs[3].c_str(), nullptr};
    KmodCtx ctx(kmod_new(plan.modules_dir.c_str(), config_paths));
    if (!ctx || kmod_load_resources(ctx.get()) < 0) {
        *failure = ModloadFailure{kModloadOtherError, "libkmod cannot read " + plan.modules_dir};
        return Error{EIO, failure->message};
    }
    kmod_set_log_priority(ctx.get(), 0);
    Planner planner(ctx.get(), root, "lib/modules/" + release, options, loader, plan, *failure);
    for (const ModuleRequest& request : options.modules) {
        if (!planner.plan_request(request)) {
            return Error{EINVAL, failure->message};
        }
    }
    return plan;
}

ModloadReport execute_plan(const ModulePlan& plan, ModuleLoader& loader) {
    ModloadReport report;
    for (const ModuleStep& step : plan.steps) {
        ModuleStep done = step;
        if (step.kind == ModuleStep::Kind::Insert) {
            int result = loader.insert(step.name, step.path, step.options);
            if (result == -EEXIST) {
                done.kind = ModuleStep::Kind::AlreadyLoaded; // loaded meanwhile
            } else if (result != 0) {
                report.failure = insert_failure(step, -result);
                return report;
            }
        } else if (step.kind == ModuleStep::Kind::RunInstall) {
            int status = loader.run_install(step.name, step.command);
            if (status != 0) {
                report.failure = {kModloadOtherError,
                                  format("install command for %s exited %d: %s", step.name.c_str(),
                                         status, step.command.c_str())};
                return report;
            }
        }
        report.done.push_back(std::move(done));
    }
    return report;
}

bool KernelLoader::is_loaded(const std::string& name) {
    std::string dir = "sys/module/" + module_key(name);
    if (auto state = root_.read_file(dir + "/initstate", 64)) {
        std::string_view value = trim(*state);
        return value == "live" || value == "coming";
    }
    // A built-in module has a /sys/module entry but no initstate.
    return root_.exists(dir);
}

int KernelLoader::insert(const std::string& /*name*/, const std::string& path,
                         const std::string& options) {
    const char* no_config[] = {nullptr};
    KmodCtx ctx(kmod_new(nullptr, no_config));
    if (!ctx) {
        return -ENOMEM;
    }
    kmod_set_log_priority(ctx.get(), 0);
    kmod_module* raw = nullptr;
    int made = kmod_module_new_from_path(ctx.get(), path.c_str(), &raw);
    if (made < 0) {
        return made;
    }
    KmodModule module(raw);
    return kmod_module_insert_module(module.get(), 0, options.c_str());
}

int KernelLoader::run_install(const std::string& name, const std::string& command) {
    std::string variable = "MODPROBE_MODULE=" + name;
    std::vector<char*> env;
    for (char** e = environ; *e != nullptr; ++e) {
        env.push_back(*e);
    }
    env.push_back(variable.data());
    env.push_back(nullptr);
    const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
    pid_t pid = 0;
    if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), env.data()) != 0) {
        return 127;
    }
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
        return 128;
    }
    return WEXITSTATUS(status);
}

} // namespace gpuinit
