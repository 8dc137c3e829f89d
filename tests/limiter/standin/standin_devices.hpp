// The simulated GPUs, shared by the stand-in libcuda.so.1 and
// libnvidia-ml.so.1 so that both describe the same machine.
//
// GPULIMIT_STANDIN_DEVICES="UUID:TOTAL_BYTES:PCI_BUS_ID,..." (CUDA ordinal
// order). The default has two devices whose CUDA order differs from their
// PCI order (the second has the lower bus id), as on many real machines, so
// tests catch code that confuses an NVML index with a CUDA ordinal.
//
// GPULIMIT_STANDIN_DEVICE_NODES=1: the list is the host's, and the process
// sees only the GPUs whose device node it has, as the real driver in a
// container (libcuda opens /dev/nvidia<minor> for each GPU the kernel lists
// and leaves out those it cannot reach): /dev/nvidia<minor> must be a
// character device 195:<minor>, where a GPU's minor is its position in PCI
// order (the order the driver probes, and assigns minors, in practice).
// Only the node's presence is checked (stat): a test host without the
// driver cannot open it.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <tuple>
#include <vector>

namespace standin {

struct Device {
    std::string uuid;   // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
    uint64_t total = 0; // bytes
    std::string pci;    // "0000:3b:00.0", lower case
    unsigned char uuid_bytes[16] = {};
    unsigned pci_domain = 0, pci_bus = 0, pci_device = 0;
};

inline constexpr const char* kDefaultDevices =
    "GPU-11111111-2222-3333-4444-555555555555:17179869184:0000:3b:00.0,"
    "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa:8589934592:0000:1a:00.0";

inline bool parse_uuid_bytes(const std::string& uuid, unsigned char* out) {
    if (uuid.rfind("GPU-", 0) != 0) {
        return false;
    }
    int nibbles = 0;
    for (size_t i = 4; i < uuid.size(); ++i) {
        const char c = uuid[i];
        if (c == '-') {
            continue;
        }
        if (!std::isxdigit(static_cast<unsigned char>(c)) || nibbles >= 32) {
            return false;
        }
        const int v =
            std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10);
        out[nibbles / 2] =
            static_cast<unsigned char>(nibbles % 2 == 0 ? v << 4 : out[nibbles / 2] | v);
        ++nibbles;
    }
    return nibbles == 32;
}

// A malformed list is a broken test setup: say so and stop, rather than
// simulate something the test did not ask for.
inline std::vector<Device> load_devices(const char* who) {
    const char* env = std::getenv("GPULIMIT_STANDIN_DEVICES");
    const std::string spec = (env != nullptr && *env != '\0') ? env : kDefaultDevices;
    std::vector<Device> devices;
    size_t start = 0;
    while (start <= spec.size()) {
        size_t end = spec.find(',', start);
        if (end == std::string::npos) {
            end = spec.size();
        }
        const std::string item = spec.substr(start, end - start);
        start = end + 1;
        if (item.empty()) {
            continue;
        }
        const size_t c1 = item.find(':');
        const size_t c2 = c1 == std::string::npos ? c1 : item.find(':', c1 + 1);
        Device d;
        char* num_end = nullptr;
        if (c2 != std::string::npos) {
            d.uuid = item.substr(0, c1);
            const std::string total = item.substr(c1 + 1, c2 - c1 - 1);
            d.total = std::strtoull(total.c_str(), &num_end, 10);
            d.pci = item.substr(c2 + 1);
            for (char& ch : d.pci) {
                ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            }
        }
        if (c2 == std::string::npos || num_end == nullptr || *num_end != '\0' || d.total == 0 ||
            !parse_uuid_bytes(d.uuid, d.uuid_bytes) ||
            std::sscanf(d.pci.c_str(), "%x:%x:%x", &d.pci_domain, &d.pci_bus, &d.pci_device) != 3) {
            std::fprintf(
                stderr,
                "%s: bad GPULIMIT_STANDIN_DEVICES entry '%s' (want UUID:TOTAL_BYTES:PCI_BUS_ID)\n",
                who, item.c_str());
            std::abort();
        }
        devices.push_back(d);
    }
    const char* nodes = std::getenv("GPULIMIT_STANDIN_DEVICE_NODES");
    if (nodes == nullptr || std::strcmp(nodes, "1") != 0) {
        return devices;
    }
    std::vector<Device> reachable;
    for (const Device& d : devices) {
        unsigned pci_position = 0;
        for (const Device& other : devices) {
            if (std::tie(other.pci_domain, other.pci_bus, other.pci_device) <
                std::tie(d.pci_domain, d.pci_bus, d.pci_device)) {
                ++pci_position;
            }
        }
        const std::string node = "/dev/nvidia" + std::to_string(pci_position);
        struct stat status {};
        if (::stat(node.c_str(), &status) == 0 && S_ISCHR(status.st_mode) &&
            major(status.st_rdev) == 195 && minor(status.st_rdev) == pci_position) {
            reachable.push_back(d);
        }
    }
    return reachable;
}

} // namespace standin
