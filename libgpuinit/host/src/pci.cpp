#include "gpuinit/host/pci.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace gpuinit {

namespace {

struct Address {
    unsigned domain = 0, bus = 0, dev = 0, fn = 0;
    // Orders as (domain, bus, dev, fn) does: bus, dev and fn fit in 8 bits.
    uint64_t key() const { return (uint64_t{domain} << 32) | (bus << 16) | (dev << 8) | fn; }
};

int hex_digit(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

// "dddd:bb:dd.f", the form sysfs lists every function in, read digit by
// digit; nullopt for anything else (then parsed the general way).
std::optional<Address> parse_sysfs_bdf(std::string_view text) {
    if (text.size() != 12 || text[4] != ':' || text[7] != ':' || text[10] != '.') {
        return std::nullopt;
    }
    unsigned fields[4] = {};
    constexpr size_t kStart[4] = {0, 5, 8, 11};
    constexpr size_t kDigits[4] = {4, 2, 2, 1};
    for (size_t f = 0; f < 4; ++f) {
        for (size_t i = kStart[f]; i < kStart[f] + kDigits[f]; ++i) {
            int digit = hex_digit(text[i]);
            if (digit < 0) {
                return std::nullopt;
            }
            fields[f] = fields[f] * 16 + static_cast<unsigned>(digit);
        }
    }
    if (fields[2] > 0x1f || fields[3] > 7) {
        return std::nullopt;
    }
    return Address{fields[0], fields[1], fields[2], fields[3]};
}

std::optional<Address> parse_bdf(std::string_view text) {
    if (auto address = parse_sysfs_bdf(text)) {
        return address;
    }
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

// Appends `value` in lower-case hex, zero-padded to at least `width` digits.
char* put_hex(char* out, unsigned value, int width) {
    char digits[8];
    int n = 0;
    do {
        digits[n++] = "0123456789abcdef"[value & 0xf];
        value >>= 4;
    } while (value != 0);
    while (n < width) {
        digits[n++] = '0';
    }
    while (n > 0) {
        *out++ = digits[--n];
    }
    return out;
}

// "%04x:%02x:%02x.%x", without vsnprintf: it is called for every GPU of
// every run.
std::string canonical(const Address& a) {
    char text[20];
    char* out = put_hex(text, a.domain, 4);
    *out++ = ':';
    out = put_hex(out, a.bus, 2);
    *out++ = ':';
    out = put_hex(out, a.dev, 2);
    *out++ = '.';
    out = put_hex(out, a.fn, 1);
    return std::string(text, static_cast<size_t>(out - text));
}

// The attribute fds of a walk, closed together: one close_range() for a run
// of consecutive fds instead of one close() each (a syscall costs about as
// much as reading the attribute). Nothing else opens or closes fds during
// the walk, so each new fd is higher than the last, and a run of
// consecutive numbers holds only fds this batch opened.
class FdBatch {
  public:
    FdBatch() { fds_.reserve(kMax); }
    ~FdBatch() { flush(); }
    FdBatch(const FdBatch&) = delete;
    FdBatch& operator=(const FdBatch&) = delete;

    // Before the fd's use: the batch closes only fds opened before it.
    void add(int fd) {
        // Full (far below any RLIMIT_NOFILE), or an fd below the last one
        // (not expected): the ones before are done with.
        if (fds_.size() == kMax || (!fds_.empty() && fd <= fds_.back())) {
            flush();
        }
        fds_.push_back(fd);
    }

    bool empty() const { return fds_.empty(); }

    void flush() {
        for (size_t first = 0; first < fds_.size();) {
            size_t last = first;
            while (last + 1 < fds_.size() && fds_[last + 1] == fds_[last] + 1) {
                ++last;
            }
            if (last == first || ::close_range(static_cast<unsigned>(fds_[first]),
                                               static_cast<unsigned>(fds_[last]), 0) != 0) {
                // A single fd, or close_range() missing (before Linux 5.9) or
                // filtered: one by one.
                for (size_t i = first; i <= last; ++i) {
                    ::close(fds_[i]);
                }
            }
            first = last + 1;
        }
        fds_.clear();
    }

  private:
    static constexpr size_t kMax = 64;
    std::vector<int> fds_;
};

// One function's directory under the devices dir. sysfs names them in a
// few ways; the name as listed is kept to open the attributes.
struct Entry {
    Address address;
    std::string name;
};

// How the attributes below the devices dir are opened. On sysfs every
// attribute is a kernfs regular file, so when openat2() can keep the lookup
// from leaving that filesystem (RESOLVE_NO_XDEV) no fstat() per attribute
// is needed to refuse a FIFO or a device; anywhere else (a copied tree, a
// tmpfs fixture, a kernel without openat2) each one is checked.
class AttributeReader {
  public:
    AttributeReader(int devices_fd, const Sysroot& root) : fd_(devices_fd), root_(root) {
        struct statfs fs {};
        sysfs_ = ::fstatfs(devices_fd, &fs) == 0 && fs.f_type == SYSFS_MAGIC;
    }

    // A sysfs attribute such as "0x10de\n".
    Result<uint32_t> read_hex(const std::string& entry, const char* name, uint32_t max) {
        // A listed name has at most 255 bytes (NAME_MAX).
        char rel[NAME_MAX + 16];
        size_t name_size = std::strlen(name);
        if (entry.size() + 1 + name_size >= sizeof rel) {
            return os_error(ENAMETOOLONG, "cannot open " + shown(entry, name));
        }
        // entry, '/', then name with its terminating NUL.
        entry.copy(rel, entry.size());
        rel[entry.size()] = '/';
        std::memcpy(rel + entry.size() + 1, name, name_size + 1);
        bool checked = false;
        int fd = open_on_sysfs(rel);
        if (fd < 0) {
            fd = ::openat(fd_, rel, kFlags);
            if (fd < 0 && errno == EMFILE && !opened_.empty()) {
                opened_.flush();
                fd = ::openat(fd_, rel, kFlags);
            }
            if (fd < 0) {
                return errno_error("cannot open " + shown(entry, name));
            }
            checked = true;
        }
        opened_.add(fd);
        if (checked) {
            struct stat st {};
            if (::fstat(fd, &st) != 0) {
                return errno_error("cannot stat " + shown(entry, name));
            }
            if (!S_ISREG(st.st_mode)) {
                return error(shown(entry, name) + " is not a regular file; refusing to read it",
                             EINVAL);
            }
        }
        char buffer[32];
        ssize_t n = 0;
        do {
            n = ::read(fd, buffer, sizeof buffer);
        } while (n < 0 && errno == EINTR);
        if (n < 0) {
            return errno_error("cannot read " + shown(entry, name));
        }
        std::string_view text = trim(std::string_view(buffer, static_cast<size_t>(n)));
        if (text.starts_with("0x")) {
            text.remove_prefix(2);
        }
        auto value = parse_hex_digits(text, max);
        if (!value || static_cast<size_t>(n) == sizeof buffer) {
            return error(shown(entry, name) + ": " +
                             quote(std::string_view(buffer, static_cast<size_t>(n))) +
                             " is not a hex number",
                         EINVAL);
        }
        return static_cast<uint32_t>(*value);
    }

  private:
    static constexpr int kFlags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;

    // -1 when the attribute is to be opened and checked the ordinary way:
    // not on sysfs, no openat2(), or a lookup that would leave sysfs (EXDEV).
    int open_on_sysfs(const char* rel) {
        if (!sysfs_) {
            return -1;
        }
        struct open_how how {};
        how.flags = static_cast<uint64_t>(kFlags);
        how.resolve = RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS;
        int fd = static_cast<int>(::syscall(SYS_openat2, fd_, rel, &how, sizeof how));
        if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
            sysfs_ = false; // seccomp filters that predate openat2 answer EPERM
        }
        return fd;
    }

    std::string shown(const std::string& entry, const char* name) const {
        return root_.display(std::string(kPciDevicesPath) + "/" + entry + "/" + name);
    }

    int fd_;
    const Sysroot& root_;
    bool sysfs_ = false;
    FdBatch opened_;
};

// The function directories, in listing order; the first name that is not a
// PCI address is an error.
Result<std::vector<Entry>> list_functions(int devices_fd, const std::string& shown_dir) {
    auto names = list_names(devices_fd, shown_dir);
    if (!names) {
        return names.error();
    }
    std::vector<Entry> entries;
    entries.reserve(names->size());
    for (std::string& name : *names) {
        auto address = parse_bdf(name);
        if (!address) {
            return error(shown_dir + "/" + printable(name) +
                             ": not a PCI address (domain:bus:device.function)",
                         EINVAL);
        }
        entries.push_back({*address, std::move(name)});
    }
    return entries;
}

// A key as /proc/bus/pci/devices writes it: bus << 8 | devfn.
uint16_t bus_devfn(const Address& a) {
    return static_cast<uint16_t>((a.bus << 8) | (a.dev << 3) | a.fn);
}

// Fixed-width hex at the start of `text`, or nullopt.
std::optional<uint32_t> fixed_hex(std::string_view text, size_t digits) {
    if (text.size() < digits) {
        return std::nullopt;
    }
    uint32_t value = 0;
    for (size_t i = 0; i < digits; ++i) {
        int digit = hex_digit(text[i]);
        if (digit < 0) {
            return std::nullopt;
        }
        value = value * 16 + static_cast<uint32_t>(digit);
    }
    return value;
}

// The functions the kernel's listing rules out as NVIDIA's, so their sysfs
// attributes need not be opened. The listing has no domains: a key shared
// by functions of several domains is ruled out only when the listing has
// at least as many entries for it as sysfs has functions, none NVIDIA's. A
// function the listing lacks (hotplugged between the reads) is never ruled
// out.
class ProcListing {
  public:
    ProcListing(std::vector<ProcPciFunction> listed, const std::vector<Entry>& entries)
        : listed_(std::move(listed)) {
        auto by_key = [](const ProcPciFunction& a, const ProcPciFunction& b) {
            return a.bus_devfn < b.bus_devfn;
        };
        std::sort(listed_.begin(), listed_.end(), by_key);
        sysfs_keys_.reserve(entries.size());
        for (const Entry& entry : entries) {
            sysfs_keys_.push_back(bus_devfn(entry.address));
        }
        std::sort(sysfs_keys_.begin(), sysfs_keys_.end());
    }

    bool rules_out(const Address& address) const {
        uint16_t key = bus_devfn(address);
        auto [first, last] = std::equal_range(
            listed_.begin(), listed_.end(), ProcPciFunction{key, 0},
            [](const auto& a, const auto& b) { return a.bus_devfn < b.bus_devfn; });
        auto [sysfs_first, sysfs_last] =
            std::equal_range(sysfs_keys_.begin(), sysfs_keys_.end(), key);
        if (last - first < sysfs_last - sysfs_first) {
            return false;
        }
        return std::none_of(first, last,
                            [](const ProcPciFunction& f) { return f.vendor == kNvidiaVendor; });
    }

  private:
    std::vector<ProcPciFunction> listed_;
    std::vector<uint16_t> sysfs_keys_;
};

// "%02x%02x\t%04x%04x\t..." (drivers/pci/proc.c, show_device): the key,
// then vendor and device; nullopt for any other start of a line.
std::optional<ProcPciFunction> parse_proc_pci_line(std::string_view line) {
    auto key = fixed_hex(line, 4);
    if (!key || line.size() < 13 || line[4] != '\t') {
        return std::nullopt;
    }
    auto ids = fixed_hex(line.substr(5), 8);
    if (!ids || (line.size() > 13 && line[13] != '\t')) {
        return std::nullopt;
    }
    return ProcPciFunction{static_cast<uint16_t>(*key), static_cast<uint16_t>(*ids >> 16)};
}

// A real line is about 300 bytes; a longer one, or more lines than a
// machine has functions, is not the kernel's listing.
constexpr size_t kProcPciMaxLine = 4096;
constexpr size_t kProcPciMaxLines = 1u << 20;

// nullopt when the root has no usable listing: missing, unreadable, too
// big or not in the kernel's format. Each of those leaves the answer the
// same (every vendor is then read from sysfs), so none is reported. Read
// line by line: the whole file (about 30 KB for 96 functions) would cost a
// page fault per 4 KB on a heap that grows for it.
std::optional<ProcListing> read_proc_listing(const Sysroot& root,
                                             const std::vector<Entry>& entries) {
    std::vector<ProcPciFunction> listed;
    listed.reserve(entries.size());
    Status read = root.for_each_line(kProcPciDevicesPath, kProcPciMaxLine,
                                     [&](std::string_view line, size_t number) -> Status {
                                         auto function = parse_proc_pci_line(line);
                                         if (!function || number > kProcPciMaxLines) {
                                             return error("not the kernel's listing", EINVAL);
                                         }
                                         listed.push_back(*function);
                                         return {};
                                     });
    if (!read) {
        return std::nullopt;
    }
    return ProcListing(std::move(listed), entries);
}

} // namespace

std::optional<std::vector<ProcPciFunction>> parse_proc_pci_devices(std::string_view text) {
    std::vector<ProcPciFunction> functions;
    for (std::string_view line : split_lines(text)) {
        auto function = parse_proc_pci_line(line);
        if (!function) {
            return std::nullopt;
        }
        functions.push_back(*function);
    }
    return functions;
}

std::optional<std::string> normalize_bdf(std::string_view text) {
    auto address = parse_bdf(text);
    if (!address) {
        return std::nullopt;
    }
    return canonical(*address);
}

Result<std::vector<PciFunction>> scan_nvidia_gpus(const Sysroot& root,
                                                  const std::optional<std::string>& only,
                                                  const std::vector<std::string>& known) {
    std::string shown_dir = root.display(kPciDevicesPath);
    auto devices = root.open_dir(kPciDevicesPath);
    if (!devices) {
        return devices.error();
    }
    std::vector<Entry> entries;
    std::optional<ProcListing> listing;
    if (only) {
        auto address = parse_bdf(*only);
        if (!address) {
            return error(quote(*only) + " is not a PCI address", EINVAL);
        }
        // sysfs names it canonically; a missing one is a GPU that is not there.
        std::string name = canonical(*address);
        struct stat st {};
        if (::fstatat(devices->get(), name.c_str(), &st, 0) == 0) {
            entries.push_back({*address, std::move(name)});
        }
    } else {
        auto listed = list_functions(devices->get(), shown_dir);
        if (!listed) {
            return listed.error();
        }
        entries = std::move(*listed);
        listing = read_proc_listing(root, entries);
    }
    // Sorted by a packed key, moving indices rather than names.
    std::vector<std::pair<uint64_t, uint32_t>> order;
    order.reserve(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
        order.emplace_back(entries[i].address.key(), static_cast<uint32_t>(i));
    }
    std::sort(order.begin(), order.end());
    std::vector<uint64_t> known_keys;
    known_keys.reserve(known.size());
    for (const std::string& bdf : known) {
        if (auto address = parse_bdf(bdf)) {
            known_keys.push_back(address->key());
        }
    }
    std::sort(known_keys.begin(), known_keys.end());
    AttributeReader reader(devices->get(), root);
    std::vector<PciFunction> gpus;
    for (const auto& [key, index] : order) {
        const Entry& entry = entries[index];
        if (std::binary_search(known_keys.begin(), known_keys.end(), key)) {
            continue;
        }
        if (listing && listing->rules_out(entry.address)) {
            continue;
        }
        auto vendor = reader.read_hex(entry.name, "vendor", 0xffff);
        if (!vendor) {
            return vendor.error();
        }
        if (*vendor != kNvidiaVendor) {
            continue;
        }
        auto pci_class = reader.read_hex(entry.name, "class", 0xffffff);
        if (!pci_class) {
            return pci_class.error();
        }
        if (is_gpu_class(*pci_class)) {
            gpus.push_back({canonical(entry.address), *pci_class});
        }
    }
    return gpus;
}

} // namespace gpuinit
