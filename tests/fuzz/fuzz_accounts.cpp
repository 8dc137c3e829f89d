// /etc/passwd and /etc/group (the input is passwd, a NUL byte, then group):
// AccountDb::from_text against a plain model of the format, and every name
// of the input looked up, plus valid_account_name on each field.
#include "fuzz_check.hpp"
#include "gpuinit/host/accounts.hpp"

#include <map>
#include <optional>

namespace {

using namespace gpuinit;
using namespace gpuinit::fuzz;

// name:password:id[:...]: the first valid entry of a name wins; other lines
// that are neither blank nor comments are skipped with one warning each.
struct Model {
    std::map<std::string, unsigned, std::less<>> ids;
    size_t skipped = 0;
    std::vector<std::string_view> names; // every first field, valid or not
};

Model model_of(std::string_view text) {
    Model model;
    for (std::string_view line : split_lines(text)) {
        if (trim(line).empty() || line.front() == '#') {
            continue;
        }
        std::vector<std::string_view> fields;
        for (size_t start = 0;;) {
            size_t colon = line.find(':', start);
            fields.push_back(line.substr(start, colon - start));
            if (colon == std::string_view::npos) {
                break;
            }
            start = colon + 1;
        }
        model.names.push_back(fields[0]);
        std::optional<uint64_t> id;
        if (fields.size() >= 3) {
            id = parse_decimal(fields[2], 0xfffffffeu);
        }
        if (!id || !valid_account_name(fields[0])) {
            ++model.skipped;
            continue;
        }
        model.ids.emplace(std::string(fields[0]), static_cast<unsigned>(*id));
    }
    return model;
}

bool valid_name_model(std::string_view name) {
    if (name.empty() || name.size() > 256) {
        return false;
    }
    bool digits = true;
    for (unsigned char c : name) {
        if (c <= 0x20 || c == ':' || c == ',' || c == 0x7f) {
            return false;
        }
        digits = digits && c >= '0' && c <= '9';
    }
    return !digits;
}

template <typename Lookup>
void check_table(const Model& model, Lookup lookup) {
    // An all-digit name is the id itself, before the files are asked.
    for (const auto& [name, id] : model.ids) {
        auto number = account_number(name);
        FUZZ_CHECK(lookup(name) == (number ? *number : id));
    }
    for (std::string_view name : model.names) {
        auto found = lookup(name);
        auto it = model.ids.find(name);
        if (auto number = account_number(name)) {
            FUZZ_CHECK(found == number);
        } else if (it != model.ids.end()) {
            FUZZ_CHECK(found == it->second);
        } else {
            // Not in the files: only root has a built-in answer (NSS is off).
            FUZZ_CHECK(found == (name == "root" ? std::optional<unsigned>(0) : std::nullopt));
        }
    }
    FUZZ_CHECK(lookup("root") == (model.ids.count("root") ? model.ids.at("root") : 0u));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text = as_text(data, size);
    size_t nul = text.find('\0');
    std::string_view passwd = text.substr(0, nul);
    std::string_view group = nul == std::string_view::npos ? "" : text.substr(nul + 1);

    Diagnostics diagnostics;
    AccountDb db = AccountDb::from_text(passwd, group, diagnostics);
    Model users = model_of(passwd);
    Model groups = model_of(group);

    FUZZ_CHECK(diagnostics.count(Severity::Error) == 0);
    FUZZ_CHECK(diagnostics.items().size() == users.skipped + groups.skipped);
    for (const Diagnostic& warning : diagnostics.items()) {
        check_diagnostic(warning);
        FUZZ_CHECK(warning.where.file == "passwd" || warning.where.file == "group");
    }
    check_table(users, [&](std::string_view name) -> std::optional<unsigned> {
        auto uid = db.user(name);
        return uid ? std::optional<unsigned>(*uid) : std::nullopt;
    });
    check_table(groups, [&](std::string_view name) -> std::optional<unsigned> {
        auto gid = db.group(name);
        return gid ? std::optional<unsigned>(*gid) : std::nullopt;
    });
    // valid_account_name against its documented rule, on every word.
    for (std::string_view part : {passwd, group}) {
        for (std::string_view word : split_words(part)) {
            FUZZ_CHECK(valid_account_name(word) == valid_name_model(word));
        }
    }
    FUZZ_CHECK(valid_account_name(text) == valid_name_model(text));
    return 0;
}
