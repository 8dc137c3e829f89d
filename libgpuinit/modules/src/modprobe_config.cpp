#include "modprobe_config.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/modules/option_text.hpp"
#include "kmod_context.hpp"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <map>
#include <sys/stat.h>

namespace gpuinit {

namespace {

// kmod's precedence.
constexpr const char* kModprobeDirs[] = {"etc/modprobe.d", "run/modprobe.d", "usr/lib/modprobe.d",
                                         "lib/modprobe.d"};

bool is_config_name(std::string_view name) {
    return !name.starts_with('.') && (name.ends_with(".conf") || name.ends_with(".alias")) &&
           name.size() > 5;
}

size_t count_entries(kmod_config_iter* raw) {
    KmodIter iter(raw);
    size_t n = 0;
    while (iter && kmod_config_iter_next(iter.get())) {
        ++n;
    }
    return n;
}

struct OptionsLine {
    std::string pattern;
    std::vector<std::string> words;
    Location where;
};

// The "options" lines of the files as kmod's parser reads them: a line
// ending in '\' goes on on the next one, '#' starts a comment line.
std::vector<OptionsLine> options_lines(const Sysroot& root, const std::vector<std::string>& files) {
    std::vector<OptionsLine> lines;
    for (const std::string& rel : files) {
        auto text = root.read_file(rel, kMaxModprobeFile);
        if (!text) {
            continue;
        }
        std::string logical;
        size_t first_line = 0;
        size_t number = 0;
        for (std::string_view line : split_lines(*text)) {
            ++number;
            if (logical.empty()) {
                first_line = number;
            }
            if (line.ends_with('\\')) {
                logical.append(line.substr(0, line.size() - 1));
                continue;
            }
            logical.append(line);
            std::vector<std::string> words = option_words(logical);
            logical.clear();
            if (words.size() >= 2 && words[0] == "options") {
                lines.push_back({module_key(words[1]),
                                 std::vector<std::string>(words.begin() + 2, words.end()),
                                 Location::in_file(root.display(rel), first_line)});
            }
        }
    }
    return lines;
}

} // namespace

Result<std::vector<std::string>> modprobe_d_files(const Sysroot& root, Diagnostics& diagnostics,
                                                  std::vector<std::string>* relative) {
    std::map<std::string, std::string> chosen; // name -> rel, first directory wins
    for (const char* dir : kModprobeDirs) {
        auto names = root.list_dir(dir);
        if (!names) {
            if (names.error().code == ENOENT || names.error().code == ENOTDIR) {
                continue;
            }
            return names.error();
        }
        for (const std::string& name : *names) {
            if (is_config_name(name)) {
                chosen.emplace(name, std::string(dir) + "/" + name);
            }
        }
    }
    std::vector<std::string> files;
    size_t total = 0;
    for (const auto& [name, rel] : chosen) {
        // libkmod opens the path itself, following links as open() does:
        // check the file the same way.
        std::string path = root.path(rel);
        UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
        struct stat st {};
        if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
            return errno_error("cannot read " + path);
        }
        if (S_ISDIR(st.st_mode)) {
            diagnostics.warning(path + " is a directory; modprobe.d takes files only, so it is"
                                       " ignored");
            continue;
        }
        if (!S_ISREG(st.st_mode)) {
            return error(path + " is not a regular file (a FIFO or a device); libkmod would hang"
                                " or read a device: remove it or make it a file, and rerun",
                         EINVAL);
        }
        auto size = static_cast<size_t>(st.st_size);
        total += size;
        if (size > kMaxModprobeFile || total > kMaxModprobeTotal) {
            return error(format("%s is %zu bytes; modprobe.d files may have %zu bytes each and"
                                " %zu in all: move what is not module configuration out of"
                                " %s and rerun",
                                path.c_str(), size, kMaxModprobeFile, kMaxModprobeTotal,
                                root.display(rel.substr(0, rel.rfind('/'))).c_str()),
                         EFBIG);
        }
        files.push_back(std::move(path));
        if (relative != nullptr) {
            relative->push_back(rel);
        }
    }
    return files;
}

ModprobeConfig read_modprobe_config(kmod_ctx* ctx, const Sysroot& root,
                                    const std::string& modules_rel,
                                    const std::vector<std::string>& files) {
    ModprobeConfig config;
    // A context without config files holds exactly the host's cmdline
    // entries, which kmod appends last: their count is what to drop.
    size_t host_options = 0;
    size_t host_blacklist = 0;
    if (!root.is_host()) {
        const char* no_config[] = {nullptr};
        if (KmodCtx bare = new_kmod_context(kmod_get_dirname(ctx), no_config, nullptr)) {
            host_options = count_entries(kmod_config_get_options(bare.get()));
            host_blacklist = count_entries(kmod_config_get_blacklists(bare.get()));
        }
    }
    KmodIter options(kmod_config_get_options(ctx));
    while (options && kmod_config_iter_next(options.get())) {
        config.options.emplace_back(module_key(kmod_config_iter_get_key(options.get())),
                                    kmod_config_iter_get_value(options.get()));
    }
    KmodIter blacklist(kmod_config_get_blacklists(ctx));
    while (blacklist && kmod_config_iter_next(blacklist.get())) {
        config.blacklist.push_back(module_key(kmod_config_iter_get_key(blacklist.get())));
    }
    config.options.resize(config.options.size() - std::min(host_options, config.options.size()));
    config.blacklist.resize(config.blacklist.size() -
                            std::min(host_blacklist, config.blacklist.size()));
    // Each entry at the first line not taken yet that says the same; on
    // the host, what no file says came from the kernel command line.
    std::vector<OptionsLine> lines = options_lines(root, files);
    std::vector<bool> taken(lines.size());
    for (const auto& [pattern, value] : config.options) {
        std::vector<std::string> words = option_words(value);
        Location where = Location::in_file(root.is_host() ? "/proc/cmdline" : root.display(""));
        for (size_t i = 0; i < lines.size(); ++i) {
            if (!taken[i] && lines[i].pattern == pattern && lines[i].words == words) {
                taken[i] = true;
                where = lines[i].where;
                break;
            }
        }
        config.option_origins.push_back(std::move(where));
    }
    if (!root.is_host()) {
        if (auto text = root.read_file("proc/cmdline")) {
            KernelCmdline cmdline = parse_kernel_cmdline(*text);
            config.options.insert(config.options.end(), cmdline.options.begin(),
                                  cmdline.options.end());
            config.option_origins.resize(config.options.size(),
                                         Location::in_file(root.display("proc/cmdline")));
            config.blacklist.insert(config.blacklist.end(), cmdline.blacklist.begin(),
                                    cmdline.blacklist.end());
        }
    }
    if (auto text = root.read_file(modules_rel + "/modules.builtin", 16u << 20)) {
        for (std::string_view line : split_lines(*text)) {
            std::string_view base = line.substr(line.rfind('/') + 1);
            if (base.size() > 3 && base.ends_with(".ko")) {
                config.builtin.insert(module_key(base.substr(0, base.size() - 3)));
            }
        }
    }
    return config;
}

} // namespace gpuinit
