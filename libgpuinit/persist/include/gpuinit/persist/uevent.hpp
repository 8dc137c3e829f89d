// Hotplug: the kernel's and udev's PCI uevents, through libudev's monitor.
// gpu-persist listens to udev's when udevd runs, so the rule that runs
// gpu-mknod has finished before it hears of a GPU; else to the kernel's,
// and waits for the node with inotify.
//
// Which sender is believed is libudev's check (systemd 252,
// src/libsystemd/sd-device/device-monitor.c, device_monitor_receive_device):
// on the kernel's group only datagrams from port 0 (the kernel), on udev's
// only those whose credentials say uid 0 (or the daemon's own uid, or a uid
// outside its user namespace). The kernel lets only CAP_NET_ADMIN in the
// socket's network namespace send to either group at all.
#pragma once

#include "gpuinit/base/result.hpp"

#include <memory>
#include <string>
#include <vector>

struct udev;
struct udev_monitor;

namespace gpuinit {

enum class UeventSource { Kernel, Udev };

struct Uevent {
    std::string action;    // add, remove, bind, unbind, change
    std::string subsystem; // pci
    std::string driver;    // nvidia (bind), empty otherwise
    std::string slot_name; // PCI_SLOT_NAME: 0000:17:00.0
};

// Whether the event may change which GPUs the nvidia driver has bound.
bool uevent_concerns_gpus(const Uevent& event);

namespace detail {
struct UdevUnref {
    void operator()(udev* context) const;
};
struct UdevMonitorUnref {
    void operator()(udev_monitor* monitor) const;
};
} // namespace detail

class UeventMonitor {
  public:
    // A monitor of `source`'s PCI events, its non-blocking socket bound, with
    // a receive buffer of 1 MiB (libudev's own default is 128 MiB, forced as
    // root: kernel memory a burst could pin). Fails when libudev declines
    // udev's group: it subscribes only when /run/udev/control exists or
    // /dev is a devtmpfs, and otherwise binds to no group and hears nothing.
    static Result<UeventMonitor> open(UeventSource source);
    int fd() const;
    UeventSource source() const { return source_; }
    // Receives every pending event and appends the PCI ones to `events`, in
    // order; true when events were lost (the socket overflowed, or more than
    // the drain keeps): rescan. Datagrams libudev does not believe or cannot
    // read are dropped by it and never seen here.
    bool drain(std::vector<Uevent>& events);

  private:
    UeventMonitor(std::unique_ptr<udev, detail::UdevUnref> context,
                  std::unique_ptr<udev_monitor, detail::UdevMonitorUnref> monitor,
                  UeventSource source)
        : context_(std::move(context)), monitor_(std::move(monitor)), source_(source) {}
    // The monitor keeps a pointer to the context: it is destroyed first.
    std::unique_ptr<udev, detail::UdevUnref> context_;
    std::unique_ptr<udev_monitor, detail::UdevMonitorUnref> monitor_;
    UeventSource source_;
};

} // namespace gpuinit
