#include "gpuinit/mig/layout.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/mig/names.hpp"

#include <algorithm>
#include <tuple>

namespace gpuinit::mig {

namespace {

bool ascii_digit(char c) {
    return c >= '0' && c <= '9';
}

char lower_ascii(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool model_char(char c) {
    return ascii_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
           c == '_' || c == '-' || c == '+' || c == '(' || c == ')';
}

// "<digits><letter>." at the front: its number, and the rest after the dot.
std::optional<unsigned> leading_count(std::string_view& text, char letter) {
    size_t digits = 0;
    while (digits < text.size() && digits < 3 && ascii_digit(text[digits])) {
        ++digits;
    }
    if (digits == 0 || text.size() < digits + 2 || text[digits] != letter ||
        text[digits + 1] != '.') {
        return std::nullopt;
    }
    auto value = parse_decimal(text.substr(0, digits), 999);
    if (!value || *value == 0) {
        return std::nullopt;
    }
    text.remove_prefix(digits + 2);
    return static_cast<unsigned>(*value);
}

// A GI profile without its suffixes: "1g.10gb+me" -> "1g.10gb".
std::string_view profile_core(std::string_view profile) {
    size_t gb = profile.find("gb");
    return gb == std::string_view::npos ? profile : profile.substr(0, gb + 2);
}

// "PROFILE[*N]": the profile and the count.
struct Counted {
    std::string_view profile;
    unsigned count = 1;
};
std::optional<Counted> counted(std::string_view text, unsigned max) {
    Counted result;
    size_t star = text.find('*');
    result.profile = text.substr(0, star);
    if (star != std::string_view::npos) {
        auto count = parse_decimal(text.substr(star + 1), max);
        if (!count || *count == 0) {
            return std::nullopt;
        }
        result.count = static_cast<unsigned>(*count);
    }
    return result;
}

int rank(MigLayout::Subject subject) {
    switch (subject) {
    case MigLayout::Subject::Uuid:
        return 5;
    case MigLayout::Subject::Bdf:
        return 4;
    case MigLayout::Subject::Minor:
        return 3;
    case MigLayout::Subject::Model:
        return 2;
    case MigLayout::Subject::AnyGpu:
        return 1;
    }
    return 0;
}

bool same_subject(const MigLayout::Entry& a, const MigLayout::Entry& b) {
    if (a.subject != b.subject) {
        return false;
    }
    if (a.gpu && b.gpu) {
        return a.gpu->same_as(*b.gpu);
    }
    if (a.subject == MigLayout::Subject::Model) {
        return layout_model_matches(a.model, b.model);
    }
    return true;
}

std::string subject_text(const MigLayout::Entry& entry) {
    switch (entry.subject) {
    case MigLayout::Subject::AnyGpu:
        return "gpu=*";
    case MigLayout::Subject::Model:
        return "model=" + entry.model;
    default:
        return "gpu=" + entry.gpu->text();
    }
}

// Largest GI first: the order a plan creates them in, and one canonical
// order for comparing a layout with what a GPU has.
void sort_gis(std::vector<LayoutGi>& gis) {
    for (LayoutGi& gi : gis) {
        std::sort(gi.cis.begin(), gi.cis.end(), [&](const std::string& a, const std::string& b) {
            unsigned sa = ci_slices_in(a, gi.profile).value_or(0);
            unsigned sb = ci_slices_in(b, gi.profile).value_or(0);
            return std::tie(sb, a) < std::tie(sa, b);
        });
    }
    std::sort(gis.begin(), gis.end(), [](const LayoutGi& a, const LayoutGi& b) {
        unsigned sa = gi_slices(a.profile);
        unsigned sb = gi_slices(b.profile);
        return std::tie(sb, a.profile, a.cis) < std::tie(sa, b.profile, b.cis);
    });
}

// One gi= value into `gis`; a message on failure.
std::optional<std::string> parse_gi(std::string_view value, std::vector<LayoutGi>& gis) {
    size_t slash = value.find('/');
    auto gi = counted(value.substr(0, slash), kMaxLayoutGis);
    if (!gi) {
        return "gi=" + quote(value) + ": a count is written *N, N from 1 to " +
               std::to_string(kMaxLayoutGis);
    }
    if (!valid_mig_profile(gi->profile) || gi_slices(gi->profile) == 0) {
        return quote(gi->profile) +
               " is not a GPU-instance profile (as nvidia-smi mig -lgip names them: 1g.10gb, "
               "3g.40gb, 1g.10gb+me)";
    }
    LayoutGi made;
    made.profile = std::string(gi->profile);
    if (slash == std::string_view::npos) {
        made.cis.push_back(made.profile);
    } else {
        unsigned used = 0;
        for (std::string_view field : split_fields(value.substr(slash + 1), ',')) {
            auto ci = counted(field, kMaxLayoutCis);
            if (!ci || ci->profile.empty()) {
                return "gi=" + quote(value) + ": after '/' come compute-instance profiles, " +
                       "comma-separated, each with an optional *N (N from 1 to " +
                       std::to_string(kMaxLayoutCis) + ")";
            }
            auto slices = valid_mig_profile(ci->profile) ? ci_slices_in(ci->profile, made.profile)
                                                         : std::nullopt;
            if (!slices) {
                return quote(ci->profile) + " is not a compute-instance profile of a " +
                       made.profile + " GPU instance (they are named <n>c." + made.profile +
                       ", or " + made.profile + " for one as large as the GI)";
            }
            if (made.cis.size() + ci->count > kMaxLayoutCis) {
                return format("more than %u compute instances in one GPU instance (the driver's "
                              "limit)",
                              kMaxLayoutCis);
            }
            used += *slices * ci->count;
            if (used > gi_slices(made.profile)) {
                return "gi=" + quote(value) + ": its compute instances take " +
                       std::to_string(used) + " slices, more than the " +
                       std::to_string(gi_slices(made.profile)) + " of a " + made.profile +
                       " GPU instance";
            }
            made.cis.insert(made.cis.end(), ci->count, std::string(ci->profile));
        }
    }
    if (gis.size() + gi->count > kMaxLayoutGis) {
        return format("more than %u GPU instances on one GPU (the driver's limit)", kMaxLayoutGis);
    }
    gis.insert(gis.end(), gi->count, made);
    return std::nullopt;
}

} // namespace

unsigned gi_slices(std::string_view gi_profile) {
    std::string_view rest = gi_profile;
    auto slices = leading_count(rest, 'g');
    return slices ? *slices : 0;
}

std::optional<unsigned> ci_slices_in(std::string_view ci_profile, std::string_view gi_profile) {
    unsigned whole = gi_slices(gi_profile);
    if (whole == 0) {
        return std::nullopt;
    }
    std::string_view rest = ci_profile;
    std::optional<unsigned> part = leading_count(rest, 'c');
    // Where a GI's name has a suffix (+me), NVIDIA's CI names may carry it
    // or not: both name the same size.
    if (rest != gi_profile && rest != profile_core(gi_profile)) {
        return std::nullopt;
    }
    if (!part) {
        return whole;
    }
    if (*part >= whole) {
        return std::nullopt; // the full-size CI is named as its GI
    }
    return part;
}

bool layout_model_matches(std::string_view name, std::string_view model) {
    if (name.size() != model.size() || name.empty()) {
        return false;
    }
    for (size_t i = 0; i < name.size(); ++i) {
        char a = name[i] == ' ' ? '_' : lower_ascii(name[i]);
        char b = model[i] == ' ' ? '_' : lower_ascii(model[i]);
        if (a != b) {
            return false;
        }
    }
    return true;
}

Result<MigLayout> MigLayout::parse(std::string_view text, std::string_view source) {
    MigLayout layout;
    layout.source_ = std::string(source);
    for (const auto& [number, words] : word_lines(text)) {
        // A copy: clang (the fuzz build) cannot capture a structured binding.
        size_t line = number;
        auto fail = [&](std::string what) { return parse_error(source, line, std::move(what)); };
        Entry entry;
        entry.line = line;
        entry.layout.origin = layout.source_ + ":" + std::to_string(line);
        bool have_subject = false;
        std::optional<bool> mig;
        bool have_gi = false;
        for (std::string_view word : words) {
            size_t equals = word.find('=');
            if (equals == std::string_view::npos || equals == 0 || equals + 1 == word.size()) {
                return fail(quote(word) + " is not key=value");
            }
            std::string_view key = word.substr(0, equals);
            std::string_view value = word.substr(equals + 1);
            if (key == "gpu" || key == "model") {
                if (have_subject) {
                    return fail("a line names one gpu= or model=, not two");
                }
                have_subject = true;
                if (key == "model") {
                    if (value.size() > kMaxLayoutModel ||
                        !std::all_of(value.begin(), value.end(), model_char)) {
                        return fail("model=" + quote(value) +
                                    ": the GPU's name as nvidia-smi -L shows it, each space "
                                    "written as _ (model=NVIDIA_H100_80GB_HBM3)");
                    }
                    entry.subject = Subject::Model;
                    entry.model = std::string(value);
                } else if (value == "*") {
                    entry.subject = Subject::AnyGpu;
                } else {
                    auto selector = GpuSelector::parse(value);
                    if (!selector) {
                        return fail(selector.error().message);
                    }
                    entry.gpu = *selector;
                    entry.subject = selector->kind() == GpuSelector::Kind::Uuid  ? Subject::Uuid
                                    : selector->kind() == GpuSelector::Kind::Bdf ? Subject::Bdf
                                                                                 : Subject::Minor;
                }
            } else if (key == "mig") {
                if (mig) {
                    return fail("mig= given twice");
                }
                if (value != "on" && value != "off") {
                    return fail("mig=" + quote(value) + ": it is on or off");
                }
                mig = value == "on";
            } else if (key == "gi") {
                have_gi = true;
                if (auto problem = parse_gi(value, entry.layout.gis)) {
                    return fail(*problem);
                }
            } else {
                return fail("unknown key " + quote(key) + " (expected gpu=, model=, mig=, gi=)");
            }
        }
        if (!have_subject) {
            return fail("the line names no GPU: start it with gpu=*, gpu=MINOR, "
                        "gpu=PCI-ADDRESS, gpu=GPU-UUID or model=NAME");
        }
        if (!mig) {
            return fail("say mig=on or mig=off");
        }
        if (!*mig && have_gi) {
            return fail("gi= needs mig=on: a GPU with MIG off has no GPU instances");
        }
        entry.layout.mig = *mig;
        sort_gis(entry.layout.gis);
        for (const Entry& other : layout.entries_) {
            if (same_subject(other, entry)) {
                return fail(subject_text(entry) + " is named twice (also line " +
                            std::to_string(other.line) + ")");
            }
        }
        layout.entries_.push_back(std::move(entry));
    }
    return layout;
}

Result<std::optional<MigLayout>> MigLayout::load(const Sysroot& root) {
    auto present = root.exists(kLayoutPath);
    if (!present) {
        return present.error();
    }
    if (!*present) {
        return std::optional<MigLayout>();
    }
    auto text = root.read_file(kLayoutPath, kMaxLayoutBytes);
    if (!text) {
        return text.error();
    }
    auto layout = parse(*text, root.display(kLayoutPath));
    if (!layout) {
        return layout.error();
    }
    return std::optional<MigLayout>(std::move(*layout));
}

const GpuLayout* MigLayout::for_gpu(const GpuIdentity& gpu, std::string_view model) const {
    const Entry* best = nullptr;
    for (const Entry& entry : entries_) {
        bool named =
            entry.subject == Subject::AnyGpu ||
            (entry.subject == Subject::Model && layout_model_matches(entry.model, model)) ||
            (entry.gpu && entry.gpu->matches(gpu));
        if (named && (best == nullptr || rank(entry.subject) > rank(best->subject))) {
            best = &entry;
        }
    }
    return best == nullptr ? nullptr : &best->layout;
}

std::string MigLayout::render() const {
    std::string text;
    for (const Entry& entry : entries_) {
        text += subject_text(entry) + (entry.layout.mig ? " mig=on" : " mig=off");
        const std::vector<LayoutGi>& gis = entry.layout.gis;
        for (size_t i = 0; i < gis.size();) {
            size_t same = i + 1;
            while (same < gis.size() && gis[same] == gis[i]) {
                ++same;
            }
            text += " gi=" + gis[i].profile;
            if (same - i > 1) {
                text += "*" + std::to_string(same - i);
            }
            const std::vector<std::string>& cis = gis[i].cis;
            if (!(cis.size() == 1 && cis[0] == gis[i].profile)) {
                text += "/";
                for (size_t c = 0; c < cis.size();) {
                    size_t run = c + 1;
                    while (run < cis.size() && cis[run] == cis[c]) {
                        ++run;
                    }
                    text += (c == 0 ? "" : ",") + cis[c];
                    if (run - c > 1) {
                        text += "*" + std::to_string(run - c);
                    }
                    c = run;
                }
            }
            i = same;
        }
        text += "\n";
    }
    return text;
}

} // namespace gpuinit::mig
