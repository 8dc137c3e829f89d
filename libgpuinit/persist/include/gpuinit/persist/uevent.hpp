// Hotplug: the kernel's and udev's uevents on NETLINK_KOBJECT_UEVENT.
// gpu-persist listens to udev's (group 2) when udevd runs, so the rule that
// runs gpu-mknod has finished before it hears of a GPU; else to the
// kernel's (group 1), and waits for the node with inotify.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

enum class UeventSource { Kernel = 1, Udev = 2 };

struct Uevent {
    std::string action;    // add, remove, bind, unbind, change
    std::string subsystem; // pci
    std::string driver;    // nvidia (bind), empty otherwise
    std::string slot_name; // PCI_SLOT_NAME: 0000:17:00.0
};

// One datagram, from either source: the kernel's "ACTION@DEVPATH\0K=V\0..."
// or udev's "libudev\0" header (magic 0xfeedcafe, big-endian) with the
// properties at the offset it gives. nullopt for anything malformed.
std::optional<Uevent> parse_uevent(std::string_view datagram);

// Whether the event may change which GPUs the nvidia driver has bound.
bool uevent_concerns_gpus(const Uevent& event);

class UeventMonitor {
  public:
    static Result<UeventMonitor> open(UeventSource source);
    int fd() const { return fd_.get(); }
    UeventSource source() const { return source_; }
    // Reads every pending datagram and appends those that concern GPUs to
    // `events`, in order; true when the socket overflowed (events were lost:
    // rescan). Datagrams not sent by the kernel (group 1) or by root's udevd
    // (group 2) are ignored.
    bool drain(std::vector<Uevent>& events);

  private:
    UeventMonitor(UniqueFd fd, UeventSource source) : fd_(std::move(fd)), source_(source) {}
    UniqueFd fd_;
    UeventSource source_;
};

} // namespace gpuinit
