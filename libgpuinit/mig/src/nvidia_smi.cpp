// nvidia-smi's output as MIG names: the parsers (hostile input, line by
// line), their join, the saved-output directory and the runner. Where the
// formats come from: see names.cpp.
#include "gpuinit/base/spawn.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/host/gpu_selector.hpp"
#include "gpuinit/host/pci.hpp"
#include "gpuinit/mig/names.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <set>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

namespace gpuinit {

namespace {

// GPU indices, GI and CI ids as the driver bounds them: 32 GPUs in the cap
// table (nvidia-smi may show more GPUs without MIG), GI ids 0..14, CI 0..7.
constexpr uint64_t kMaxSmiIndex = 1023;
constexpr uint64_t kMaxMigDevice = 127;
constexpr uint64_t kMaxGi = 14;
constexpr uint64_t kMaxCi = 7;
// -lgipp's bounds: GPU indices, and placements within a GPU's memory
// slices (8 on A100 and H100, 12 on the RTX PRO 6000 Blackwell captures).
constexpr uint64_t kMaxGpuIndex = 255;
constexpr uint64_t kMaxGpus = kMaxGpuIndex + 1;
constexpr unsigned kMaxMemorySlices = 64;
// The kernel's PID_MAX_LIMIT (4194304, include/linux/threads.h).
constexpr uint64_t kMaxPid = 4194304;
// A bound on one GPU's process rows, against a hostile or runaway output.
constexpr size_t kMaxGpuProcesses = 65536;
constexpr uint64_t kMaxProfileId = 255;
// Nesting of -q -x: nvidia_smi_log/gpu/mig_devices/mig_device/... is 6 deep.
constexpr size_t kMaxXmlDepth = 16;

Diagnostic at(std::string_view source, size_t line, std::string message) {
    return parse_error(source, line, std::move(message));
}

std::optional<unsigned> number(std::string_view text, uint64_t max) {
    auto value = parse_decimal(text, max);
    if (!value) {
        return std::nullopt;
    }
    return static_cast<unsigned>(*value);
}

std::string lower_copy(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), [](char c) {
        return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    });
    return out;
}

// The "(UUID: X)" at the end of a -L line: X, and the text before it.
bool split_uuid_suffix(std::string_view line, std::string_view& before, std::string_view& uuid) {
    constexpr std::string_view kOpen = "(UUID: ";
    if (!line.ends_with(')')) {
        return false;
    }
    size_t open = line.rfind(kOpen);
    if (open == std::string_view::npos) {
        return false;
    }
    uuid = line.substr(open + kOpen.size(), line.size() - 1 - open - kOpen.size());
    before = trim(line.substr(0, open));
    return true;
}

Status check_mig_uuid(std::string_view uuid, std::string_view source, size_t line) {
    if (old_mig_uuid_form(uuid)) {
        return at(source, line,
                  "MIG UUID " + quote(uuid, 96) +
                      " is in the old MIG-GPU-<uuid>/<gi>/<ci> form, which drivers from R470 on "
                      "reject: upgrade the driver to R470 or later and save the output again");
    }
    if (!valid_mig_uuid(uuid)) {
        return at(source, line, "not a MIG UUID (MIG-<uuid>): " + quote(uuid));
    }
    return {};
}

// The words of a "| ... |" table row, or nullopt when the line is not one.
std::optional<std::vector<std::string_view>> row_words(std::string_view line) {
    if (line.size() < 2 || line.front() != '|' || line.back() != '|') {
        return std::nullopt;
    }
    return split_words(line.substr(1, line.size() - 2));
}

bool border(std::string_view line) {
    return line.size() >= 2 && line.front() == '+' &&
           std::all_of(line.begin(), line.end(), [](char c) { return c == '+' || c == '-'; });
}

bool rule_row(std::string_view line) {
    return line.size() >= 2 && line.front() == '|' && line.back() == '|' &&
           std::all_of(line.begin() + 1, line.end() - 1,
                       [](char c) { return c == '=' || c == '+'; });
}

bool header_row(const std::vector<std::string_view>& words) {
    static const std::set<std::string_view> kHeader = {
        "GPU",      "Compute", "instances:", "Name",      "Profile",
        "Instance", "ID",      "Placement",  "Start:Size"};
    return !words.empty() && std::all_of(words.begin(), words.end(),
                                         [](std::string_view w) { return kHeader.contains(w); });
}

// "Start:Size", both small numbers.
bool placement(std::string_view word) {
    size_t colon = word.find(':');
    return colon != std::string_view::npos && number(word.substr(0, colon), 255) &&
           number(word.substr(colon + 1), 255);
}

// Lines nvidia-smi prints instead of a table, and what to do about them.
std::optional<Diagnostic> table_failure(std::string_view line, std::string_view source,
                                        size_t number_of_line) {
    std::string low = lower_copy(line);
    if (low.find("insufficient permissions") != std::string::npos ||
        low.find("permission") != std::string::npos) {
        return at(source, number_of_line,
                  quote(line, 96) + ": nvidia-smi mig lists instances only for root; save its "
                                    "output as root");
    }
    return std::nullopt;
}

// Shared by -lgi and -lci: walks the table, hands data rows to `row`.
template <typename Row>
Status walk_table(std::string_view text, std::string_view source, std::string_view title,
                  std::string_view none_found, Row row) {
    std::vector<std::string_view> lines = split_lines(text);
    for (size_t i = 0; i < lines.size(); ++i) {
        size_t line_no = i + 1;
        std::string_view line = trim(lines[i]);
        if (line.empty() || border(line) || rule_row(line)) {
            continue;
        }
        // "No GPU instances found: Not Found"; "No MIG-enabled devices
        // found." when no GPU has MIG on (580.159.04, captures/h100-*).
        // "No GPU instances found: Insufficient Permissions" is a failure.
        if (auto failure = table_failure(line, source, line_no)) {
            return *failure;
        }
        if (line.starts_with(none_found) || line == "No MIG-enabled devices found.") {
            continue;
        }
        auto words = row_words(line);
        if (!words) {
            if (auto failure = table_failure(line, source, line_no)) {
                return *failure;
            }
            return at(source, line_no,
                      "not a line of " + std::string(title) + ": " + quote(line, 96));
        }
        if (words->empty() || header_row(*words)) {
            continue;
        }
        if (Status taken = row(*words, line_no); !taken) {
            return taken;
        }
    }
    return {};
}

// ---- -q -x ---------------------------------------------------------------

bool tag_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

// The name at the start of `text` (after '<' or "</").
std::string_view tag_name(std::string_view text) {
    size_t n = 0;
    while (n < text.size() && tag_char(text[n])) {
        ++n;
    }
    return text.substr(0, n);
}

std::string xml_text(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    while (!text.empty()) {
        bool replaced = false;
        for (auto [entity, c] : {std::pair<std::string_view, char>{"&amp;", '&'},
                                 {"&lt;", '<'},
                                 {"&gt;", '>'},
                                 {"&quot;", '"'},
                                 {"&apos;", '\''}}) {
            if (text.starts_with(entity)) {
                out += c;
                text.remove_prefix(entity.size());
                replaced = true;
                break;
            }
        }
        if (!replaced) {
            out += text.front();
            text.remove_prefix(1);
        }
    }
    return out;
}

struct MigInProgress {
    std::optional<unsigned> index;
    std::optional<unsigned> gi;
    std::optional<unsigned> ci;
    size_t line = 0;
};

// One row of `mig -lgi` (GPU MIG PROFILE PROFILE-ID GI-ID [START:SIZE]) or,
// with `compute`, of `mig -lci` (GPU GI-ID MIG PROFILE PROFILE-ID CI-ID
// [START:SIZE]), its words as walk_table splits them.
struct InstanceRow {
    unsigned gpu = 0;
    unsigned gi = 0;
    unsigned ci = 0;
    unsigned profile_id = 0;
    std::string profile;
};

Result<InstanceRow> instance_row(const std::vector<std::string_view>& w, bool compute,
                                 std::string_view source, size_t line_no) {
    size_t shift = compute ? 1 : 0; // -lci has the GI id second
    size_t size = 5 + shift;
    if ((w.size() != size && w.size() != size + 1) || w[1 + shift] != "MIG" ||
        (w.size() == size + 1 && !placement(w[size]))) {
        return at(source, line_no,
                  compute ? "not a compute instance row (GPU GI-ID MIG PROFILE PROFILE-ID CI-ID "
                            "START:SIZE)"
                          : "not a GPU instance row (GPU MIG PROFILE PROFILE-ID GI-ID START:SIZE)");
    }
    auto gpu = number(w[0], kMaxSmiIndex);
    auto gi = number(w[compute ? 1 : 4], kMaxGi);
    auto profile_id = number(w[3 + shift], kMaxProfileId);
    auto ci = compute ? number(w[5], kMaxCi) : std::optional<unsigned>(0);
    if (!gpu || !gi || !profile_id || !ci) {
        return at(source, line_no,
                  format("GPU index (0-%u), GI id (0-%u), profile id (0-%u) or CI id (0-%u) out "
                         "of range",
                         static_cast<unsigned>(kMaxSmiIndex), static_cast<unsigned>(kMaxGi),
                         static_cast<unsigned>(kMaxProfileId), static_cast<unsigned>(kMaxCi)));
    }
    std::string_view profile = w[2 + shift];
    if (!valid_mig_profile(profile)) {
        return at(source, line_no, "not a MIG profile name: " + quote(profile));
    }
    return InstanceRow{*gpu, *gi, *ci, *profile_id, std::string(profile)};
}

} // namespace

Result<std::vector<SmiListGpu>> parse_nvidia_smi_list(std::string_view text,
                                                      std::string_view source) {
    std::vector<SmiListGpu> gpus;
    std::set<unsigned> indices;
    std::set<std::string> uuids;
    std::vector<std::string_view> lines = split_lines(text);
    for (size_t i = 0; i < lines.size(); ++i) {
        size_t line_no = i + 1;
        std::string_view line = trim(lines[i]);
        if (line.empty() || line == "No devices found.") {
            continue;
        }
        std::string_view before;
        std::string_view uuid;
        if (line.starts_with("GPU ")) {
            size_t colon = line.find(": ");
            if (colon == std::string_view::npos || !split_uuid_suffix(line, before, uuid) ||
                before.size() < colon + 2) {
                return at(source, line_no,
                          "not a GPU line of nvidia-smi -L (GPU N: NAME (UUID: GPU-...)): " +
                              quote(line, 96));
            }
            auto index = number(line.substr(4, colon - 4), kMaxSmiIndex);
            if (!index) {
                return at(source, line_no,
                          "GPU index " + quote(line.substr(4, colon - 4)) + " is not a number");
            }
            SmiListGpu gpu;
            gpu.index = *index;
            gpu.name = std::string(trim(before.substr(colon + 2)));
            gpu.uuid = std::string(uuid);
            gpu.line = line_no;
            if (!valid_gpu_uuid(gpu.uuid) || gpu.uuid.size() != 40) {
                return at(source, line_no, "not a GPU UUID: " + quote(gpu.uuid));
            }
            if (!indices.insert(gpu.index).second) {
                return at(source, line_no, format("GPU %u is listed twice", gpu.index));
            }
            if (!uuids.insert(lower_copy(gpu.uuid)).second) {
                return at(source, line_no, "GPU UUID " + quote(gpu.uuid) + " is listed twice");
            }
            gpus.push_back(std::move(gpu));
            continue;
        }
        if (line.starts_with("MIG ")) {
            if (!split_uuid_suffix(line, before, uuid)) {
                return at(source, line_no,
                          "not a MIG line of nvidia-smi -L (MIG PROFILE Device N: (UUID: "
                          "MIG-...)): " +
                              quote(line, 96));
            }
            if (gpus.empty()) {
                return at(source, line_no, "a MIG device before any GPU line");
            }
            std::vector<std::string_view> words = split_words(before);
            if (words.size() != 4 || words[2] != "Device" || !words[3].ends_with(':')) {
                return at(source, line_no,
                          "not a MIG line of nvidia-smi -L (MIG PROFILE Device N: (UUID: "
                          "MIG-...)): " +
                              quote(line, 96));
            }
            SmiListMig mig;
            auto device = number(words[3].substr(0, words[3].size() - 1), kMaxMigDevice);
            if (!device) {
                return at(source, line_no,
                          "MIG device index " + quote(words[3]) + " is not a number");
            }
            if (!valid_mig_profile(words[1])) {
                return at(source, line_no, "not a MIG profile name: " + quote(words[1]));
            }
            if (Status checked = check_mig_uuid(uuid, source, line_no); !checked) {
                return checked.error();
            }
            mig.device = *device;
            mig.profile = std::string(words[1]);
            mig.uuid = std::string(uuid);
            mig.line = line_no;
            for (const SmiListMig& other : gpus.back().migs) {
                if (other.device == mig.device) {
                    return at(source, line_no,
                              format("MIG device %u of GPU %u is listed twice", mig.device,
                                     gpus.back().index));
                }
            }
            if (!uuids.insert(lower_copy(mig.uuid)).second) {
                return at(source, line_no, "MIG UUID " + quote(mig.uuid) + " is listed twice");
            }
            gpus.back().migs.push_back(std::move(mig));
            continue;
        }
        std::string low = lower_copy(line);
        if (low.find("nvidia-smi has failed") != std::string::npos ||
            low.find("driver") != std::string::npos) {
            return at(source, line_no,
                      "nvidia-smi failed: " + quote(line, 96) +
                          ": load the driver and take the output again");
        }
        return at(source, line_no, "not a line of nvidia-smi -L: " + quote(line, 96));
    }
    return gpus;
}

Result<std::vector<SmiPlacements>> parse_nvidia_smi_lgipp(std::string_view text,
                                                          std::string_view source) {
    std::vector<SmiPlacements> rows;
    std::set<std::pair<unsigned, unsigned>> seen;
    size_t line_no = 0;
    for (std::string_view raw : split_lines(text)) {
        ++line_no;
        std::string_view line = trim(raw);
        if (line.empty() || line == "No MIG-enabled devices found.") {
            continue;
        }
        std::vector<std::string_view> w = split_words(line);
        // "Placements:" or, for a single one, "Placement :".
        size_t list = w.size() == 7 && w[5] == "Placements:"                ? 6
                      : w.size() == 8 && w[5] == "Placement" && w[6] == ":" ? 7
                                                                            : 0;
        auto gpu = w.size() > 4 ? number(w[1], kMaxGpuIndex) : std::nullopt;
        auto profile = w.size() > 4 ? number(w[4], kMaxProfileId) : std::nullopt;
        if (list == 0 || w[0] != "GPU" || w[2] != "Profile" || w[3] != "ID" || !gpu || !profile) {
            return at(source, line_no,
                      "not a line of nvidia-smi mig -lgipp (GPU N Profile ID P Placements: "
                      "{S,...}:SIZE): " +
                          quote(line));
        }
        std::string_view spec = w[list];
        size_t close = spec.find("}:");
        SmiPlacements row{*gpu, *profile, {}, 0, line_no};
        // A plain value, not an optional: GCC 12 at -O2 misreads the
        // optional's engaged flag here (-Wmaybe-uninitialized).
        unsigned size = 0;
        if (close != std::string_view::npos) {
            size = number(spec.substr(close + 2), kMaxMemorySlices).value_or(0);
        }
        if (!spec.starts_with('{') || size == 0) {
            return at(source, line_no, "not a placement list {S,...}:SIZE: " + quote(spec));
        }
        row.size = size;
        for (std::string_view start : split_fields(spec.substr(1, close - 1), ',')) {
            auto value = number(start, kMaxMemorySlices - 1);
            if (!value || row.starts.size() >= kMaxMemorySlices) {
                return at(source, line_no, "not a placement list {S,...}:SIZE: " + quote(spec));
            }
            row.starts.push_back(*value);
        }
        if (!seen.insert({row.gpu_index, row.profile_id}).second) {
            return at(
                source, line_no,
                format("profile %u of GPU %u is listed twice", row.profile_id, row.gpu_index));
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

namespace {

// -lgip's header lines, word by word (580.159.04 and 510.47.03 print the
// same words with different padding).
bool lgip_header(const std::vector<std::string_view>& w) {
    static const std::vector<std::vector<std::string_view>> kHeaders = {
        {"GPU", "instance", "profiles:"},
        {"GPU", "Name", "ID", "Instances", "Memory", "P2P", "SM", "DEC", "ENC"},
        {"Free/Total", "GiB", "CE", "JPEG", "OFA"}};
    return std::find(kHeaders.begin(), kHeaders.end(), w) != kHeaders.end();
}

// "9.75", "79.25": GiB with two decimals at most.
bool gib(std::string_view word) {
    size_t dot = word.find('.');
    std::string_view whole = word.substr(0, dot);
    std::string_view part = dot == std::string_view::npos ? "" : word.substr(dot + 1);
    return number(whole, 1u << 20).has_value() && part.size() <= 2 &&
           (dot == std::string_view::npos ||
            (!part.empty() &&
             std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })));
}

} // namespace

Result<std::vector<SmiGiProfile>> parse_nvidia_smi_lgip(std::string_view text,
                                                        std::string_view source) {
    std::vector<SmiGiProfile> rows;
    std::set<std::pair<unsigned, unsigned>> ids;
    std::set<std::pair<unsigned, std::string>> names;
    bool second_line_due = false;
    size_t line_no = 0;
    const std::string row_form = "not a line of nvidia-smi mig -lgip (GPU MIG PROFILE ID "
                                 "FREE/TOTAL GIB P2P SM DEC ENC, then CE JPEG OFA): ";
    for (std::string_view raw : split_lines(text)) {
        ++line_no;
        std::string_view line = trim(raw);
        if (line.empty() || line == "No MIG-enabled devices found.") {
            continue;
        }
        if (border(line) || rule_row(line)) {
            if (second_line_due) {
                return at(source, line_no, "a profile row without its CE JPEG OFA line");
            }
            continue;
        }
        auto words = row_words(line);
        if (!words) {
            if (auto failure = table_failure(line, source, line_no)) {
                return *failure;
            }
            return at(source, line_no, row_form + quote(line, 96));
        }
        const std::vector<std::string_view>& w = *words;
        if (second_line_due) {
            if (w.size() != 3 || !number(w[0], 255) || !number(w[1], 255) || !number(w[2], 255)) {
                return at(source, line_no, row_form + quote(line, 96));
            }
            second_line_due = false;
            continue;
        }
        if (w.empty() || lgip_header(w)) {
            continue;
        }
        if (w.size() != 10 || w[1] != "MIG" || !gib(w[5]) || (w[6] != "No" && w[6] != "Yes") ||
            !number(w[7], 1023) || !number(w[8], 255) || !number(w[9], 255)) {
            return at(source, line_no, row_form + quote(line, 96));
        }
        size_t slash = w[4].find('/');
        std::string_view free_text = w[4].substr(0, slash);
        std::string_view total_text =
            slash == std::string_view::npos ? std::string_view() : w[4].substr(slash + 1);
        auto gpu = number(w[0], kMaxSmiIndex);
        auto id = number(w[3], kMaxProfileId);
        unsigned free = number(free_text, 255).value_or(256);
        unsigned total = number(total_text, 255).value_or(256);
        if (!gpu || !id || total > 255 || free > total) {
            return at(source, line_no, row_form + quote(line, 96));
        }
        if (!valid_mig_profile(w[2])) {
            return at(source, line_no, "not a MIG profile name: " + quote(w[2]));
        }
        if (!ids.insert({*gpu, *id}).second) {
            return at(source, line_no, format("profile %u of GPU %u is listed twice", *id, *gpu));
        }
        if (!names.insert({*gpu, std::string(w[2])}).second) {
            return at(source, line_no,
                      format("profile %s of GPU %u is listed twice", quote(w[2]).c_str(), *gpu));
        }
        rows.push_back({*gpu, std::string(w[2]), *id, free, total, line_no});
        second_line_due = true;
    }
    if (second_line_due) {
        return at(source, line_no, "a profile row without its CE JPEG OFA line");
    }
    return rows;
}

const SmiGiProfile* find_gi_profile(const std::vector<SmiGiProfile>& rows, unsigned gpu_index,
                                    std::string_view profile) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const SmiGiProfile& row) {
        return row.gpu_index == gpu_index && row.profile == profile;
    });
    return it == rows.end() ? nullptr : &*it;
}

Result<std::vector<SmiGpuInstance>> parse_nvidia_smi_lgi(std::string_view text,
                                                         std::string_view source) {
    std::vector<SmiGpuInstance> rows;
    std::set<std::pair<unsigned, unsigned>> seen;
    Status walked = walk_table(
        text, source, "nvidia-smi mig -lgi", "No GPU instances found",
        [&](const std::vector<std::string_view>& w, size_t line_no) -> Status {
            auto row = instance_row(w, false, source, line_no);
            if (!row) {
                return row.error();
            }
            if (!seen.insert({row->gpu, row->gi}).second) {
                return at(source, line_no,
                          format("GI %u of GPU %u is listed twice", row->gi, row->gpu));
            }
            rows.push_back({row->gpu, std::move(row->profile), row->profile_id, row->gi, line_no});
            return {};
        });
    if (!walked) {
        return walked.error();
    }
    return rows;
}

Result<std::vector<SmiComputeInstance>> parse_nvidia_smi_lci(std::string_view text,
                                                             std::string_view source) {
    std::vector<SmiComputeInstance> rows;
    std::set<std::tuple<unsigned, unsigned, unsigned>> seen;
    Status walked =
        walk_table(text, source, "nvidia-smi mig -lci", "No compute instances found",
                   [&](const std::vector<std::string_view>& w, size_t line_no) -> Status {
                       auto row = instance_row(w, true, source, line_no);
                       if (!row) {
                           return row.error();
                       }
                       if (!seen.insert({row->gpu, row->gi, row->ci}).second) {
                           return at(source, line_no,
                                     format("CI %u of GI %u of GPU %u is listed twice", row->ci,
                                            row->gi, row->gpu));
                       }
                       rows.push_back({row->gpu, row->gi, std::move(row->profile), row->profile_id,
                                       row->ci, line_no});
                       return {};
                   });
    if (!walked) {
        return walked.error();
    }
    return rows;
}

Result<std::vector<SmiQueryGpu>> parse_nvidia_smi_query_xml(std::string_view text,
                                                            std::string_view source,
                                                            std::optional<unsigned>* attached) {
    std::vector<SmiQueryGpu> gpus;
    std::vector<std::string> stack;
    std::optional<MigInProgress> mig;
    bool seen_root = false;
    std::optional<unsigned> attached_gpus;
    std::optional<unsigned> process_gi; // of the <process_info> being read
    std::optional<unsigned> process_ci;
    bool seen_name = false; // <product_name> of the <gpu> being read
    std::vector<std::string_view> lines = split_lines(text);
    auto path_is = [&stack](std::initializer_list<std::string_view> path) {
        return stack.size() == path.size() && std::equal(stack.begin(), stack.end(), path.begin());
    };
    for (size_t i = 0; i < lines.size(); ++i) {
        size_t line_no = i + 1;
        std::string_view line = trim(lines[i]);
        if (line.empty()) {
            continue;
        }
        // nvidia-smi prints a process's name as its user chose it, '<' and
        // all: on its line, all of it is the name, which is not read.
        if (path_is({"nvidia_smi_log", "gpu", "processes", "process_info"})) {
            constexpr std::string_view kOpen = "<process_name>";
            constexpr std::string_view kClose = "</process_name>";
            if (line.starts_with(kOpen)) {
                if (line.size() < kOpen.size() + kClose.size() || !line.ends_with(kClose)) {
                    Diagnostic failure =
                        at(source, line_no,
                           "a process name over more than one line (a name its user gave it, "
                           "which nvidia-smi prints as it is): the output cannot be read "
                           "safely; find the process with nvidia-smi and end it or rename "
                           "it: " +
                               quote(line, 80));
                    failure.code = kSmiProcessNameCode;
                    return failure;
                }
                continue;
            }
        }
        if (line.front() != '<') {
            if (line.find('<') != std::string_view::npos) {
                return at(source, line_no, "text and an element on one line: " + quote(line));
            }
            continue; // element text on a line of its own ("None", "N/A")
        }
        if (line.starts_with("<?") || line.starts_with("<!")) {
            if (!stack.empty() || line.back() != '>') {
                return at(source, line_no, "a declaration inside the document: " + quote(line));
            }
            continue;
        }
        if (line.starts_with("</")) {
            std::string_view name = tag_name(line.substr(2));
            if (line != "</" + std::string(name) + ">") {
                return at(source, line_no, "not a closing tag: " + quote(line));
            }
            if (stack.empty() || stack.back() != name) {
                return at(
                    source, line_no,
                    "closing tag " + quote(name) + " does not match " +
                        (stack.empty() ? std::string("any open element") : quote(stack.back())));
            }
            if (path_is({"nvidia_smi_log", "gpu", "mig_devices", "mig_device"})) {
                if (!mig->index || !mig->gi || !mig->ci) {
                    return at(source, mig->line,
                              "a <mig_device> without <index>, <gpu_instance_id> and "
                              "<compute_instance_id>");
                }
                for (const SmiQueryMig& other : gpus.back().migs) {
                    if (other.index == *mig->index) {
                        return at(source, mig->line,
                                  format("MIG device %u is listed twice", *mig->index));
                    }
                    if (other.gi == *mig->gi && other.ci == *mig->ci) {
                        return at(source, mig->line,
                                  format("GI %u CI %u is listed twice", *mig->gi, *mig->ci));
                    }
                }
                gpus.back().migs.push_back({*mig->index, *mig->gi, *mig->ci, mig->line});
                mig.reset();
            } else if (path_is({"nvidia_smi_log", "gpu", "processes", "process_info"})) {
                if (process_gi && process_ci) {
                    gpus.back().process_instances.emplace_back(*process_gi, *process_ci);
                }
            } else if (path_is({"nvidia_smi_log", "gpu"})) {
                const SmiQueryGpu& done = gpus.back();
                if (done.uuid.empty()) {
                    return at(source, done.line, "a <gpu> without <uuid>");
                }
                for (size_t other = 0; other + 1 < gpus.size(); ++other) {
                    const SmiQueryGpu& seen = gpus[other];
                    if (same_uuid(seen.uuid, done.uuid) ||
                        (!done.bdf.empty() && seen.bdf == done.bdf) ||
                        (done.minor && seen.minor == done.minor)) {
                        return at(source, done.line,
                                  "GPU " + quote(done.uuid) +
                                      " is listed twice (its UUID, PCI address or minor): this "
                                      "is not one nvidia-smi -q -x output; take it again");
                    }
                }
            }
            stack.pop_back();
            continue;
        }
        std::string_view name = tag_name(line.substr(1));
        if (name.empty()) {
            return at(source, line_no, "not an element: " + quote(line));
        }
        std::string_view rest = line.substr(1 + name.size());
        if (rest == "/>" || (rest.starts_with(" ") && rest.ends_with("/>") &&
                             rest.find('<') == std::string_view::npos)) {
            continue; // empty element
        }
        if (rest == ">" || (rest.starts_with(" ") && rest.ends_with(">") &&
                            rest.find('<') == std::string_view::npos)) {
            if (stack.size() >= kMaxXmlDepth) {
                return at(source, line_no, "elements nested too deep");
            }
            if (stack.empty()) {
                if (name != "nvidia_smi_log" || seen_root) {
                    return at(source, line_no,
                              "not nvidia-smi -q -x output: the document is " + quote(name));
                }
                seen_root = true;
            }
            stack.emplace_back(name);
            if (path_is({"nvidia_smi_log", "gpu"})) {
                SmiQueryGpu gpu;
                gpu.line = line_no;
                gpus.push_back(std::move(gpu));
                seen_name = false;
            } else if (path_is({"nvidia_smi_log", "gpu", "processes", "process_info"})) {
                process_gi.reset();
                process_ci.reset();
            } else if (path_is({"nvidia_smi_log", "gpu", "mig_devices", "mig_device"})) {
                mig = MigInProgress{};
                mig->line = line_no;
            }
            continue;
        }
        // <name[ attributes]>text</name> on one line
        std::string closing = "</" + std::string(name) + ">";
        size_t gt = rest.find('>');
        std::string_view attributes = rest.substr(0, gt);
        if (gt == std::string_view::npos || (!attributes.empty() && !attributes.starts_with(' ')) ||
            attributes.find('<') != std::string_view::npos || !rest.ends_with(closing) ||
            rest.size() < gt + 1 + closing.size()) {
            return at(source, line_no,
                      "not one element on its line (as nvidia-smi -q -x writes it): " +
                          quote(line));
        }
        std::string_view value = rest.substr(gt + 1, rest.size() - gt - 1 - closing.size());
        if (value.find('<') != std::string_view::npos) {
            return at(source, line_no, "more than one element on a line: " + quote(line));
        }
        if (stack.empty()) {
            return at(source, line_no, "an element outside <nvidia_smi_log>");
        }
        std::string decoded = xml_text(trim(value));
        if (path_is({"nvidia_smi_log"}) && name == "attached_gpus") {
            // Before the first <gpu>: after it, a user's text could have
            // written it.
            auto count = number(decoded, kMaxGpus);
            if (!count || attached_gpus || !gpus.empty()) {
                return at(source, line_no,
                          "not one <attached_gpus> before the GPUs: " + quote(line, 80));
            }
            attached_gpus = count;
        } else if (path_is({"nvidia_smi_log", "gpu"})) {
            SmiQueryGpu& gpu = gpus.back();
            if (name == "uuid") {
                if (!gpu.uuid.empty() || !valid_gpu_uuid(decoded) || decoded.size() != 40) {
                    return at(source, line_no, "not one GPU UUID: " + quote(decoded));
                }
                gpu.uuid = decoded;
            } else if (name == "minor_number" && decoded != "N/A") {
                auto minor = number(decoded, 255);
                if (!minor || gpu.minor) {
                    return at(source, line_no, "not one minor number: " + quote(decoded));
                }
                gpu.minor = minor;
            } else if (name == "product_name") {
                if (seen_name) {
                    return at(source, line_no, "a second <product_name>: " + quote(decoded));
                }
                seen_name = true;
                gpu.name = decoded;
            }
        } else if (path_is({"nvidia_smi_log", "gpu", "mig_mode"}) &&
                   (name == "current_mig" || name == "pending_mig")) {
            std::optional<bool>& mode =
                name == "current_mig" ? gpus.back().mig_current : gpus.back().mig_pending;
            if (mode || (decoded != "Enabled" && decoded != "Disabled" && decoded != "N/A")) {
                return at(source, line_no,
                          "not one MIG mode (Enabled, Disabled or N/A): " + quote(decoded));
            }
            if (decoded != "N/A") {
                mode = decoded == "Enabled";
            } else if (name == "current_mig") {
                gpus.back().mig_not_supported = true;
            }
        } else if (path_is({"nvidia_smi_log", "gpu", "pci"}) && name == "pci_bus_id") {
            // "00000000:17:00.0": nvidia-smi prints the domain with 8 digits.
            auto bdf = normalize_bdf(decoded);
            if (!bdf || !gpus.back().bdf.empty()) {
                return at(source, line_no, "not one PCI address: " + quote(decoded));
            }
            gpus.back().bdf = *bdf;
        } else if (path_is({"nvidia_smi_log", "gpu", "processes", "process_info"}) &&
                   name == "pid") {
            auto pid = number(decoded, kMaxPid);
            if (!pid || *pid == 0 || gpus.back().pids.size() >= kMaxGpuProcesses) {
                return at(source, line_no, "not a process id: " + quote(decoded));
            }
            gpus.back().pids.push_back(*pid);
        } else if (path_is({"nvidia_smi_log", "gpu", "processes", "process_info"}) &&
                   (name == "gpu_instance_id" || name == "compute_instance_id") &&
                   decoded != "N/A") {
            bool gi = name == "gpu_instance_id";
            auto id = number(decoded, gi ? kMaxGi : kMaxCi);
            std::optional<unsigned>& field = gi ? process_gi : process_ci;
            if (!id || field) {
                return at(source, line_no, "not one " + std::string(name) + ": " + quote(decoded));
            }
            field = id;
        } else if (path_is({"nvidia_smi_log", "gpu", "mig_devices", "mig_device"})) {
            std::optional<unsigned>* field = name == "index"                 ? &mig->index
                                             : name == "gpu_instance_id"     ? &mig->gi
                                             : name == "compute_instance_id" ? &mig->ci
                                                                             : nullptr;
            uint64_t max = name == "index"             ? kMaxMigDevice
                           : name == "gpu_instance_id" ? kMaxGi
                                                       : kMaxCi;
            if (field != nullptr) {
                auto value_number = number(decoded, max);
                if (!value_number || field->has_value()) {
                    return at(source, line_no,
                              "not one " + std::string(name) +
                                  format(" (0-%u): ", static_cast<unsigned>(max)) + quote(decoded));
                }
                *field = value_number;
            }
        }
    }
    if (!stack.empty()) {
        return at(source, lines.size(),
                  "the output ends inside " + quote(stack.back()) +
                      ": it is cut short; take it again");
    }
    if (!seen_root) {
        return at(source, std::max<size_t>(1, lines.size()),
                  "no <nvidia_smi_log>: not nvidia-smi -q -x output");
    }
    if (attached != nullptr) {
        *attached = attached_gpus;
    }
    return gpus;
}

Result<MigNames> mig_names_from_nvidia_smi(const NvidiaSmiTexts& texts, Diagnostics& diagnostics,
                                           std::string source) {
    if (!texts.list) {
        return error("the output of nvidia-smi -L is needed: it maps nvidia-smi's GPU indices to "
                     "GPU UUIDs (" +
                     texts.list_source + ")");
    }
    auto list = parse_nvidia_smi_list(*texts.list, texts.list_source);
    if (!list) {
        return list.error();
    }
    MigNames names(std::move(source));
    std::map<unsigned, const SmiListGpu*> by_index;
    std::map<std::string, const SmiListGpu*> by_uuid;
    for (const SmiListGpu& gpu : *list) {
        by_index.emplace(gpu.index, &gpu);
        by_uuid.emplace(lower_copy(gpu.uuid), &gpu);
        if (Status added = names.add_gpu(gpu.uuid, {gpu.index, std::nullopt, gpu.name}); !added) {
            return parse_error(texts.list_source, gpu.line, added.error().message);
        }
    }
    auto uuid_of = [&](unsigned index, std::string_view what, size_t line) -> const std::string* {
        auto it = by_index.find(index);
        if (it == by_index.end()) {
            diagnostics.warning(format("GPU %u is not in ", index) + texts.list_source +
                                    ": its instances are left out (take all outputs at once)",
                                Location::in_file(std::string(what), line));
            return nullptr;
        }
        return &it->second->uuid;
    };

    // Every text is parsed before any is used: one that does not parse
    // fails the whole, in this order.
    std::optional<std::vector<SmiComputeInstance>> lci;
    std::optional<std::vector<SmiGpuInstance>> lgi;
    std::optional<std::vector<SmiQueryGpu>> query;
    if (texts.lci) {
        auto parsed = parse_nvidia_smi_lci(*texts.lci, texts.lci_source);
        if (!parsed) {
            return parsed.error();
        }
        lci = std::move(*parsed);
    }
    if (texts.lgi) {
        auto parsed = parse_nvidia_smi_lgi(*texts.lgi, texts.lgi_source);
        if (!parsed) {
            return parsed.error();
        }
        lgi = std::move(*parsed);
    }
    if (texts.query_xml) {
        auto parsed = parse_nvidia_smi_query_xml(*texts.query_xml, texts.query_source);
        if (!parsed && parsed.error().code == kSmiProcessNameCode) {
            // A user's process name is not the admin's error: the names
            // are made without what -q -x adds (the MIG UUIDs), as when it
            // is not given.
            Diagnostic warning = parsed.error();
            warning.severity = Severity::Warning;
            warning.message += "; its MIG UUIDs are left out";
            diagnostics.add(std::move(warning));
        } else if (!parsed) {
            return parsed.error();
        } else {
            query = std::move(*parsed);
        }
    }

    // -L's name for a MIG device first: it is NVML's name for the device
    // (nvmlDeviceGetName ends in "MIG <profile>"), the one Slurm's
    // AutoDetect=nvml makes its gres type of, and the one mig_names_from_nvml
    // gives. -lci names the compute instance's profile, which need not be
    // the same: nvidia-smi creates the CI of a "1g.10gb+me" GI with profile
    // "MIG 1g.10gb". -lci fills in what -L cannot be joined for.
    for (const SmiQueryGpu& gpu : query.value_or(std::vector<SmiQueryGpu>{})) {
        auto listed = by_uuid.find(lower_copy(gpu.uuid));
        if (listed == by_uuid.end()) {
            diagnostics.warning("GPU " + quote(gpu.uuid) + " is not in " + texts.list_source +
                                    ": its MIG devices are left out (take all outputs at "
                                    "once)",
                                Location::in_file(texts.query_source, gpu.line));
            continue;
        }
        if (Status added = names.add_gpu(gpu.uuid, {std::nullopt, gpu.minor, gpu.name}); !added) {
            return parse_error(texts.query_source, gpu.line, added.error().message);
        }
        std::set<unsigned> joined;
        for (const SmiQueryMig& mig : gpu.migs) {
            const std::vector<SmiListMig>& devices = listed->second->migs;
            auto device = std::find_if(devices.begin(), devices.end(),
                                       [&](const SmiListMig& m) { return m.device == mig.index; });
            if (device == devices.end()) {
                diagnostics.warning(
                    format("MIG device %u (GI %u CI %u) of GPU ", mig.index, mig.gi, mig.ci) +
                        quote(gpu.uuid) + " is not in " + texts.list_source +
                        ": its UUID is unknown (take all outputs at once)",
                    Location::in_file(texts.query_source, mig.line));
                continue;
            }
            joined.insert(mig.index);
            if (Status added = names.add_uuid(gpu.uuid, mig.gi, mig.ci, device->uuid); !added) {
                return parse_error(texts.query_source, mig.line, added.error().message);
            }
            if (Status added = names.add_profile(gpu.uuid, mig.gi, mig.ci, device->profile);
                !added) {
                return parse_error(texts.list_source, device->line, added.error().message);
            }
        }
        for (const SmiListMig& device : listed->second->migs) {
            if (!joined.contains(device.device)) {
                diagnostics.warning(format("MIG device %u of GPU ", device.device) +
                                        quote(gpu.uuid) + " is not in " + texts.query_source +
                                        ": its GI and CI, so where its UUID belongs, are "
                                        "unknown (take all outputs at once)",
                                    Location::in_file(texts.list_source, device.line));
            }
        }
    }
    for (const SmiComputeInstance& row : lci.value_or(std::vector<SmiComputeInstance>{})) {
        const std::string* uuid = uuid_of(row.gpu_index, texts.lci_source, row.line);
        if (uuid == nullptr) {
            continue;
        }
        const MigName* known = names.find(*uuid, row.gi, row.ci);
        if (known != nullptr && !known->profile.empty()) {
            continue;
        }
        if (Status added = names.add_profile(*uuid, row.gi, row.ci, row.profile); !added) {
            return parse_error(texts.lci_source, row.line, added.error().message);
        }
    }
    for (const SmiGpuInstance& row : lgi.value_or(std::vector<SmiGpuInstance>{})) {
        if (const std::string* uuid = uuid_of(row.gpu_index, texts.lgi_source, row.line)) {
            if (Status added = names.add_gi_profile(*uuid, row.gi, row.profile); !added) {
                return parse_error(texts.lgi_source, row.line, added.error().message);
            }
        }
    }
    return names;
}

Result<MigNames> load_nvidia_smi_output(const std::string& dir, Diagnostics& diagnostics) {
    auto root = Sysroot::open(dir);
    if (!root) {
        return root.error();
    }
    NvidiaSmiTexts texts;
    auto shown = [&dir](std::string_view name) { return dir + "/" + std::string(name); };
    struct Wanted {
        std::string_view name;
        std::optional<std::string>* text;
        std::string* source;
    };
    for (Wanted wanted : {Wanted{kSmiListFile, &texts.list, &texts.list_source},
                          Wanted{kSmiQueryFile, &texts.query_xml, &texts.query_source},
                          Wanted{kSmiLgiFile, &texts.lgi, &texts.lgi_source},
                          Wanted{kSmiLciFile, &texts.lci, &texts.lci_source}}) {
        *wanted.source = shown(wanted.name);
        auto exists = root->exists(wanted.name);
        if (!exists) {
            return exists.error();
        }
        if (!*exists) {
            continue;
        }
        auto text = root->read_file(wanted.name, kSmiOutputLimit);
        if (!text) {
            return text.error();
        }
        *wanted.text = std::move(*text);
    }
    if (!texts.list) {
        return error(shown(kSmiListFile) +
                     ": missing; save the output of nvidia-smi -L there (and nvidia-smi -q -x "
                     "as q.xml for MIG UUIDs)");
    }
    return mig_names_from_nvidia_smi(texts, diagnostics, "nvidia-smi output in " + dir);
}

Result<std::string> find_nvidia_smi() {
    const char* path = std::getenv("PATH");
    std::string_view rest = path != nullptr ? path : "";
    // Root runs what it finds (apply changes the GPUs with it): a program
    // or directory another user could have written is not taken.
    const bool as_root = ::geteuid() == 0;
    auto others_could_write = [](const struct stat& st) {
        return st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    };
    std::string passed;
    while (!rest.empty()) {
        size_t colon = rest.find(':');
        std::string_view dir = rest.substr(0, colon);
        rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
        // A relative entry (or "") would run whatever the current directory holds.
        if (!dir.starts_with('/')) {
            continue;
        }
        std::string candidate = std::string(dir) + "/nvidia-smi";
        struct stat st {};
        struct stat dir_st {};
        if (::stat(candidate.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
            ::access(candidate.c_str(), X_OK) != 0) {
            continue;
        }
        if (as_root && (others_could_write(st) || ::stat(std::string(dir).c_str(), &dir_st) != 0 ||
                        others_could_write(dir_st))) {
            if (passed.empty()) {
                passed = candidate;
            }
            continue;
        }
        return candidate;
    }
    if (!passed.empty()) {
        return error("nvidia-smi on PATH is not used: " + passed +
                         " (or its directory) is not root's alone, and root would run it; "
                         "give it to root (chown root, chmod go-w) or name one with "
                         "--nvidia-smi",
                     EPERM);
    }
    return error("nvidia-smi is not on PATH; install the driver's utilities, or give saved "
                 "output with --nvidia-smi-output DIR",
                 ENOENT);
}

Result<MigNames> run_nvidia_smi(Diagnostics& diagnostics, const std::string& program,
                                std::chrono::milliseconds timeout) {
    std::string smi = program;
    if (smi.empty()) {
        auto found = find_nvidia_smi();
        if (!found) {
            return found.error();
        }
        smi = *found;
    }
    // The output of one command, or nullopt (after a warning) when it fails.
    // run_program kills it past kSmiOutputLimit or the timeout.
    auto run = [&](std::vector<std::string> args, bool required,
                   const std::string& shown) -> Result<std::optional<std::string>> {
        std::string output;
        args.insert(args.begin(), smi);
        SpawnRequest request{args, {}, &output};
        request.output_limit = kSmiOutputLimit;
        request.timeout = timeout;
        auto status = run_program(request);
        if (status && *status == 0) {
            return std::optional<std::string>(std::move(output));
        }
        std::string why = !status ? status.error().message
                                  : format("it exited with status %d: ", *status) +
                                        quote(trim(output.substr(0, 200)), 120);
        if (required) {
            return error(shown + ": " + why, status ? 0 : status.error().code);
        }
        diagnostics.warning(shown + ": " + why + "; the names it gives are left out");
        return std::optional<std::string>();
    };
    NvidiaSmiTexts texts;
    texts.list_source = smi + " -L";
    texts.query_source = smi + " -q -x";
    texts.lgi_source = smi + " mig -lgi";
    texts.lci_source = smi + " mig -lci";
    auto list = run({"-L"}, true, texts.list_source);
    if (!list) {
        return list.error();
    }
    texts.list = std::move(*list);
    for (auto [args, text, shown] :
         {std::tuple{std::vector<std::string>{"-q", "-x"}, &texts.query_xml, texts.query_source},
          std::tuple{std::vector<std::string>{"mig", "-lgi"}, &texts.lgi, texts.lgi_source},
          std::tuple{std::vector<std::string>{"mig", "-lci"}, &texts.lci, texts.lci_source}}) {
        auto output = run(args, false, shown);
        if (!output) {
            return output.error();
        }
        *text = std::move(*output);
    }
    return mig_names_from_nvidia_smi(texts, diagnostics, smi);
}

} // namespace gpuinit
