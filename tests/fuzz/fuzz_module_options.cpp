// Module option strings (modprobe.d "options" text, the command line's
// words; the input is layers separated by NUL bytes): option_words,
// merge_module_options and parse_kernel_cmdline.
#include "fuzz_check.hpp"
#include "gpuinit/modules/option_text.hpp"

#include <algorithm>
#include <set>

namespace {

using namespace gpuinit;
using namespace gpuinit::fuzz;

std::string key_of(const std::string& word) {
    return word.substr(0, word.find('='));
}

std::string joined(const std::vector<std::string>& words) {
    std::string text;
    for (const std::string& word : words) {
        text += text.empty() ? word : " " + word;
    }
    return text;
}

void check_words(std::string_view text) {
    std::vector<std::string> words = option_words(text);
    size_t bytes = 0;
    for (size_t i = 0; i < words.size(); ++i) {
        const std::string& word = words[i];
        FUZZ_CHECK(!word.empty());
        bytes += word.size();
        // Unquoted blanks separate words; only a word whose quote is still
        // open (the last one) holds any.
        size_t quotes = static_cast<size_t>(std::count(word.begin(), word.end(), '"'));
        if (quotes % 2 == 0) {
            bool quoted = false;
            for (char c : word) {
                quoted = c == '"' ? !quoted : quoted;
                FUZZ_CHECK(quoted || (c != ' ' && c != '\t' && c != '\n'));
            }
        } else {
            FUZZ_CHECK(i + 1 == words.size());
        }
    }
    FUZZ_CHECK(bytes <= text.size());
    // Splitting the words joined by single spaces gives them back.
    FUZZ_CHECK(option_words(joined(words)) == words);
}

void check_merge(const std::vector<std::string>& layers) {
    std::string merged = merge_module_options(layers);
    std::vector<std::string> words = option_words(merged);
    // One word per key, each the last one given for that key, and every
    // quote closed: no layer takes in the next one.
    std::set<std::string> keys;
    for (const std::string& word : words) {
        FUZZ_CHECK(keys.insert(key_of(word)).second);
        FUZZ_CHECK(std::count(word.begin(), word.end(), '"') % 2 == 0);
    }
    // The words of every layer, a quote left open closed where the layer ends.
    std::vector<std::string> all;
    for (const std::string& layer : layers) {
        std::vector<std::string> layer_words = option_words(layer);
        if (!layer_words.empty() &&
            std::count(layer_words.back().begin(), layer_words.back().end(), '"') % 2 != 0) {
            layer_words.back() += '"';
        }
        for (std::string& word : layer_words) {
            all.push_back(std::move(word));
        }
    }
    for (const std::string& word : words) {
        auto last = std::find_if(all.rbegin(), all.rend(),
                                 [&](const std::string& w) { return key_of(w) == key_of(word); });
        FUZZ_CHECK(last != all.rend() && *last == word);
    }
    for (const std::string& word : all) {
        FUZZ_CHECK(keys.count(key_of(word)) == 1);
    }
    // Idempotent on its own output, and a no-op layer changes nothing.
    FUZZ_CHECK(merge_module_options({merged}) == merged);
    FUZZ_CHECK(merge_module_options({merged, merged}) == merged);
    FUZZ_CHECK(merge_module_options({merged, ""}) == merged);
    // Merging in steps is merging at once.
    if (layers.size() >= 2) {
        std::vector<std::string> head(layers.begin(), layers.end() - 1);
        FUZZ_CHECK(merge_module_options({merge_module_options(head), layers.back()}) == merged);
    }
}

void check_cmdline(std::string_view text) {
    KernelCmdline cmdline = parse_kernel_cmdline(text);
    for (const auto& [module, param] : cmdline.options) {
        FUZZ_CHECK(!module.empty());
        FUZZ_CHECK(module.find('-') == std::string::npos);
        FUZZ_CHECK(module.find('.') == std::string::npos);
        FUZZ_CHECK(module_key(module) == module);
        FUZZ_CHECK(!(module == "modprobe" && param.starts_with("blacklist=")));
    }
    for (const std::string& name : cmdline.blacklist) {
        FUZZ_CHECK(!name.empty());
        FUZZ_CHECK(name.find(',') == std::string::npos);
        FUZZ_CHECK(module_key(name) == name);
    }
    // Only words with a module. before any '=' count.
    size_t candidates = 0;
    for (const std::string& word : option_words(text)) {
        size_t dot = word.find('.');
        size_t equals = word.find('=');
        candidates +=
            dot != std::string::npos && dot != 0 && (equals == std::string::npos || equals > dot);
    }
    FUZZ_CHECK(cmdline.options.size() <= candidates);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text = as_text(data, size);
    std::vector<std::string> layers;
    for (std::string_view layer : split_at_nul(text)) {
        layers.emplace_back(layer);
        check_words(layer);
    }
    check_merge(layers);
    check_cmdline(layers.front());
    std::string key = module_key(text);
    FUZZ_CHECK(key.size() == text.size() && key.find('-') == std::string::npos);
    return 0;
}
