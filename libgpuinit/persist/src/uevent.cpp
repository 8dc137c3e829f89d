#include "gpuinit/persist/uevent.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <linux/netlink.h>
#include <sys/socket.h>

namespace gpuinit {

namespace {

constexpr std::string_view kUdevPrefix{"libudev\0", 8};
constexpr uint32_t kUdevMagic = 0xfeedcafe;
// prefix[8], magic, header_size, properties_off, properties_len, 4 hashes.
constexpr size_t kUdevHeaderSize = 8 + 8 * 4;
constexpr size_t kMaxUevent = 8192;

uint32_t host_word(std::string_view data, size_t offset) {
    uint32_t value = 0;
    std::memcpy(&value, data.data() + offset, sizeof(value));
    return value;
}

void take_properties(std::string_view block, Uevent& event) {
    while (!block.empty()) {
        size_t end = block.find('\0');
        std::string_view entry = block.substr(0, end);
        size_t equals = entry.find('=');
        if (equals != std::string_view::npos) {
            std::string_view key = entry.substr(0, equals);
            std::string_view value = entry.substr(equals + 1);
            if (key == "ACTION") {
                event.action = value;
            } else if (key == "SUBSYSTEM") {
                event.subsystem = value;
            } else if (key == "DRIVER") {
                event.driver = value;
            } else if (key == "PCI_SLOT_NAME") {
                event.slot_name = value;
            }
        }
        if (end == std::string_view::npos) {
            break;
        }
        block.remove_prefix(end + 1);
    }
}

} // namespace

std::optional<Uevent> parse_uevent(std::string_view datagram) {
    Uevent event;
    if (datagram.size() >= kUdevHeaderSize && datagram.substr(0, 8) == kUdevPrefix) {
        if (ntohl(host_word(datagram, 8)) != kUdevMagic) {
            return std::nullopt;
        }
        uint32_t header_size = host_word(datagram, 12);
        uint32_t offset = host_word(datagram, 16);
        uint32_t length = host_word(datagram, 20);
        if (header_size < kUdevHeaderSize || offset < header_size || offset > datagram.size() ||
            length > datagram.size() - offset) {
            return std::nullopt;
        }
        take_properties(datagram.substr(offset, length), event);
    } else {
        size_t end = datagram.find('\0');
        std::string_view head = datagram.substr(0, end);
        size_t at = head.find('@');
        if (end == std::string_view::npos || at == std::string_view::npos || at == 0) {
            return std::nullopt;
        }
        take_properties(datagram.substr(end + 1), event);
    }
    if (event.action.empty() || event.subsystem.empty()) {
        return std::nullopt;
    }
    return event;
}

bool uevent_concerns_gpus(const Uevent& event) {
    if (event.subsystem != "pci") {
        return false;
    }
    if (event.action == "bind") {
        return event.driver == "nvidia";
    }
    return event.action == "unbind" || event.action == "remove";
}

Result<UeventMonitor> UeventMonitor::open(UeventSource source) {
    UniqueFd fd(
        ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_KOBJECT_UEVENT));
    if (!fd.valid()) {
        return errno_error("netlink uevent socket");
    }
    int on = 1;
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0) {
        return errno_error("SO_PASSCRED on the uevent socket");
    }
    // Room for a burst (a rescan of many GPUs); an overflow means a rescan.
    int size = 1 << 20;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    sockaddr_nl address{};
    address.nl_family = AF_NETLINK;
    address.nl_groups = static_cast<uint32_t>(source);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        return errno_error("bind the uevent socket");
    }
    return UeventMonitor(std::move(fd), source);
}

bool UeventMonitor::drain(std::vector<Uevent>& events) {
    bool overflow = false;
    while (true) {
        char buffer[kMaxUevent];
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
        sockaddr_nl sender{};
        iovec iov{buffer, sizeof(buffer)};
        msghdr message{};
        message.msg_name = &sender;
        message.msg_namelen = sizeof(sender);
        message.msg_iov = &iov;
        message.msg_iovlen = 1;
        message.msg_control = control;
        message.msg_controllen = sizeof(control);
        ssize_t got = ::recvmsg(fd_.get(), &message, MSG_DONTWAIT);
        if (got < 0) {
            if (errno == ENOBUFS) {
                overflow = true; // lost events: the caller rescans
                continue;
            }
            return overflow; // EAGAIN, or nothing more to read
        }
        if ((message.msg_flags & MSG_TRUNC) != 0) {
            continue;
        }
        const ucred* credentials = nullptr;
        for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
             header = CMSG_NXTHDR(&message, header)) {
            if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_CREDENTIALS) {
                credentials = reinterpret_cast<const ucred*>(CMSG_DATA(header));
            }
        }
        // Anyone may send to a netlink group they can join: only the kernel
        // (port 0) and root's udevd are believed.
        bool from_kernel = sender.nl_pid == 0;
        bool trusted = source_ == UeventSource::Kernel
                           ? from_kernel
                           : (!from_kernel && credentials != nullptr && credentials->uid == 0);
        if (!trusted) {
            continue;
        }
        auto event = parse_uevent(std::string_view(buffer, static_cast<size_t>(got)));
        if (event && uevent_concerns_gpus(*event) && events.size() < 1024) {
            events.push_back(std::move(*event));
        } else if (event && uevent_concerns_gpus(*event)) {
            overflow = true;
        }
    }
}

} // namespace gpuinit
