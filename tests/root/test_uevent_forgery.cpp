// Forged uevents against gpu-persist's monitor (libudev's), sent as an
// attacker could: as an unprivileged user (the kernel refuses to send),
// from a user namespace with a network namespace of its own (where its
// CAP_NET_ADMIN and CAP_SYS_ADMIN hold, and nowhere else), and, to show that
// libudev's sender check is what stops them, from a root process (a port
// other than the kernel's) and from a non-root process that holds
// CAP_NET_ADMIN, whose datagrams reach the monitor's socket (a raw witness
// socket sees them) and are dropped there. A real event sent after them
// still arrives: the kernel's (root asks the kernel to send it, from port
// 0, as lib/kobject_uevent.c uevent_net_rcv allows CAP_SYS_ADMIN) or
// udevd's (a datagram with libudev's header from uid 0). And an overflow of
// the socket is reported as lost events.
//
// The test reaches every group-1 listener of this network namespace with
// one "change" event for a device that does not exist; forged datagrams go
// to the monitors, which drop them.
#include "gpuinit/persist/uevent.hpp"
#include "root_helpers.hpp"

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <endian.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sched.h>
#include <string>
#include <string_view>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

namespace gpuinit {

namespace {

constexpr uint32_t kKernelGroup = 1;
constexpr uint32_t kUdevGroup = 2;
constexpr uid_t kNobody = 65534;
// Slots nobody has: what the forgers claim, and what the real event names.
constexpr const char* kForgedSlot = "0000:fe:1f.6";
constexpr const char* kRealSlot = "0000:fe:1f.7";

// Exit codes of the forging children beyond errno values.
constexpr int kSetupFailed = 200;
constexpr int kNoUserNamespaces = 201;
constexpr int kNotDelivered = 202;

std::string properties(const char* action, const char* slot, bool with_seqnum) {
    std::string devpath = std::string("/devices/gpuinit-test/") + slot;
    std::string text;
    for (const std::string& field :
         {std::string("ACTION=") + action, "DEVPATH=" + devpath, std::string("SUBSYSTEM=pci"),
          std::string("DRIVER=nvidia"), std::string("PCI_SLOT_NAME=") + slot}) {
        text += field;
        text += '\0';
    }
    if (with_seqnum) {
        text += std::string("SEQNUM=4242", 11);
        text += '\0';
    }
    return text;
}

// "ACTION@DEVPATH\0" and the properties: the kernel's format.
std::string kernel_datagram(const char* action, const char* slot, bool with_seqnum = true) {
    std::string head = std::string(action) + "@/devices/gpuinit-test/" + slot;
    head += '\0';
    return head + properties(action, slot, with_seqnum);
}

// MurmurHash2 (Austin Appleby's, seed 0), as systemd's src/basic/MurmurHash2.c:
// udevd puts the subsystem's hash into its header, and the monitor's socket
// filter passes only pci's.
uint32_t murmur2(std::string_view text) {
    constexpr uint32_t m = 0x5bd1e995;
    uint32_t h = static_cast<uint32_t>(text.size());
    const auto* data = reinterpret_cast<const unsigned char*>(text.data());
    size_t left = text.size();
    while (left >= 4) {
        uint32_t k = 0;
        std::memcpy(&k, data, 4);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
        data += 4;
        left -= 4;
    }
    switch (left) {
    case 3:
        h ^= static_cast<uint32_t>(data[2]) << 16;
        [[fallthrough]];
    case 2:
        h ^= static_cast<uint32_t>(data[1]) << 8;
        [[fallthrough]];
    case 1:
        h ^= data[0];
        h *= m;
        break;
    default:
        break;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

// udevd's format (systemd 252, device-monitor.c monitor_netlink_header):
// "libudev\0", then magic, header size, properties offset and length, the
// subsystem and devtype hashes and the tag bloom, magic and hashes
// big-endian.
std::string udev_datagram(const char* action, const char* slot) {
    std::string body = properties(action, slot, true);
    std::string text("libudev\0", 8);
    auto word = [&](uint32_t value) {
        text.append(reinterpret_cast<const char*>(&value), sizeof(value));
    };
    word(htobe32(0xfeedcafe));
    word(40);
    word(40);
    word(static_cast<uint32_t>(body.size()));
    word(htobe32(murmur2("pci")));
    word(0);
    word(0);
    word(0);
    return text + body;
}

// Sends `payload` to a uevent group from a socket of its own; 0 or errno.
int send_to_group(uint32_t group, const std::string& payload) {
    int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
    if (fd < 0) {
        return errno;
    }
    sockaddr_nl to{};
    to.nl_family = AF_NETLINK;
    to.nl_groups = group;
    ssize_t sent = ::sendto(fd, payload.data(), payload.size(), 0,
                            reinterpret_cast<const sockaddr*>(&to), sizeof(to));
    int result = sent < 0 ? errno : 0;
    ::close(fd);
    return result;
}

// Asks the kernel to send `payload` to group 1 of this network namespace,
// from port 0 (needs CAP_SYS_ADMIN over the namespace's owner); 0, or the
// kernel's answer.
int send_as_kernel(const std::string& payload) {
    int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
    if (fd < 0) {
        return errno;
    }
    std::string message(NLMSG_HDRLEN, '\0');
    nlmsghdr header{};
    header.nlmsg_len = static_cast<uint32_t>(NLMSG_HDRLEN + payload.size());
    header.nlmsg_type = NLMSG_MIN_TYPE;
    header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    std::memcpy(message.data(), &header, sizeof(header));
    message += payload;
    sockaddr_nl to{};
    to.nl_family = AF_NETLINK;
    int result = 0;
    if (::sendto(fd, message.data(), message.size(), 0, reinterpret_cast<const sockaddr*>(&to),
                 sizeof(to)) < 0) {
        result = errno;
    } else {
        char reply[256];
        ssize_t got = ::recv(fd, reply, sizeof(reply), 0);
        if (got < static_cast<ssize_t>(NLMSG_HDRLEN + sizeof(int))) {
            result = got < 0 ? errno : EPROTO;
        } else {
            nlmsgerr answer{};
            std::memcpy(&answer, reply + NLMSG_HDRLEN, sizeof(int));
            result = -answer.error;
        }
    }
    ::close(fd);
    return result;
}

// A raw socket in a group: it sees every datagram sent there, believed or
// not, so the test knows the forged ones reached the monitor's socket too.
class Witness {
  public:
    explicit Witness(uint32_t group) {
        fd_ = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_KOBJECT_UEVENT);
        sockaddr_nl address{};
        address.nl_family = AF_NETLINK;
        address.nl_groups = group;
        bound_ = fd_ >= 0 &&
                 ::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
    }
    ~Witness() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    Witness(const Witness&) = delete;
    Witness& operator=(const Witness&) = delete;
    bool bound() const { return bound_; }

    // Reads until a datagram naming `slot` came (2 s at most); the senders'
    // ports of those naming kForgedSlot and kRealSlot are collected.
    bool wait_for(const char* slot) {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (std::chrono::steady_clock::now() < deadline) {
            pollfd entry{fd_, POLLIN, 0};
            if (::poll(&entry, 1, 100) <= 0) {
                continue;
            }
            char buffer[8192];
            sockaddr_nl from{};
            socklen_t length = sizeof(from);
            ssize_t got = ::recvfrom(fd_, buffer, sizeof(buffer), 0,
                                     reinterpret_cast<sockaddr*>(&from), &length);
            if (got <= 0) {
                continue;
            }
            std::string_view text(buffer, static_cast<size_t>(got));
            if (text.find(std::string("PCI_SLOT_NAME=") + kForgedSlot) != std::string_view::npos) {
                forged_ports.push_back(from.nl_pid);
            }
            if (text.find(std::string("PCI_SLOT_NAME=") + slot) != std::string_view::npos &&
                std::string_view(slot) != kForgedSlot) {
                return true;
            }
        }
        return false;
    }

    std::vector<uint32_t> forged_ports;

  private:
    int fd_ = -1;
    bool bound_ = false;
};

// Drops to nobody with no supplementary groups; with `keep`, CAP_NET_ADMIN
// stays effective (a service given only that capability).
bool become_nobody(bool keep_net_admin) {
    if (keep_net_admin && ::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) {
        return false;
    }
    if (::setgroups(0, nullptr) != 0 || ::setresgid(kNobody, kNobody, kNobody) != 0 ||
        ::setresuid(kNobody, kNobody, kNobody) != 0) {
        return false;
    }
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (keep_net_admin) {
        data[0].effective = data[0].permitted = 1U << CAP_NET_ADMIN;
    }
    if (::syscall(SYS_capset, &header, data) != 0) {
        return false;
    }
    // Its own /proc/self files (uid_map) belong to it again.
    return ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0;
}

bool write_file(const char* path, const std::string& text) {
    int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    return written;
}

// An unprivileged user: the kernel refuses to send to either group (no
// CAP_NET_ADMIN in the socket's network namespace): the errno.
int forge_as_user(uint32_t group, const std::string& payload) {
    return testing::run_in_child([&] {
        if (!become_nobody(false)) {
            return kSetupFailed;
        }
        return send_to_group(group, payload);
    });
}

// The same user in a user namespace of its own with a network namespace of
// its own: it may send there, even "as the kernel", and a listener there
// hears it; 0 when all of that worked. Nothing leaves that namespace.
int forge_from_user_namespace(uint32_t group, const std::string& payload) {
    return testing::run_in_child([&] {
        if (!become_nobody(false)) {
            return kSetupFailed;
        }
        if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
            return kNoUserNamespaces;
        }
        if (!write_file("/proc/self/setgroups", "deny") ||
            !write_file("/proc/self/uid_map", "0 65534 1") ||
            !write_file("/proc/self/gid_map", "0 65534 1")) {
            return kSetupFailed;
        }
        Witness inside(group);
        if (!inside.bound()) {
            return kSetupFailed;
        }
        if (int sent = send_to_group(group, payload); sent != 0) {
            return sent;
        }
        if (group == kKernelGroup) {
            if (int sent = send_as_kernel(kernel_datagram("bind", kForgedSlot, false)); sent != 0) {
                return sent;
            }
        }
        // The witness inside ends on a datagram that names no real slot:
        // look for the forged one itself.
        inside.wait_for(kRealSlot);
        return inside.forged_ports.empty() ? kNotDelivered : 0;
    });
}

// Someone given CAP_NET_ADMIN but not root (a network service): the kernel
// lets it send to both groups in this namespace.
int forge_with_net_admin(uint32_t group, const std::string& payload) {
    return testing::run_in_child([&] {
        if (!become_nobody(true)) {
            return kSetupFailed;
        }
        return send_to_group(group, payload);
    });
}

bool readable(int fd, int timeout_ms) {
    pollfd entry{fd, POLLIN, 0};
    return ::poll(&entry, 1, timeout_ms) > 0;
}

// The events naming the test's slots, in order.
std::vector<Uevent> test_events(const std::vector<Uevent>& events) {
    std::vector<Uevent> mine;
    for (const Uevent& event : events) {
        if (event.slot_name == kForgedSlot || event.slot_name == kRealSlot) {
            mine.push_back(event);
        }
    }
    return mine;
}

void expect_user_refused(uint32_t group, const std::string& payload) {
    EXPECT_EQ(forge_as_user(group, payload), EPERM)
        << "an unprivileged user could send to uevent group " << group;
}

void expect_confined_to_own_namespace(uint32_t group, const std::string& payload) {
    int result = forge_from_user_namespace(group, payload);
    if (result == kNoUserNamespaces) {
        std::fprintf(stderr, "SKIPPED LOUDLY: unprivileged user namespaces are off here; the "
                             "attacker in its own network namespace was not tried\n");
        return;
    }
    EXPECT_EQ(result, 0) << "the user namespace's own sends (group " << group
                         << ") did not work there, so its confinement shows nothing";
}

} // namespace

// What the monitor believed of the test's events, once the witness saw
// the real one: that event alone (its fields empty when it failed).
Uevent only_real_event(UeventMonitor& monitor) {
    EXPECT_TRUE(readable(monitor.fd(), 2000));
    std::vector<Uevent> events;
    EXPECT_FALSE(monitor.drain(events));
    auto mine = test_events(events);
    EXPECT_EQ(mine.size(), 1U) << "forged events were believed";
    if (mine.size() != 1) {
        return {};
    }
    EXPECT_EQ(mine[0].slot_name, kRealSlot);
    return mine[0];
}

TEST(UeventForgery, KernelGroupBelievesOnlyTheKernel) {
    GPUINIT_REQUIRE_ROOT();
    auto monitor = UeventMonitor::open(UeventSource::Kernel);
    ASSERT_TRUE(monitor) << monitor.error().text();
    Witness witness(kKernelGroup);
    ASSERT_TRUE(witness.bound()) << std::strerror(errno);
    std::string forged = kernel_datagram("bind", kForgedSlot);

    expect_user_refused(kKernelGroup, forged);
    expect_confined_to_own_namespace(kKernelGroup, forged);
    ASSERT_EQ(forge_with_net_admin(kKernelGroup, forged), 0);
    ASSERT_EQ(send_to_group(kKernelGroup, forged), 0) << "root, from a port of its own";
    ASSERT_EQ(send_as_kernel(kernel_datagram("change", kRealSlot, false)), 0)
        << "the kernel would not send the real event";

    ASSERT_TRUE(witness.wait_for(kRealSlot)) << "the real event never came";
    ASSERT_EQ(witness.forged_ports.size(), 2U) << "the forged datagrams did not reach the group";
    for (uint32_t port : witness.forged_ports) {
        EXPECT_NE(port, 0U);
    }
    Uevent real = only_real_event(*monitor);
    EXPECT_EQ(real.action, "change");
    EXPECT_EQ(real.subsystem, "pci");
}

TEST(UeventForgery, UdevGroupBelievesOnlyRoot) {
    GPUINIT_REQUIRE_ROOT();
    auto monitor = UeventMonitor::open(UeventSource::Udev);
    if (!monitor) {
        GTEST_SKIP() << "SKIPPED LOUDLY: " << monitor.error().text();
    }
    Witness witness(kUdevGroup);
    ASSERT_TRUE(witness.bound()) << std::strerror(errno);
    std::string forged = udev_datagram("bind", kForgedSlot);

    expect_user_refused(kUdevGroup, forged);
    expect_confined_to_own_namespace(kUdevGroup, forged);
    ASSERT_EQ(forge_with_net_admin(kUdevGroup, forged), 0);
    // udevd runs as root: what root sends here is udevd's word.
    ASSERT_EQ(send_to_group(kUdevGroup, udev_datagram("bind", kRealSlot)), 0);

    ASSERT_TRUE(witness.wait_for(kRealSlot)) << "the real event never came";
    ASSERT_EQ(witness.forged_ports.size(), 1U) << "the forged datagram did not reach the group";
    Uevent real = only_real_event(*monitor);
    EXPECT_EQ(real.action, "bind");
    EXPECT_EQ(real.driver, "nvidia");
    EXPECT_TRUE(uevent_concerns_gpus(real));
}

// More than the socket holds: libudev reports the kernel's ENOBUFS once, the
// drain says events were lost (the daemon rescans), and the monitor hears
// the next event.
TEST(UeventMonitorOverflow, ReportsLostEvents) {
    GPUINIT_REQUIRE_ROOT();
    auto monitor = UeventMonitor::open(UeventSource::Kernel);
    ASSERT_TRUE(monitor) << monitor.error().text();
    int buffer = 0;
    socklen_t length = sizeof(buffer);
    ASSERT_EQ(::getsockopt(monitor->fd(), SOL_SOCKET, SO_RCVBUF, &buffer, &length), 0);
    EXPECT_EQ(buffer, 2 << 20) << "the monitor's buffer is not the 1 MiB asked for (doubled)";
    // Root's datagrams from its own port: queued, then dropped by the
    // sender check, so only the overflow is seen.
    std::string filler = kernel_datagram("change", kForgedSlot);
    filler.append(4000, 'x');
    int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
    ASSERT_GE(fd, 0);
    sockaddr_nl to{};
    to.nl_family = AF_NETLINK;
    to.nl_groups = kKernelGroup;
    for (int i = 0; i < 2000; ++i) {
        ASSERT_GE(::sendto(fd, filler.data(), filler.size(), 0,
                           reinterpret_cast<const sockaddr*>(&to), sizeof(to)),
                  0);
    }
    ::close(fd);
    std::vector<Uevent> events;
    EXPECT_TRUE(monitor->drain(events)) << "the overflow was not reported";
    EXPECT_TRUE(test_events(events).empty());

    ASSERT_EQ(send_as_kernel(kernel_datagram("change", kRealSlot, false)), 0);
    ASSERT_TRUE(readable(monitor->fd(), 2000));
    events.clear();
    EXPECT_FALSE(monitor->drain(events));
    auto mine = test_events(events);
    ASSERT_EQ(mine.size(), 1U);
    EXPECT_EQ(mine[0].slot_name, kRealSlot);
}

} // namespace gpuinit
