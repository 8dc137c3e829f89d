#include "gpuinit/host/pci.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <algorithm>
#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

namespace gpuinit {

namespace {

struct Address {
    unsigned domain = 0, bus = 0, dev = 0, fn = 0;
    auto key() const { return std::tie(domain, bus, dev, fn); }
};

std::optional<Address> parse_bdf(std::string_view text) {
    // [domain:]bus:dev.fn, all hex; domain up to 8 digits, bus 2, dev 2, fn 1.
    std::string_view domain_text = "0";
    size_t first = text.find(':');
    size_t second = first == std::string_view::npos ? first : text.find(':', first + 1);
    std::string_view rest = text;
    if (second != std::string_view::npos) {
        domain_text = text.substr(0, first);
        rest = text.substr(first + 1);
    }
    size_t colon = rest.find(':');
    size_t dot = rest.find('.');
    if (colon == std::string_view::npos || dot == std::string_view::npos || dot < colon) {
        return std::nullopt;
    }
    std::string_view bus_text = rest.substr(0, colon);
    std::string_view dev_text = rest.substr(colon + 1, dot - colon - 1);
    std::string_view fn_text = rest.substr(dot + 1);
    if (domain_text.empty() || domain_text.size() > 8 || bus_text.empty() || bus_text.size() > 2 ||
        dev_text.empty() || dev_text.size() > 2 || fn_text.size() != 1) {
        return std::nullopt;
    }
    auto domain = parse_hex_digits(domain_text, 0xffffffff);
    auto bus = parse_hex_digits(bus_text, 0xff);
    auto dev = parse_hex_digits(dev_text, 0x1f);
    auto fn = parse_hex_digits(fn_text, 7);
    if (!domain || !bus || !dev || !fn) {
        return std::nullopt;
    }
    return Address{static_cast<unsigned>(*domain), static_cast<unsigned>(*bus),
                   static_cast<unsigned>(*dev), static_cast<unsigned>(*fn)};
}

std::string canonical(const Address& a) {
    return format("%04x:%02x:%02x.%x", a.domain, a.bus, a.dev, a.fn);
}

// A sysfs attribute such as "0x10de\n", read relative to the devices fd.
Result<uint32_t> read_hex_attribute(int devices_fd, const std::string& entry, const char* name,
                                    uint32_t max, const Sysroot& root) {
    std::string rel = entry + "/" + name;
    std::string shown = root.display(std::string(kPciDevicesPath) + "/" + rel);
    UniqueFd fd(::openat(devices_fd, rel.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (!fd.valid()) {
        return errno_error("cannot open " + shown);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        return errno_error("cannot stat " + shown);
    }
    if (!S_ISREG(st.st_mode)) {
        return error(shown + " is not a regular file; refusing to read it", EINVAL);
    }
    char buffer[32];
    ssize_t n = 0;
    do {
        n = ::read(fd.get(), buffer, sizeof buffer);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        return errno_error("cannot read " + shown);
    }
    std::string_view text = trim(std::string_view(buffer, static_cast<size_t>(n)));
    if (text.starts_with("0x")) {
        text.remove_prefix(2);
    }
    auto value = parse_hex_digits(text, max);
    if (!value || static_cast<size_t>(n) == sizeof buffer) {
        return error(shown + ": " + quote(std::string_view(buffer, static_cast<size_t>(n))) +
                         " is not a hex number",
                     EINVAL);
    }
    return static_cast<uint32_t>(*value);
}

// Closes a DIR* exactly once.
struct DirCloser {
    void operator()(DIR* dir) const { ::closedir(dir); }
};

} // namespace

std::optional<std::string> normalize_bdf(std::string_view text) {
    auto address = parse_bdf(text);
    if (!address) {
        return std::nullopt;
    }
    return canonical(*address);
}

Result<std::vector<PciFunction>> scan_nvidia_gpus(const Sysroot& root,
                                                  const std::optional<std::string>& only) {
    std::string shown_dir = root.display(kPciDevicesPath);
    auto devices = root.open_dir(kPciDevicesPath);
    if (!devices) {
        return devices.error();
    }
    std::vector<std::pair<Address, std::string>> entries;
    if (only) {
        auto address = parse_bdf(*only);
        if (!address) {
            return error(quote(*only) + " is not a PCI address", EINVAL);
        }
        // sysfs names it canonically; a missing one is a GPU that is not there.
        std::string name = canonical(*address);
        struct stat st {};
        if (::fstatat(devices->get(), name.c_str(), &st, 0) == 0) {
            entries.emplace_back(*address, std::move(name));
        }
    } else {
        UniqueFd listing(::openat(devices->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        std::unique_ptr<DIR, DirCloser> dir(listing.valid() ? ::fdopendir(listing.get()) : nullptr);
        if (!dir) {
            return errno_error("cannot list " + shown_dir);
        }
        listing.release();
        for (;;) {
            errno = 0;
            struct dirent* entry = ::readdir(dir.get());
            if (entry == nullptr) {
                if (errno != 0) {
                    return errno_error("cannot list " + shown_dir);
                }
                break;
            }
            std::string_view name(entry->d_name);
            if (name == "." || name == "..") {
                continue;
            }
            auto address = parse_bdf(name);
            if (!address) {
                return error(shown_dir + "/" + printable(name) +
                                 ": not a PCI address (domain:bus:device.function)",
                             EINVAL);
            }
            entries.emplace_back(*address, std::string(name));
        }
    }
    std::sort(entries.begin(), entries.end(),
              [](const auto& a, const auto& b) { return a.first.key() < b.first.key(); });
    std::vector<PciFunction> gpus;
    for (const auto& [address, name] : entries) {
        auto vendor = read_hex_attribute(devices->get(), name, "vendor", 0xffff, root);
        if (!vendor) {
            return vendor.error();
        }
        if (*vendor != kNvidiaVendor) {
            continue;
        }
        auto pci_class = read_hex_attribute(devices->get(), name, "class", 0xffffff, root);
        if (!pci_class) {
            return pci_class.error();
        }
        if (is_gpu_class(*pci_class)) {
            gpus.push_back({canonical(address), *pci_class});
        }
    }
    return gpus;
}

} // namespace gpuinit
