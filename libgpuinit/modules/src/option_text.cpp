#include "gpuinit/modules/option_text.hpp"

#include <algorithm>

namespace gpuinit {

std::string module_key(std::string_view name) {
    std::string key(name);
    std::replace(key.begin(), key.end(), '-', '_');
    return key;
}

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

std::string merge_module_options(const std::vector<std::string>& layers) {
    std::vector<std::string> merged;
    for (const std::string& layer : layers) {
        std::vector<std::string> words = option_words(layer);
        // A quote left open runs to the end of the text: joined to the next
        // layer, it would take that layer's options into its value. Close it
        // where its layer ends (for a quoted value, k="a b, the kernel reads
        // the same value either way).
        if (!words.empty() && std::count(words.back().begin(), words.back().end(), '"') % 2 != 0) {
            words.back() += '"';
        }
        for (std::string& word : words) {
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
        if (module == "modprobe" && param.starts_with("blacklist=")) {
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

} // namespace gpuinit
