// The driver's "Key: value" reader in both key styles: what it returns
// points into the text, is trimmed and checked, and a canonical rendering
// reads back the same.
#include "fuzz_check.hpp"
#include "gpuinit/host/kv_reader.hpp"

#include <algorithm>

namespace {

using namespace gpuinit;
using namespace gpuinit::fuzz;

bool key_char(char c, KeyStyle style) {
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (alnum || c == '_' || c == '-' || c == '.') {
        return true;
    }
    return style == KeyStyle::Words && (c == ' ' || c == '(' || c == ')');
}

bool inside(std::string_view part, std::string_view text) {
    return part.empty() ||
           (part.data() >= text.data() && part.data() + part.size() <= text.data() + text.size());
}

// Checks one successful read; returns its canonical text.
std::string check_entries(const std::vector<KeyValue>& entries, std::string_view text,
                          KeyStyle style) {
    std::vector<std::string_view> lines = split_lines(text);
    size_t previous = 0;
    std::string canonical;
    for (const KeyValue& entry : entries) {
        FUZZ_CHECK(inside(entry.key, text) && inside(entry.value, text));
        FUZZ_CHECK(!entry.key.empty() && trim(entry.key) == entry.key);
        FUZZ_CHECK(std::all_of(entry.key.begin(), entry.key.end(),
                               [style](char c) { return key_char(c, style); }));
        FUZZ_CHECK(trim(entry.value) == entry.value);
        FUZZ_CHECK(std::none_of(entry.value.begin(), entry.value.end(), [](char c) {
            return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
        }));
        FUZZ_CHECK(entry.line > previous && entry.line <= lines.size());
        previous = entry.line;
        // The key is the start of its line, before the first ':'.
        std::string_view line = lines[entry.line - 1];
        FUZZ_CHECK(trim(line.substr(0, line.find(':'))) == entry.key);
        // Keys are unique: find_key gives back this entry.
        FUZZ_CHECK(find_key(entries, entry.key) == &entry);
        canonical += std::string(entry.key) + ": " + std::string(entry.value) + "\n";
    }
    FUZZ_CHECK(find_key(entries, "") == nullptr);
    return canonical;
}

void check_same(const std::vector<KeyValue>& a, const std::vector<KeyValue>& b) {
    FUZZ_CHECK(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        FUZZ_CHECK(a[i].key == b[i].key && a[i].value == b[i].value);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text = as_text(data, size);
    auto words = read_key_values(text, "information", KeyStyle::Words);
    auto identifier = read_key_values(text, "params", KeyStyle::Identifier);
    for (const auto* result : {&words, &identifier}) {
        if (!*result) {
            check_diagnostic(result->error());
            FUZZ_CHECK(result->error().where.line >= 1 &&
                       result->error().where.line <= line_count(text));
        }
    }
    // Words keys are a superset of identifier keys: the same text reads the same.
    if (identifier) {
        FUZZ_CHECK(words.ok());
        check_same(*identifier, *words);
    }
    if (words) {
        std::string canonical = check_entries(*words, text, KeyStyle::Words);
        auto again = read_key_values(canonical, "canonical", KeyStyle::Words);
        FUZZ_CHECK(again.ok());
        check_same(*words, *again);
    }
    if (identifier) {
        check_entries(*identifier, text, KeyStyle::Identifier);
    }
    return 0;
}
