#include "gpuinit/modules/planner.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/modules/failures.hpp"
#include "gpuinit/modules/module_params.hpp"
#include "gpuinit/modules/option_text.hpp"
#include "kmod_context.hpp"
#include "modprobe_config.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fnmatch.h>
#include <map>
#include <set>
#include <sys/utsname.h>

namespace gpuinit {

namespace {

std::string module_dir_hint(const std::string& dir) {
    return " in " + dir + " (is the driver built for this kernel? is depmod run?)";
}

// How a finding about an option is reported: a load refuses (or, forced,
// warns); --check counts a setting that undoes the policy as a danger.
enum class OptionMode { Load, Check };

class Planner {
  public:
    Planner(kmod_ctx* ctx, ModprobeConfig config, const ModloadOptions& options,
            ModuleLoader& loader, ModulePlan& plan, Diagnostics& diagnostics, OptionMode mode)
        : ctx_(ctx), config_(std::move(config)), options_(options), loader_(loader), plan_(plan),
          diagnostics_(diagnostics), mode_(mode) {
        // Command-line options apply wherever the module turns up, also as
        // a dependency of a module requested before it.
        for (const ModuleRequest& request : options.modules) {
            auto& extra = command_line_[module_key(request.name)];
            extra.insert(extra.end(), request.options.begin(), request.options.end());
        }
    }

    // Like modprobe: every module the name or alias resolves to.
    Status plan_request(const ModuleRequest& request) {
        kmod_list* raw = nullptr;
        int found = kmod_module_new_from_lookup(ctx_, request.name.c_str(), &raw);
        KmodList list(raw);
        if (found < 0 || !list) {
            return module_failure(ModuleFailure::NotFound,
                                  "module " + printable(request.name) + " not found" +
                                      module_dir_hint(plan_.modules_dir),
                                  ENOENT);
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
            return module_failure(ModuleFailure::Blacklisted,
                                  "module " + printable(request.name) +
                                      " is blacklisted (modprobe.d or modprobe.blacklist= on the"
                                      " kernel command line); remove the blacklist or pass"
                                      " --force");
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
            if (auto planned = plan_module(module.get()); !planned) {
                return planned;
            }
        }
        return {};
    }

  private:
    bool is_blacklisted(const std::string& name) const {
        return std::find(config_.blacklist.begin(), config_.blacklist.end(), module_key(name)) !=
               config_.blacklist.end();
    }

    // As kmod_module_get_options(): entries whose name matches the module (a
    // glob) or is the alias it was requested by, in file order; then this
    // command line's. Each with where it came from.
    std::vector<std::pair<std::string, Location>> option_layers(const std::string& name) const {
        auto alias = aliases_.find(name);
        std::vector<std::pair<std::string, Location>> layers;
        for (size_t i = 0; i < config_.options.size(); ++i) {
            const auto& [pattern, value] = config_.options[i];
            if (::fnmatch(pattern.c_str(), name.c_str(), 0) == 0 ||
                (alias != aliases_.end() && pattern == alias->second)) {
                layers.emplace_back(value, i < config_.option_origins.size()
                                               ? config_.option_origins[i]
                                               : Location{});
            }
        }
        if (auto extra = command_line_.find(name); extra != command_line_.end()) {
            for (const std::string& option : extra->second) {
                layers.emplace_back(option, Location{});
            }
        }
        return layers;
    }

    std::string options_for(const std::string& name) const {
        std::vector<std::string> texts;
        for (const auto& layer : option_layers(name)) {
            texts.push_back(layer.first);
        }
        return merge_module_options(texts);
    }

    // The words the module will get, a later one for the same parameter
    // replacing an earlier one (as merge_module_options), with their origin.
    std::vector<ModuleOption> final_options(const std::string& name) const {
        std::vector<ModuleOption> words;
        for (const auto& [text, where] : option_layers(name)) {
            for (std::string& word : option_words(text)) {
                std::string key = word.substr(0, word.find('='));
                auto same = std::find_if(words.begin(), words.end(), [&](const ModuleOption& o) {
                    return o.word.substr(0, o.word.find('=')) == key;
                });
                if (same != words.end()) {
                    *same = {std::move(word), where};
                } else {
                    words.push_back({std::move(word), where});
                }
            }
        }
        return words;
    }

    // The options against the parameters the module file declares. A
    // module whose .modinfo cannot be read is said once, and its options
    // are left to the kernel: no list is made up for it.
    void check_options(kmod_module* module, const std::string& key, const char* path) {
        std::vector<ModuleOption> words = final_options(key);
        if (words.empty()) {
            return;
        }
        kmod_list* raw = nullptr;
        int read = kmod_module_get_info(module, &raw);
        if (read < 0) {
            diagnostics_.warning("cannot read the parameters " + key + " declares from " +
                                 printable(path) + " (" + std::strerror(-read) +
                                 "), so its options are not checked against them");
            return;
        }
        std::vector<std::pair<std::string, std::string>> modinfo;
        kmod_list* entry = nullptr;
        kmod_list_foreach(entry, raw) {
            const char* info_key = kmod_module_info_get_key(entry);
            const char* info_value = kmod_module_info_get_value(entry);
            modinfo.emplace_back(info_key ? info_key : "", info_value ? info_value : "");
        }
        kmod_module_info_free_list(raw);
        for (OptionFinding& finding :
             check_module_options(key, words, params_from_modinfo(modinfo))) {
            Diagnostic& diagnostic = finding.diagnostic;
            if (mode_ == OptionMode::Check) {
                diagnostic.reason = static_cast<int>(finding.problem == OptionProblem::UndoesPolicy
                                                         ? ModuleFailure::CheckDanger
                                                         : ModuleFailure::BadOption);
                plan_.option_errors.push_back(std::move(diagnostic));
            } else if (options_.force) {
                diagnostic.severity = Severity::Warning;
                diagnostic.message += " (--force: loading anyway)";
                diagnostics_.add(std::move(diagnostic));
            } else {
                diagnostic.reason = static_cast<int>(ModuleFailure::BadOption);
                plan_.option_errors.push_back(std::move(diagnostic));
            }
        }
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

    Status plan_list(kmod_list* list) {
        kmod_list* entry = nullptr;
        kmod_list_foreach(entry, list) {
            KmodModule dependency(kmod_module_get_module(entry));
            if (auto planned = plan_module(dependency.get()); !planned) {
                return planned;
            }
        }
        return {};
    }

    Status plan_module(kmod_module* module) {
        std::string name = kmod_module_get_name(module);
        std::string key = module_key(name);
        if (!visited_.insert(key).second) {
            return {};
        }
        if (mode_ == OptionMode::Load && loader_.is_loaded(name)) {
            plan_.steps.push_back({ModuleStep::Kind::AlreadyLoaded, name, "", "", ""});
            return {};
        }
        kmod_list* pre_raw = nullptr;
        kmod_list* post_raw = nullptr;
        kmod_module_get_softdeps(module, &pre_raw, &post_raw);
        KmodList pre(pre_raw);
        KmodList post(post_raw);
        if (auto planned = plan_list(pre.get()); !planned) {
            return planned;
        }
        const char* install = kmod_module_get_install_commands(module);
        if (install != nullptr && options_.run_install) {
            plan_.steps.push_back(
                {ModuleStep::Kind::RunInstall, name, "", "", install_command(key, install)});
        } else {
            KmodList dependencies(kmod_module_get_dependencies(module));
            if (auto planned = plan_list(dependencies.get()); !planned) {
                return planned;
            }
            const char* path = kmod_module_get_path(module);
            if (path == nullptr && config_.builtin.count(key) != 0) {
                plan_.steps.push_back({ModuleStep::Kind::Builtin, name, "", "", ""});
            } else if (path == nullptr) {
                return module_failure(
                    ModuleFailure::NotFound,
                    "module " + name + " has no file" + module_dir_hint(plan_.modules_dir), ENOENT);
            } else {
                check_options(module, key, path);
                plan_.steps.push_back({ModuleStep::Kind::Insert, name, path, options_for(key), ""});
            }
        }
        return plan_list(post.get());
    }

    kmod_ctx* ctx_;
    ModprobeConfig config_;
    const ModloadOptions& options_;
    ModuleLoader& loader_;
    ModulePlan& plan_;
    Diagnostics& diagnostics_;
    OptionMode mode_;
    std::set<std::string> visited_;
    std::map<std::string, std::string> aliases_; // module -> the alias it was asked for by
    std::map<std::string, std::vector<std::string>> command_line_;
};

Result<std::string> default_release(const Sysroot& root) {
    if (root.is_host()) {
        struct utsname name {};
        ::uname(&name);
        return std::string(name.release);
    }
    auto releases = root.list_dir("lib/modules");
    if (releases && releases->size() == 1) {
        return releases->front();
    }
    if (!releases || releases->empty()) {
        return module_failure(ModuleFailure::NotFound,
                              "no kernel modules under " + root.display("lib/modules"), ENOENT);
    }
    return module_failure(ModuleFailure::Usage, "cannot tell which kernel release under " +
                                                    root.display("lib/modules") +
                                                    " to use; pass --release");
}

Result<ModulePlan> plan_with(const Sysroot& root, const ModloadOptions& options,
                             ModuleLoader& loader, Diagnostics& diagnostics, OptionMode mode) {
    ModulePlan plan;
    auto release =
        options.release.empty() ? default_release(root) : Result<std::string>(options.release);
    if (!release) {
        return release.error();
    }
    if (release->empty() || release->find('/') != std::string::npos || *release == "." ||
        *release == "..") {
        return module_failure(ModuleFailure::Usage,
                              "--release " + quote(*release) + " is not a kernel release");
    }
    std::string modules_rel = "lib/modules/" + *release;
    plan.modules_dir = root.path(modules_rel);
    if (!root.exists(modules_rel + "/modules.dep.bin").value_or(false)) {
        return module_failure(ModuleFailure::NotFound,
                              "no module index in " + plan.modules_dir +
                                  " (modules.dep.bin); run depmod " + *release,
                              ENOENT);
    }
    std::vector<std::string> relative;
    auto files = modprobe_d_files(root, diagnostics, &relative);
    if (!files) {
        Diagnostic failure = files.error();
        failure.reason = static_cast<int>(ModuleFailure::Other);
        return failure;
    }
    std::vector<const char*> config_paths;
    for (const std::string& file : *files) {
        config_paths.push_back(file.c_str());
    }
    config_paths.push_back(nullptr);
    KmodCtx ctx = new_kmod_context(plan.modules_dir.c_str(), config_paths.data(), &diagnostics);
    if (!ctx || kmod_load_resources(ctx.get()) < 0) {
        return module_failure(ModuleFailure::Other, "libkmod cannot read " + plan.modules_dir);
    }
    Planner planner(ctx.get(), read_modprobe_config(ctx.get(), root, modules_rel, relative),
                    options, loader, plan, diagnostics, mode);
    for (const ModuleRequest& request : options.modules) {
        if (auto planned = planner.plan_request(request); !planned) {
            return planned.error();
        }
    }
    return plan;
}

// What --check plans with: nothing counts as loaded, so that the module
// file is found and read whether the driver runs or not.
class NothingLoaded : public ModuleLoader {
  public:
    bool is_loaded(const std::string& /*name*/) override { return false; }
    int insert(const std::string&, const std::string&, const std::string&) override {
        return -EPERM;
    }
    int run_install(const std::string&, const std::string&) override { return 1; }
};

} // namespace

Result<ModulePlan> plan_modules(const Sysroot& root, const ModloadOptions& options,
                                ModuleLoader& loader, Diagnostics& diagnostics) {
    return plan_with(root, options, loader, diagnostics, OptionMode::Load);
}

Result<std::vector<Diagnostic>> check_configured_options(const Sysroot& root,
                                                         const std::string& release,
                                                         const std::string& module,
                                                         Diagnostics& diagnostics) {
    ModloadOptions options;
    options.release = release;
    options.modules.push_back({module, {}});
    NothingLoaded loader;
    auto planned = plan_with(root, options, loader, diagnostics, OptionMode::Check);
    if (!planned) {
        return planned.error();
    }
    return std::move(planned->option_errors);
}

} // namespace gpuinit
