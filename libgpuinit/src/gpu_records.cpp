#include "gpuinit/gpu_records.hpp"

#include "gpuinit/pci.hpp"
#include "gpuinit/procfs.hpp"
#include "gpuinit/text.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace gpuinit {

namespace {
constexpr std::string_view kRecords = "run/gpuinit/gpus";
}

Status save_gpu_records(const Sysroot& root, const Machine& machine) {
    auto dir = root.open_dir_nofollow("run/gpuinit", true, 0755);
    if (!dir) {
        return dir.error();
    }
    std::string text = "# minor pci-address uuid; written by gpu-mknod\n";
    for (const Gpu& gpu : machine.gpus) {
        text += format("%u %s %s\n", gpu.minor, gpu.bdf.c_str(),
                       gpu.uuid.empty() ? "-" : gpu.uuid.c_str());
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
    auto text = root.read_file(kRecords, 1u << 20);
    if (!text) {
        return std::nullopt;
    }
    for (std::string_view line : split_lines(*text)) {
        auto words = split_words(line);
        if (words.size() < 2 || words[0].front() == '#') {
            continue;
        }
        auto minor = parse_decimal(words[0], kMaxGpuMinor);
        if (minor && normalize_bdf(words[1]) == bdf) {
            return static_cast<unsigned>(*minor);
        }
    }
    return std::nullopt;
}

} // namespace gpuinit
