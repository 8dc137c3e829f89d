#include "gpuinit/devnodes/gpu_records.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/pci.hpp"
#include "gpuinit/host/procfs.hpp"

#include <algorithm>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>

namespace gpuinit {

namespace {

constexpr std::string_view kRecords = "run/gpuinit/gpus";

struct Record {
    unsigned minor = 0;
    std::string bdf; // canonical
    std::string uuid;
};

// The records as last written; malformed lines are skipped (the file is ours
// and rewritten on the next run).
std::vector<Record> load_records(const Sysroot& root) {
    std::vector<Record> records;
    auto text = root.read_file(kRecords, 1u << 20);
    if (!text) {
        return records;
    }
    for (std::string_view line : split_lines(*text)) {
        auto words = split_words(line);
        if (words.size() < 2 || words[0].front() == '#') {
            continue;
        }
        auto minor = parse_decimal(words[0], kMaxGpuMinor);
        auto bdf = normalize_bdf(words[1]);
        if (minor && bdf) {
            records.push_back(
                {static_cast<unsigned>(*minor), *bdf,
                 words.size() > 2 && words[2] != "-" ? std::string(words[2]) : std::string()});
        }
    }
    return records;
}

} // namespace

Status save_gpu_records(const Sysroot& root, const Machine& machine,
                        std::optional<unsigned> forget_minor) {
    auto dir = root.open_dir_nofollow("run/gpuinit", true, 0755);
    if (!dir) {
        return dir.error();
    }
    std::vector<Record> records;
    for (const Gpu& gpu : machine.gpus) {
        records.push_back({gpu.minor, gpu.bdf, gpu.uuid});
    }
    // A GPU that went away keeps its record until --remove deletes its nodes:
    // the udev remove event may come after other runs. A record goes when a
    // present GPU now holds its minor or its address (it is stale then).
    for (Record& old : load_records(root)) {
        bool superseded = std::any_of(records.begin(), records.end(), [&](const Record& now) {
            return now.minor == old.minor || now.bdf == old.bdf;
        });
        if (!superseded && old.minor != forget_minor) {
            records.push_back(std::move(old));
        }
    }
    std::sort(records.begin(), records.end(),
              [](const Record& a, const Record& b) { return a.minor < b.minor; });
    std::string text = "# minor pci-address uuid; written by gpu-mknod\n";
    for (const Record& record : records) {
        text += format("%u %s %s\n", record.minor, record.bdf.c_str(),
                       record.uuid.empty() ? "-" : record.uuid.c_str());
    }
    // Unchanged on most runs; rewriting would cost a rename and, on ext4, a
    // flush on every boot-time and udev run.
    if (auto current = root.read_file(kRecords, 1u << 20); current && *current == text) {
        return {};
    }
    std::string temp = "gpus." + std::to_string(::getpid());
    UniqueFd fd(::openat(dir->get(), temp.c_str(),
                         O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd.valid()) {
        return errno_error("cannot write " + root.display(kRecords));
    }
    if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
        ::renameat(dir->get(), temp.c_str(), dir->get(), "gpus") != 0) {
        Error error = errno_error("cannot write " + root.display(kRecords));
        ::unlinkat(dir->get(), temp.c_str(), 0);
        return error;
    }
    return {};
}

std::optional<unsigned> recorded_minor(const Sysroot& root, const std::string& bdf) {
    for (const Record& record : load_records(root)) {
        if (record.bdf == bdf) {
            return record.minor;
        }
    }
    return std::nullopt;
}

} // namespace gpuinit
