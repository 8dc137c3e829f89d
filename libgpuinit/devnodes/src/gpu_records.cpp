#include "gpuinit/devnodes/gpu_records.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/gpu_information.hpp"
#include "gpuinit/host/pci.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace gpuinit {

namespace {

constexpr size_t kMaxRecordBytes = 1u << 20;

struct Record {
    unsigned minor = 0;
    std::string bdf; // canonical
    std::string uuid;
};

std::vector<Record> parse_records(std::string_view text) {
    std::vector<Record> records;
    for (std::string_view line : split_lines(text)) {
        auto words = split_words(line);
        if (words.size() < 2 || words[0].front() == '#') {
            continue;
        }
        auto minor = parse_decimal(words[0], kMaxGpuMinor);
        auto bdf = normalize_bdf(words[1]);
        bool uuid_ok = words.size() < 3 || words[2] == "-" || valid_gpu_uuid(words[2]);
        // Malformed lines are skipped: the file is ours and rewritten on the
        // next run.
        if (minor && bdf && uuid_ok) {
            records.push_back(
                {static_cast<unsigned>(*minor), *bdf,
                 words.size() > 2 && words[2] != "-" ? std::string(words[2]) : std::string()});
        }
    }
    return records;
}

std::string records_text(const std::vector<Record>& records) {
    std::string text = "# minor pci-address uuid; written by gpu-mknod\n";
    for (const Record& record : records) {
        // format("%u %s %s\n"), without vsnprintf: this runs on every run.
        text += std::to_string(record.minor);
        text += ' ';
        text += record.bdf;
        text += ' ';
        text += record.uuid.empty() ? "-" : record.uuid;
        text += '\n';
    }
    return text;
}

} // namespace

Status save_gpu_records(const RunDir& run, const Machine& machine,
                        std::optional<unsigned> forget_minor) {
    auto current = run.read_record(kGpuRecords, kMaxRecordBytes);
    if (!current) {
        return current.error();
    }
    std::vector<Record> records;
    records.reserve(machine.gpus.size());
    for (const Gpu& gpu : machine.gpus) {
        records.push_back({gpu.minor, gpu.bdf, gpu.uuid});
    }
    std::sort(records.begin(), records.end(),
              [](const Record& a, const Record& b) { return a.minor < b.minor; });
    // The usual run: the file holds exactly the present GPUs. Every record
    // it has is then superseded by one of them, so merging would give this
    // same text; no need to parse it.
    std::string text = records_text(records);
    if (current->has_value() && **current == text) {
        return {};
    }
    // A GPU that went away keeps its record until --remove deletes its nodes:
    // the udev remove event may come after other runs. A record goes when a
    // present GPU now holds its minor or its address (it is stale then).
    for (Record& old : parse_records(current->value_or(""))) {
        bool superseded = std::any_of(records.begin(), records.end(), [&](const Record& now) {
            return now.minor == old.minor || now.bdf == old.bdf;
        });
        if (!superseded && old.minor != forget_minor) {
            records.push_back(std::move(old));
        }
    }
    std::sort(records.begin(), records.end(),
              [](const Record& a, const Record& b) { return a.minor < b.minor; });
    text = records_text(records);
    // Unchanged on most runs; rewriting would cost a rename and, on ext4, a
    // flush on every boot-time and udev run.
    if (current->has_value() && **current == text) {
        return {};
    }
    return run.write_record(kGpuRecords, text);
}

Result<std::optional<unsigned>> recorded_minor(const RunDir& run, const GpuSelector& selector) {
    auto text = run.read_record(kGpuRecords, kMaxRecordBytes);
    if (!text) {
        return text.error();
    }
    for (const Record& record : parse_records(text->value_or(""))) {
        if (selector.matches(GpuIdentity{record.minor, record.bdf, record.uuid})) {
            return std::optional<unsigned>(record.minor);
        }
    }
    return std::optional<unsigned>();
}

} // namespace gpuinit
