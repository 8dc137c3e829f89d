#include "gpuinit/host/pci.hpp"

extern "C" {
#include <pci/pci.h>
}

#include "gpuinit/base/text.hpp"

#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstdarg>
#include <cstdio>
#include <tuple>

namespace gpuinit {

namespace {

// libpci declares its error callback noreturn and exit(1)s by default; a
// malformed sysfs entry must become an Error instead. The callback records
// the message and longjmps back into scan_with_libpci(), whose frame holds
// nothing with a destructor between setjmp and the libpci calls.
thread_local std::jmp_buf* t_pci_escape = nullptr;
thread_local char t_pci_message[512];

// GNU attribute syntax: libpci's callback type carries noreturn in its type.
__attribute__((noreturn, format(printf, 1, 2))) void on_pci_error(char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    // clang-analyzer 14 misses the va_start above in this noreturn function.
    // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
    std::vsnprintf(t_pci_message, sizeof t_pci_message, fmt, args);
    va_end(args);
    std::longjmp(*t_pci_escape, 1);
}

__attribute__((format(printf, 1, 2))) void on_pci_warning(char* /*fmt*/, ...) {}

struct RawFunction {
    int domain;
    unsigned bus, dev, func;
    uint16_t vendor, device, device_class;
};

// Plain C-style scan; returns false with t_pci_message set on failure.
bool scan_with_libpci(const char* sysfs_path, std::vector<RawFunction>* out) {
    std::jmp_buf escape;
    struct pci_access* volatile access = pci_alloc();
    if (access == nullptr) {
        std::snprintf(t_pci_message, sizeof t_pci_message, "pci_alloc failed");
        return false;
    }
    access->method = PCI_ACCESS_SYS_BUS_PCI;
    access->error = on_pci_error;
    access->warning = on_pci_warning;
    access->debug = on_pci_warning;
    t_pci_escape = &escape;
    if (setjmp(escape) != 0) {
        t_pci_escape = nullptr;
        pci_cleanup(access);
        return false;
    }
    pci_set_param(access, const_cast<char*>("sysfs.path"), const_cast<char*>(sysfs_path));
    pci_init(access);
    pci_scan_bus(access);
    for (struct pci_dev* dev = access->devices; dev != nullptr; dev = dev->next) {
        pci_fill_info(dev, PCI_FILL_IDENT | PCI_FILL_CLASS);
        out->push_back(RawFunction{dev->domain, dev->bus, dev->dev, dev->func, dev->vendor_id,
                                   dev->device_id, dev->device_class});
    }
    t_pci_escape = nullptr;
    pci_cleanup(access);
    return true;
}

} // namespace

Result<std::vector<PciFunction>> scan_pci(const Sysroot& root) {
    std::string sysfs = root.path("sys/bus/pci");
    if (!root.exists("sys/bus/pci/devices")) {
        return Error{ENOENT, root.display("sys/bus/pci/devices") + " does not exist"};
    }
    std::vector<RawFunction> raw;
    if (!scan_with_libpci(sysfs.c_str(), &raw)) {
        return Error{EINVAL, "libpci on " + root.display("sys/bus/pci/devices") + ": " +
                                 std::string(t_pci_message)};
    }
    std::sort(raw.begin(), raw.end(), [](const RawFunction& a, const RawFunction& b) {
        return std::tie(a.domain, a.bus, a.dev, a.func) < std::tie(b.domain, b.bus, b.dev, b.func);
    });
    std::vector<PciFunction> functions;
    functions.reserve(raw.size());
    for (const RawFunction& r : raw) {
        functions.push_back(PciFunction{
            format("%04x:%02x:%02x.%u", static_cast<unsigned>(r.domain), r.bus, r.dev, r.func),
            r.vendor, r.device, r.device_class});
    }
    return functions;
}

std::optional<std::string> normalize_bdf(std::string_view text) {
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
    return format("%04x:%02x:%02x.%x", static_cast<unsigned>(*domain), static_cast<unsigned>(*bus),
                  static_cast<unsigned>(*dev), static_cast<unsigned>(*fn));
}

} // namespace gpuinit
