#include "gpuinit/persist/uevent.hpp"

#include <cerrno>
#include <libudev.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/socket.h>

namespace gpuinit {

namespace {

// One drain's work, so that a flood cannot hold the loop: what is left
// wakes it again (the socket is watched level-triggered).
constexpr size_t kMaxReceives = 4096;
// More events than this in one drain are not kept: a rescan covers them.
constexpr size_t kMaxEvents = 1024;
// Values longer than any action, driver or PCI address are cut; the
// selector then refuses the address.
constexpr size_t kMaxValue = 64;

// The group a bound netlink socket is in; 0 when none.
uint32_t bound_groups(int fd) {
    sockaddr_nl address{};
    socklen_t length = sizeof(address);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
        return 0;
    }
    return address.nl_groups;
}

// Whether a datagram (or a pending error: ENOBUFS) waits.
bool readable(int fd) {
    pollfd entry{fd, POLLIN, 0};
    return ::poll(&entry, 1, 0) > 0 && (entry.revents & (POLLIN | POLLERR)) != 0;
}

// A property of a received event: libudev's copy of the datagram's own
// KEY=value list. Neither this nor udev_device_get_action reads sysfs or
// udev's database for a device from a monitor (sd-device.c:
// device_properties_prepare returns at once for a sealed device), unlike
// udev_device_get_driver or get_subsystem for a property the datagram
// lacks, which read links under the real /sys.
std::string property(udev_device* device, const char* key) {
    const char* value = ::udev_device_get_property_value(device, key);
    return value == nullptr ? std::string() : std::string(value).substr(0, kMaxValue);
}

} // namespace

void detail::UdevUnref::operator()(udev* context) const {
    ::udev_unref(context);
}

void detail::UdevMonitorUnref::operator()(udev_monitor* monitor) const {
    ::udev_monitor_unref(monitor);
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
    const char* name = source == UeventSource::Udev ? "udev" : "kernel";
    std::unique_ptr<udev, detail::UdevUnref> context(::udev_new());
    if (!context) {
        return errno_error("libudev: udev_new");
    }
    std::unique_ptr<udev_monitor, detail::UdevMonitorUnref> monitor(
        ::udev_monitor_new_from_netlink(context.get(), name));
    if (!monitor) {
        return errno_error(std::string("libudev: a monitor of the ") + name + "'s uevents");
    }
    // udevd's datagrams are filtered in the kernel (a socket filter on the
    // subsystem's hash); the kernel's in libudev, after the sender check.
    if (int failed =
            ::udev_monitor_filter_add_match_subsystem_devtype(monitor.get(), "pci", nullptr);
        failed < 0) {
        return os_error(-failed, "libudev: filter the uevent monitor on pci");
    }
    if (int failed = ::udev_monitor_enable_receiving(monitor.get()); failed < 0) {
        return os_error(-failed,
                        std::string("libudev: bind the monitor to the ") + name + "'s uevents");
    }
    // Room for a burst (a rescan of many GPUs); an overflow means a rescan.
    // libudev forces the size as root (SO_RCVBUFFORCE), else the kernel caps
    // it at net.core.rmem_max; either works.
    (void)::udev_monitor_set_receive_buffer_size(monitor.get(), 1 << 20);
    int fd = ::udev_monitor_get_fd(monitor.get());
    if (source == UeventSource::Udev && bound_groups(fd) == 0) {
        return error("libudev would not listen to udev's uevents: /run/udev/control is missing "
                     "and /dev is not a devtmpfs (udevd does not run on this root)",
                     ENOENT);
    }
    return UeventMonitor(std::move(context), std::move(monitor), source);
}

int UeventMonitor::fd() const {
    return ::udev_monitor_get_fd(monitor_.get());
}

// udev_monitor_receive_device returns NULL with errno EAGAIN both when the
// socket is empty and when libudev dropped a datagram (a sender it does not
// believe, a malformed message, a device outside the filter): poll tells
// the two apart. It reports an overflow once, as the socket's pending error:
// NULL with ENOBUFS (its recv with MSG_PEEK returns the error), and the
// datagrams queued before it still follow.
bool UeventMonitor::drain(std::vector<Uevent>& events) {
    bool lost = false;
    for (size_t receives = 0; receives < kMaxReceives; ++receives) {
        errno = 0;
        udev_device* device = ::udev_monitor_receive_device(monitor_.get());
        if (device == nullptr) {
            int failed = errno;
            if (failed == ENOBUFS || failed == ENOMEM) {
                lost = true; // the kernel's overflow, or one we could not take
                continue;
            }
            if (failed == EINTR) {
                continue;
            }
            if (!readable(fd())) {
                return lost;
            }
            continue;
        }
        Uevent event;
        event.action = property(device, "ACTION");
        event.subsystem = property(device, "SUBSYSTEM");
        event.driver = property(device, "DRIVER");
        event.slot_name = property(device, "PCI_SLOT_NAME");
        ::udev_device_unref(device);
        if (events.size() < kMaxEvents) {
            events.push_back(std::move(event));
        } else {
            lost = true;
        }
    }
    return lost;
}

} // namespace gpuinit
