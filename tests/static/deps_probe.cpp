// Links every static dependency the way a tool would (libkmod,
// libudev enumerate and monitor, libcap-ng through drop_privileges) with the
// static link flags. That it builds at all proves the archives link with no
// NSS warning before any tool uses them; static.deps-probe then runs it.
// Exit status: 0 fine, 1 a library failed, 77 the root part was skipped.
#include "gpuinit/host/privileges.hpp"

#include <cap-ng.h>
#include <cstdio>
#include <libkmod.h>
#include <libudev.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

bool probe_kmod() {
    struct kmod_ctx* context = kmod_new(nullptr, nullptr);
    if (context == nullptr) {
        std::fprintf(stderr, "deps-probe: kmod_new failed\n");
        return false;
    }
    kmod_unref(context);
    return true;
}

bool probe_udev() {
    struct udev* udev = udev_new();
    if (udev == nullptr) {
        std::fprintf(stderr, "deps-probe: udev_new failed\n");
        return false;
    }
    struct udev_enumerate* enumerate = udev_enumerate_new(udev);
    int devices = 0;
    if (enumerate != nullptr && udev_enumerate_add_match_subsystem(enumerate, "mem") >= 0 &&
        udev_enumerate_scan_devices(enumerate) >= 0) {
        struct udev_list_entry* entry = nullptr;
        udev_list_entry_foreach(entry, udev_enumerate_get_list_entry(enumerate)) {
            ++devices;
        }
    }
    udev_enumerate_unref(enumerate);
    // Netlink may be unavailable in a container: only the link matters here.
    struct udev_monitor* monitor = udev_monitor_new_from_netlink(udev, "kernel");
    udev_monitor_unref(monitor);
    udev_unref(udev);
    std::printf("deps-probe: udev enumerated %d mem devices\n", devices);
    return true;
}

// In a child: drop to nobody with numeric ids and check nothing is left.
int probe_drop_privileges() {
    if (::geteuid() != 0) {
        std::fprintf(stderr, "deps-probe: SKIPPED LOUDLY: dropping privileges needs root\n");
        return 77;
    }
    pid_t child = ::fork();
    if (child == 0) {
        gpuinit::Status dropped = gpuinit::drop_privileges(65534, 65534, {});
        if (!dropped) {
            std::fprintf(stderr, "deps-probe: drop_privileges: %s\n",
                         dropped.error().message.c_str());
            ::_exit(1);
        }
        capng_get_caps_process();
        bool clean = ::getuid() == 65534 && ::getgid() == 65534 &&
                     capng_have_capabilities(CAPNG_SELECT_BOTH) == CAPNG_NONE;
        ::_exit(clean ? 0 : 1);
    }
    int status = 0;
    if (child < 0 || ::waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "deps-probe: the child still had privileges or failed\n");
        return 1;
    }
    std::printf("deps-probe: dropped to 65534:65534 with no capabilities\n");
    return 0;
}

} // namespace

int main() {
    if (!probe_kmod() || !probe_udev()) {
        return 1;
    }
    return probe_drop_privileges();
}
