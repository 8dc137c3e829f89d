#include "gpuinit/host/pci.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

// pci.h is C without extern "C" guards.
extern "C" {
#include <pci/pci.h>
}

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

// The check fds of a walk (O_PATH), closed together: one close_range() for
// a run of consecutive fds instead of one close() each (a syscall costs
// about as much as the check). libpci opens and closes its own fds in
// between, which can only reuse numbers above the last fd kept here or
// numbers this batch does not hold; an fd at or below the last one flushes
// the batch first, so a run of consecutive numbers holds only fds this
// batch opened.
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

// One function of the walk: its address and libpci's record of it.
struct Function {
    Address address;
    pci_dev* dev = nullptr;
};

// libpci reports a failure by calling pci_access::error, which must not
// return (pci.h: "Write error message and quit"; the default calls
// exit(1)). Ours formats the message and longjmps back to the setjmp in
// guarded(). longjmp skips destructors, so every libpci call runs through
// guarded() with a plain function pointer, and the frames between the
// setjmp and libpci's own C frames are captureless lambdas that hold
// nothing with a destructor: only pointers and integers. A longjmp out of
// libpci can leave what it was building unlinked (the pci_dev being
// scanned, sysfs_scan's open directory stream): a few bytes and one fd in a
// run that is failing anyway.
struct Guard {
    std::jmp_buf env;
    char message[512];
    char warning[256];
};
thread_local Guard* t_guard = nullptr;

// GNU noreturn, not [[noreturn]]: for clang only the former is part of the
// function type, which must match pci_access::error (PCI_NONRET).
__attribute__((noreturn, format(printf, 1, 2))) void on_libpci_error(char* text, ...) {
    Guard* guard = t_guard;
    if (guard == nullptr) {
        // A libpci call outside guarded(): a bug here, never a reason to
        // let libpci exit(1) quietly.
        std::fputs("gpuinit: libpci reported an error outside a guarded call\n", stderr);
        std::abort();
    }
    va_list args;
    va_start(args, text);
    std::vsnprintf(guard->message, sizeof guard->message, text, args);
    va_end(args);
    std::longjmp(guard->env, 1);
}

// The calls made here warn only about optional attributes and config reads,
// which they never ask for; a warning is kept for the error that may follow.
__attribute__((format(printf, 1, 2))) void on_libpci_warning(char* text, ...) {
    if (Guard* guard = t_guard) {
        va_list args;
        va_start(args, text);
        std::vsnprintf(guard->warning, sizeof guard->warning, text, args);
        va_end(args);
    }
}

__attribute__((format(printf, 1, 2))) void on_libpci_debug(char* /*text*/, ...) {}

// Runs fn(arg), which calls libpci and nothing else; false when libpci
// called its error handler (the text is in guard.message).
template <typename T>
bool guarded(Guard& guard, void (*fn)(T*), T* arg) {
    guard.message[0] = '\0';
    guard.warning[0] = '\0';
    t_guard = &guard;
    if (setjmp(guard.env) != 0) {
        t_guard = nullptr;
        return false;
    }
    fn(arg);
    t_guard = nullptr;
    return true;
}

constexpr int kCheckFlags = O_PATH | O_CLOEXEC;

// openat2(), or -1 with errno ENOSYS where the kernel (before 5.6) or a
// seccomp filter that predates it (EPERM) refuses it.
int open_resolved(int dir_fd, const char* rel, int flags, uint64_t resolve) {
    static std::atomic<bool> missing{false};
    if (missing.load(std::memory_order_relaxed)) {
        errno = ENOSYS;
        return -1;
    }
    struct open_how how {};
    how.flags = static_cast<uint64_t>(flags);
    how.resolve = resolve;
    int fd = static_cast<int>(::syscall(SYS_openat2, dir_fd, rel, &how, sizeof how));
    if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
        missing.store(true, std::memory_order_relaxed);
        errno = ENOSYS;
    }
    return fd;
}

// "/proc/self/fd/N" when it reaches the same file (proc mounted), else
// `fallback`.
std::string fd_path(int fd, std::string fallback) {
    char path[32];
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    struct stat by_fd {
    }, by_path{};
    if (::fstat(fd, &by_fd) == 0 && ::stat(path, &by_path) == 0 && by_fd.st_dev == by_path.st_dev &&
        by_fd.st_ino == by_path.st_ino) {
        return path;
    }
    return fallback;
}

// pci.ids (its checked fd) copied into a memfd, at most kPciIdsMaxBytes.
// Refused gzip-compressed: a libpci built with zlib (Debian's libpci3)
// inflates it as it parses, so its size would bound nothing, and the static
// libpci (no zlib) cannot read it.
Result<UniqueFd> private_pci_ids(int fd, const std::string& shown) {
    UniqueFd copy(::memfd_create("pci.ids", MFD_CLOEXEC));
    if (!copy.valid()) {
        return errno_error("cannot copy " + shown + " (memfd_create)");
    }
    char buffer[65536];
    size_t total = 0;
    for (;;) {
        auto n = read_some(fd, buffer, sizeof buffer, shown);
        if (!n) {
            return n.error();
        }
        if (*n == 0) {
            break;
        }
        total += *n;
        if (total > kPciIdsMaxBytes) {
            return error(format("%s is larger than %zu bytes, more than any real pci.ids; refusing "
                                "to parse it",
                                shown.c_str(), kPciIdsMaxBytes),
                         EFBIG);
        }
        for (size_t done = 0; done < *n;) {
            ssize_t wrote = ::write(copy.get(), buffer + done, *n - done);
            if (wrote < 0 && errno != EINTR) {
                return errno_error("cannot copy " + shown);
            }
            done += wrote > 0 ? static_cast<size_t>(wrote) : 0;
        }
    }
    unsigned char magic[2] = {};
    if (::pread(copy.get(), magic, sizeof magic, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        return error(shown + " is gzip-compressed; libpci is given plain text only (Debian's "
                             "pci.ids package installs it so)",
                     EINVAL);
    }
    return copy;
}

// A libpci context on the root's sys/bus/pci, and the checks that go
// before every path it opens. libpci opens by path and follows symlinks
// (sysfs.c: opendir, open(O_RDONLY) without O_NONBLOCK), so in a copied
// tree an attribute could be a symlink out of the root, a FIFO its open()
// would wait on, or a device. Each path libpci will open is first resolved
// here with openat2():
// - on sysfs (the checked sys/bus/pci is on it), from that directory with
//   RESOLVE_NO_XDEV: a lookup that stays on the sysfs mount ends at a
//   kernfs file, which is never a FIFO or a device, so no fstat() is needed;
// - anywhere else, from the root with RESOLVE_BENEATH (an absolute symlink,
//   or one whose ".." leaves the root, is refused, so the file checked is
//   the one libpci's host-side lookup reaches), then fstat(): a regular
//   file only.
// Without openat2 the check is an fstatat() from the root that follows
// symlinks, as Sysroot's own fallback does: the type is checked, the
// escape is not. libpci gets the checked sys/bus/pci as /proc/self/fd/N, so
// its lookups start at the very directory checked; without /proc, its path
// under the root. Between the check and libpci's open a tree others can
// write can still be changed (docs/architecture.md, "libpci and the
// sysroot").
class PciSession {
  public:
    explicit PciSession(const Sysroot& root) : root_(root) {}
    ~PciSession() {
        Guard guard;
        for (pci_dev* dev : got_) {
            guarded<pci_dev>(
                guard, [](pci_dev* d) { pci_free_dev(d); }, dev);
        }
        if (access_ != nullptr) {
            guarded<pci_access>(
                guard, [](pci_access* a) { pci_cleanup(a); }, access_);
        }
    }
    PciSession(const PciSession&) = delete;
    PciSession& operator=(const PciSession&) = delete;

    // Opens and checks sys/bus/pci and its devices directory, and sets libpci
    // up on them.
    Status open() {
        std::string shown = root_.display(kPciDevicesPath);
        int fd = open_resolved(root_.fd(), kPciDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                               RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
        if (fd < 0 && errno == ENOSYS) {
            fd = ::openat(root_.fd(), kPciDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        }
        if (fd < 0) {
            return errno_error("cannot open " + root_.display(kPciDir) +
                               (errno == EXDEV ? " (it resolves outside the root)" : ""));
        }
        pci_dir_.reset(fd);
        struct stat st {};
        if (::fstatat(fd, "devices", &st, AT_SYMLINK_NOFOLLOW) != 0) {
            return errno_error("cannot open " + shown);
        }
        if (!S_ISDIR(st.st_mode)) {
            return error(shown +
                             " is not a directory (a symlink or other file); refusing to walk it",
                         ENOTDIR);
        }
        struct statfs fs {};
        on_sysfs_ = ::fstatfs(fd, &fs) == 0 && fs.f_type == SYSFS_MAGIC;
        sysfs_path_ = fd_path(fd, root_.path(kPciDir));

        access_ = pci_alloc();
        access_->error = on_libpci_error;
        access_->warning = on_libpci_warning;
        access_->debug = on_libpci_debug;
        // sysfs only, never probed: pci_init() would otherwise try the
        // next methods (/proc/bus/pci, then I/O ports) on its own.
        access_->method = PCI_ACCESS_SYS_BUS_PCI;
        // The kernel's view (sysfs attributes), not config space: reading a
        // function's config wakes it from runtime suspend
        // (drivers/pci/pci-sysfs.c, pci_read_config), and the kernel's class
        // is the one its quirks fixed.
        access_->buscentric = 0;
        // No ~/.pciids-cache, no DNS, no hwdb: pci.ids only.
        access_->id_lookup_mode = 0;
        if (!guarded<PciSession>(
                guard_,
                [](PciSession* s) {
                    pci_set_param(s->access_, const_cast<char*>("sysfs.path"),
                                  const_cast<char*>(s->sysfs_path_.c_str()));
                    pci_init(s->access_);
                },
                this)) {
            return failure(root_.display(kPciDir));
        }
        return {};
    }

    // libpci's walk of devices/: every function it lists, unsorted.
    Result<std::vector<Function>> scan() {
        if (!on_sysfs_) {
            // libpci's walk keeps a record of every entry, whatever it is,
            // before anything can be checked: a copied tree's size is its
            // owner's to choose. (A directory swapped in after this count
            // is the race "libpci and the sysroot" describes.)
            if (auto counted = count_entries(pci_dir_.get(), root_.display(kPciDevicesPath));
                !counted) {
                return counted.error();
            }
        }
        if (!guarded<pci_access>(
                guard_, [](pci_access* a) { pci_scan_bus(a); }, access_)) {
            // sysfs.c, sysfs_scan: an entry its sscanf("%x:%x:%x.%d") cannot
            // read. Said the way the admin can act on: the entry's path.
            constexpr std::string_view kUnparsed = "sysfs_scan: Couldn't parse entry name ";
            std::string_view message = guard_.message;
            if (message.starts_with(kUnparsed)) {
                message.remove_prefix(kUnparsed.size());
                return error(root_.display(kPciDevicesPath) + "/" + printable(message) +
                                 ": not a PCI address (domain:bus:device.function); libpci"
                                 " cannot walk the bus past it",
                             EINVAL);
            }
            return failure(root_.display(kPciDevicesPath));
        }
        std::vector<Function> functions;
        for (pci_dev* dev = access_->devices; dev != nullptr; dev = dev->next) {
            Address address{static_cast<unsigned>(dev->domain), dev->bus, dev->dev, dev->func};
            // sscanf("%x:%x:%x.%d") into u8 fields takes "00:00:20.9" too.
            if (address.dev > 0x1f || address.fn > 7) {
                return error(
                    root_.display(std::string(kPciDevicesPath) + "/" + canonical(address)) +
                        ": not a PCI address (domain:bus:device.function)",
                    EINVAL);
            }
            functions.push_back({address, dev});
        }
        return functions;
    }

    // One function by address, without a walk; nullopt when sysfs has no
    // such function.
    Result<std::optional<Function>> get(const Address& address) {
        std::string name = canonical(address);
        auto present = check(name, nullptr);
        if (!present) {
            int code = present.error().code;
            if (code == ENOENT || code == ENOTDIR) {
                return std::optional<Function>();
            }
            return present.error();
        }
        struct Call {
            pci_access* a;
            Address address;
            pci_dev* dev;
        } call{access_, address, nullptr};
        if (!guarded<Call>(
                guard_,
                [](Call* c) {
                    c->dev = pci_get_dev(
                        c->a, static_cast<int>(c->address.domain), static_cast<int>(c->address.bus),
                        static_cast<int>(c->address.dev), static_cast<int>(c->address.fn));
                },
                &call)) {
            return failure(root_.display(std::string(kPciDevicesPath) + "/" + name));
        }
        got_.push_back(call.dev); // not on libpci's list: pci_cleanup() would not free it
        return std::optional<Function>(Function{address, call.dev});
    }

    // pci_fill_info(flags) after checking the attributes it opens (sysfs.c,
    // sysfs_fill_info: vendor and device for PCI_FILL_IDENT, class for
    // PCI_FILL_CLASS).
    Status fill(const Function& function, int flags) {
        std::string name = canonical(function.address);
        if ((flags & PCI_FILL_IDENT) != 0) {
            for (const char* attribute : {"vendor", "device"}) {
                if (auto checked = check(name, attribute); !checked) {
                    return checked;
                }
            }
        }
        if ((flags & PCI_FILL_CLASS) != 0) {
            if (auto checked = check(name, "class"); !checked) {
                return checked;
            }
        }
        struct Call {
            pci_dev* dev;
            int flags;
        } call{function.dev, flags};
        if (!guarded<Call>(
                guard_, [](Call* c) { pci_fill_info(c->dev, c->flags); }, &call)) {
            return failure(root_.display(std::string(kPciDevicesPath) + "/" + name));
        }
        return {};
    }

    pci_access* access() const { return access_; }
    Guard& guard() { return guard_; }

    // libpci's message, made printable (it can quote an entry name), after
    // where it happened.
    Diagnostic failure(const std::string& where) const {
        std::string text = where + ": libpci: " + printable(trim(guard_.message));
        if (guard_.warning[0] != '\0') {
            text += " (after: " + printable(trim(guard_.warning)) + ")";
        }
        return error(std::move(text), EIO);
    }

  private:
    static constexpr const char* kPciDir = "sys/bus/pci";

    // Fails when `dir_fd`'s devices/ has more than kPciMaxFunctions
    // entries; reads no further than that.
    static Status count_entries(int dir_fd, const std::string& shown) {
        UniqueFd devices(
            ::openat(dir_fd, "devices", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!devices.valid()) {
            return errno_error("cannot open " + shown);
        }
        alignas(8) char buffer[32768];
        size_t entries = 0;
        for (;;) {
            long n = ::syscall(SYS_getdents64, devices.get(), buffer, sizeof buffer);
            if (n < 0) {
                return errno_error("cannot list " + shown);
            }
            if (n == 0) {
                return {};
            }
            for (long offset = 0; offset < n;) {
                const auto* entry = reinterpret_cast<const dirent64*>(buffer + offset);
                offset += entry->d_reclen;
                // libpci skips names that start with a dot.
                if (entry->d_name[0] != '.' && ++entries > kPciMaxFunctions) {
                    return error(format("%s has more than %zu entries, more than a PCI domain "
                                        "has functions; refusing to walk it",
                                        shown.c_str(), kPciMaxFunctions),
                                 E2BIG);
                }
            }
        }
    }

    // Checks devices/<name>/<attribute> (devices/<name> without one) as the
    // class comment says; the error names the path.
    Status check(const std::string& name, const char* attribute) {
        std::string rel = "devices/" + name;
        if (attribute != nullptr) {
            rel += '/';
            rel += attribute;
        }
        auto shown = [&] { return root_.display(std::string(kPciDir) + "/" + rel); };
        if (on_sysfs_) {
            int fd = open_resolved(pci_dir_.get(), rel.c_str(), kCheckFlags,
                                   RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS);
            if (fd >= 0) {
                opened_.add(fd);
                return {};
            }
            if (errno != ENOSYS && errno != EXDEV) {
                return errno_error("cannot open " + shown());
            }
            // Off the sysfs mount: checked the general way.
        }
        std::string from_root = std::string(kPciDir) + "/" + rel;
        int fd = open_resolved(root_.fd(), from_root.c_str(), kCheckFlags,
                               RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
        struct stat st {};
        if (fd >= 0) {
            opened_.add(fd);
            if (::fstat(fd, &st) != 0) {
                return errno_error("cannot stat " + shown());
            }
        } else if (errno == ENOSYS) {
            if (::fstatat(root_.fd(), from_root.c_str(), &st, 0) != 0) {
                return errno_error("cannot open " + shown());
            }
        } else if (errno == EXDEV) {
            return error(shown() + " resolves outside " + root_.root() +
                             " (a symlink out of the root); refusing to read it",
                         EXDEV);
        } else {
            return errno_error("cannot open " + shown());
        }
        bool wanted = attribute == nullptr ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
        if (!wanted) {
            return error(
                shown() +
                    (attribute == nullptr ? " is not a directory" : " is not a regular file") +
                    "; refusing to read it",
                attribute == nullptr ? ENOTDIR : EINVAL);
        }
        return {};
    }

    const Sysroot& root_;
    UniqueFd pci_dir_;
    bool on_sysfs_ = false;
    std::string sysfs_path_;
    pci_access* access_ = nullptr;
    std::vector<pci_dev*> got_; // from pci_get_dev()
    Guard guard_{};
    FdBatch opened_;
};

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
    ProcListing(std::vector<ProcPciFunction> listed, const std::vector<Function>& functions)
        : listed_(std::move(listed)) {
        auto by_key = [](const ProcPciFunction& a, const ProcPciFunction& b) {
            return a.bus_devfn < b.bus_devfn;
        };
        std::sort(listed_.begin(), listed_.end(), by_key);
        sysfs_keys_.reserve(functions.size());
        for (const Function& function : functions) {
            sysfs_keys_.push_back(bus_devfn(function.address));
        }
        std::sort(sysfs_keys_.begin(), sysfs_keys_.end());
    }

    bool rules_out(const Address& address) const {
        auto [first, last, sysfs_count] = lookup(address);
        if (last - first < sysfs_count) {
            return false;
        }
        return std::none_of(first, last,
                            [](const ProcPciFunction& f) { return f.vendor == kNvidiaVendor; });
    }

    // The vendor when the key is listed once and sysfs has one function for
    // it: then the line is that function's (the kernel writes the same
    // pci_dev's vendor to both), and sysfs's vendor need not be read.
    std::optional<uint16_t> sole_vendor(const Address& address) const {
        auto [first, last, sysfs_count] = lookup(address);
        if (last - first != 1 || sysfs_count != 1) {
            return std::nullopt;
        }
        return first->vendor;
    }

  private:
    struct Found {
        std::vector<ProcPciFunction>::const_iterator first, last;
        std::ptrdiff_t sysfs_count;
    };
    Found lookup(const Address& address) const {
        uint16_t key = bus_devfn(address);
        auto [first, last] = std::equal_range(
            listed_.begin(), listed_.end(), ProcPciFunction{key, 0},
            [](const auto& a, const auto& b) { return a.bus_devfn < b.bus_devfn; });
        auto [sysfs_first, sysfs_last] =
            std::equal_range(sysfs_keys_.begin(), sysfs_keys_.end(), key);
        return {first, last, sysfs_last - sysfs_first};
    }

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
                                             const std::vector<Function>& functions) {
    std::vector<ProcPciFunction> listed;
    listed.reserve(functions.size());
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
    return ProcListing(std::move(listed), functions);
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
    PciSession session(root);
    if (auto opened = session.open(); !opened) {
        return opened.error();
    }
    std::vector<Function> functions;
    std::optional<ProcListing> listing;
    if (only) {
        auto address = parse_bdf(*only);
        if (!address) {
            return error(quote(*only) + " is not a PCI address", EINVAL);
        }
        auto function = session.get(*address);
        if (!function) {
            return function.error();
        }
        if (*function) {
            functions.push_back(**function);
        }
    } else {
        auto scanned = session.scan();
        if (!scanned) {
            return scanned.error();
        }
        functions = std::move(*scanned);
        listing = read_proc_listing(root, functions);
    }
    // Address order; libpci lists in directory order, and a hostile tree can
    // name one function twice ("0:17:0.0" and "0000:17:00.0").
    std::sort(functions.begin(), functions.end(), [](const Function& a, const Function& b) {
        return a.address.key() < b.address.key();
    });
    functions.erase(std::unique(functions.begin(), functions.end(),
                                [](const Function& a, const Function& b) {
                                    return a.address.key() == b.address.key();
                                }),
                    functions.end());
    std::vector<uint64_t> known_keys;
    known_keys.reserve(known.size());
    for (const std::string& bdf : known) {
        if (auto address = parse_bdf(bdf)) {
            known_keys.push_back(address->key());
        }
    }
    std::sort(known_keys.begin(), known_keys.end());
    std::vector<PciFunction> gpus;
    for (const Function& function : functions) {
        if (std::binary_search(known_keys.begin(), known_keys.end(), function.address.key())) {
            continue;
        }
        std::optional<uint16_t> vendor;
        if (listing) {
            if (listing->rules_out(function.address)) {
                continue;
            }
            vendor = listing->sole_vendor(function.address);
        }
        if (!vendor) {
            if (auto filled = session.fill(function, PCI_FILL_IDENT); !filled) {
                return filled.error();
            }
            vendor = function.dev->vendor_id;
        }
        if (*vendor != kNvidiaVendor) {
            continue;
        }
        if (auto filled = session.fill(function, PCI_FILL_CLASS); !filled) {
            return filled.error();
        }
        if (is_gpu_class(function.dev->device_class)) {
            gpus.push_back({canonical(function.address), function.dev->device_class});
        }
    }
    return gpus;
}

std::vector<std::string> pci_device_names(const Sysroot& root, const std::vector<std::string>& bdfs,
                                          Diagnostics& diagnostics) {
    std::vector<std::string> names(bdfs.size());
    if (bdfs.empty()) {
        return names;
    }
    // The root's pci.ids, checked by Sysroot (inside the root, a regular
    // file), copied into a memfd of ours and handed to libpci as
    // /proc/self/fd/N: libpci parses the whole file into memory, and the
    // tree's owner could otherwise grow the very file it reopens after any
    // size check. Without /proc, its path under the root, size checked.
    std::string shown_ids = root.display(kPciIdsPath);
    auto no_names = [&](const std::string& why) {
        diagnostics.warning(why + "; GPUs are shown without pci.ids names");
        return names;
    };
    // Looked at through O_PATH before it is opened: Sysroot::open_file opens
    // first (O_NONBLOCK) and checks after, and opening a device node of a
    // copied /dev, or a FIFO a writer waits on, is already an effect.
    // Resolved as Sysroot resolves (inside the root), without openat2 as
    // Sysroot::open_file does.
    UniqueFd ids(open_resolved(root.fd(), std::string(kPciIdsPath).c_str(), kCheckFlags,
                               RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS));
    if (ids.valid()) {
        struct stat st {};
        if (::fstat(ids.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
            return no_names(shown_ids + " is not a regular file; refusing to read it");
        }
        std::string reopen = fd_path(ids.get(), "");
        ids.reset(reopen.empty()
                      ? -1
                      : ::open(reopen.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    } else if (errno != ENOSYS) {
        if (errno != ENOENT && errno != ENOTDIR) {
            return no_names(errno_error("cannot open " + shown_ids).text());
        }
        return names;
    }
    if (!ids.valid()) {
        auto opened = root.open_file(kPciIdsPath); // no openat2 or /proc: checked after opening
        if (!opened) {
            if (opened.error().code != ENOENT && opened.error().code != ENOTDIR) {
                return no_names(opened.error().text());
            }
            return names;
        }
        ids = std::move(*opened);
    }
    auto copy = private_pci_ids(ids.get(), shown_ids);
    if (!copy) {
        return no_names(copy.error().text());
    }
    std::string ids_path = fd_path(copy->get(), "");
    if (ids_path.empty()) {
        ids_path = root.path(kPciIdsPath);
    }
    PciSession session(root);
    if (auto opened = session.open(); !opened) {
        return no_names(opened.error().text());
    }
    pci_set_name_list_path(session.access(), const_cast<char*>(ids_path.c_str()), 0);
    for (size_t i = 0; i < bdfs.size(); ++i) {
        auto address = parse_bdf(bdfs[i]);
        if (!address) {
            continue;
        }
        auto function = session.get(*address);
        if (!function || !*function) {
            continue; // the report says what is wrong with a missing function
        }
        if (auto filled = session.fill(**function, PCI_FILL_IDENT); !filled) {
            diagnostics.warning(filled.error().text() + "; no pci.ids name for it");
            continue;
        }
        struct Call {
            pci_access* a;
            pci_dev* dev;
            char name[128];
            const char* found;
        } call{session.access(), (*function)->dev, {}, nullptr};
        bool looked_up = guarded<Call>(
            session.guard(),
            [](Call* c) {
                c->found =
                    pci_lookup_name(c->a, c->name, sizeof c->name,
                                    PCI_LOOKUP_DEVICE | PCI_LOOKUP_NO_NUMBERS | PCI_LOOKUP_NO_HWDB,
                                    c->dev->vendor_id, c->dev->device_id);
            },
            &call);
        if (!looked_up) {
            // A pci.ids libpci cannot parse: no names from it at all.
            diagnostics.warning(shown_ids +
                                ": libpci: " + printable(trim(session.guard().message)) +
                                "; GPUs are shown without pci.ids names");
            return std::vector<std::string>(bdfs.size());
        }
        if (call.found != nullptr) {
            names[i] = printable(call.found);
        }
    }
    return names;
}

} // namespace gpuinit
