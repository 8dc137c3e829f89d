// gpu-persist holding GPUs: the driver's list, the opens and the init
// waiters, parallel closes, lost and unbinding GPUs, uevents and /dev.
#include "daemon_internal.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/host/pci.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/timerfd.h>
#include <thread>
#include <unistd.h>

namespace gpuinit::persist_daemon {

void Daemon::load_choices() {
    auto text = state_dir_->inspect(std::string(kPersistStateName));
    if (!text || !text->exists) {
        table_.load_choices({});
        return;
    }
    UniqueFd fd(::openat(state_dir_->fd(), std::string(kPersistStateName).c_str(),
                         O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    std::string shown = state_dir_->path_of(kPersistStateName);
    if (!fd.valid()) {
        log_.error("cannot read " + shown + ": " + std::strerror(errno) +
                   "; keeping the choices in memory");
        return;
    }
    auto content = read_all(fd.get(), kSmallFileLimit, shown);
    if (!content) {
        log_.diagnostic(content.error());
        return;
    }
    Diagnostics diagnostics;
    table_.load_choices(parse_choices(*content, shown, diagnostics));
    for (const Diagnostic& diagnostic : diagnostics.items()) {
        log_.diagnostic(diagnostic);
    }
}

void Daemon::save_choices() {
    auto written = state_dir_->write_atomic(std::string(kPersistStateName),
                                            format_choices(table_.choices()), 0644);
    if (!written) {
        log_.error(written.error().text() + "; the choice holds until gpu-persist restarts");
    }
}

void Daemon::rescan() {
    std::vector<GpuIdentity> present;
    Diagnostics diagnostics;
    auto view = read_driver_gpus(root_, diagnostics);
    if (!view) {
        log_.error(view.error().text() + "; keeping the GPUs as they are");
        return;
    }
    for (const Diagnostic& diagnostic : diagnostics.items()) {
        log_.diagnostic(diagnostic);
    }
    for (const UnusableGpu& unusable : view->unusable) {
        if (unusable.severity == Severity::Error) {
            log_.error("GPU " + unusable.bdf + " not held: " + unusable.reason);
        }
    }
    for (const Gpu& gpu : view->gpus) {
        present.push_back(gpu.identity());
    }
    GpuTable::Actions actions;
    std::vector<std::string> gone;
    for (const HeldGpu& gpu : table_.gpus()) {
        if (std::none_of(present.begin(), present.end(),
                         [&](const GpuIdentity& id) { return id.bdf == gpu.id.bdf; })) {
            gone.push_back(gpu.id.bdf);
        }
    }
    for (const std::string& bdf : gone) {
        log_.info("GPU " + bdf + " is no longer bound to the driver");
        auto more = table_.gpu_gone(bdf);
        actions.insert(actions.end(), more.begin(), more.end());
    }
    for (const GpuIdentity& id : present) {
        bool known = table_.find(id.bdf) != nullptr;
        auto more = table_.gpu_present(id);
        if (!known) {
            log_.info(format("GPU %u (%s) found", id.minor, id.bdf.c_str()));
        }
        actions.insert(actions.end(), more.begin(), more.end());
    }
    run_actions(actions);
}

void Daemon::run_actions(const GpuTable::Actions& actions) {
    std::vector<std::string> to_close;
    bool save = false;
    for (const PersistAction& action : actions) {
        switch (action.kind) {
        case PersistAction::Kind::Open:
            open_gpu(action);
            break;
        case PersistAction::Kind::Close:
            to_close.push_back(action.bdf);
            break;
        case PersistAction::Kind::SaveChoices:
            save = true;
            break;
        }
    }
    if (!to_close.empty()) {
        close_gpus(to_close);
    }
    if (save) {
        save_choices();
    }
    dirty_ = true;
}

void Daemon::open_gpu(const PersistAction& action) {
    auto fd = opener_->open(action.minor);
    if (!fd) {
        Diagnostic failure = fd.error();
        int code = failure.code != 0 ? failure.code : EIO;
        if (code == ENOENT) {
            log_.info(format("GPU %u (%s): waiting for /dev/nvidia%u", action.minor,
                             action.bdf.c_str(), action.minor));
        } else {
            log_.error(format("GPU %u (%s): ", action.minor, action.bdf.c_str()) + failure.text() +
                       "; `gpu-persist enable` retries");
        }
        run_actions(table_.open_failed(action.bdf, code, failure.text()));
        return;
    }
    HeldFd& held = fds_[action.bdf];
    held.fd = std::move(*fd);
    held.minor = action.minor;
    held.id = next_id_++;
    held.waiting = true;
    held.close_when_done = false;
    int raw = held.fd.get();
    int pipe = completion_write_.get();
    uint64_t id = held.id;
    unsigned minor = action.minor;
    // The ioctl blocks until the init is done; every GPU's init runs at once.
    std::thread([raw, pipe, id, minor] {
        Status done = wait_open_complete(raw, minor);
        Completion completion{id, done ? 0 : (done.error().code != 0 ? done.error().code : EIO), 0};
        // Under PIPE_BUF: one atomic write.
        while (::write(pipe, &completion, sizeof(completion)) < 0 && errno == EINTR) {
        }
    }).detach();
}

// The last close of a GPU runs the driver's whole teardown: close them at once.
void Daemon::close_gpus(const std::vector<std::string>& bdfs) {
    std::vector<UniqueFd> closing;
    for (const std::string& bdf : bdfs) {
        auto it = fds_.find(bdf);
        if (it == fds_.end()) {
            continue;
        }
        if (it->second.waiting) {
            it->second.close_when_done = true;
            continue;
        }
        log_.info(format("GPU %u (%s) released", it->second.minor, bdf.c_str()));
        closing.push_back(std::move(it->second.fd));
        fds_.erase(it);
    }
    if (closing.size() == 1) {
        closing.front().reset();
        return;
    }
    std::vector<std::thread> threads;
    threads.reserve(closing.size());
    for (UniqueFd& fd : closing) {
        threads.emplace_back([&fd] { fd.reset(); });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
}

void Daemon::on_completions() {
    Completion completion{};
    while (::read(completion_read_.get(), &completion, sizeof(completion)) ==
           static_cast<ssize_t>(sizeof(completion))) {
        auto it = std::find_if(fds_.begin(), fds_.end(),
                               [&](const auto& entry) { return entry.second.id == completion.id; });
        if (it == fds_.end()) {
            continue;
        }
        std::string bdf = it->first;
        HeldFd& held = it->second;
        held.waiting = false;
        if (held.close_when_done || completion.code != 0) {
            unsigned minor = held.minor;
            fds_.erase(it);
            if (completion.code != 0) {
                std::string message = format("GPU %u (%s): the driver failed to initialize it: %s",
                                             minor, bdf.c_str(), std::strerror(completion.code));
                log_.error(message + "; see the kernel log; `gpu-persist enable` retries");
                run_actions(table_.open_failed(bdf, completion.code, message));
            } else {
                run_actions(table_.open_succeeded(bdf));
            }
            continue;
        }
        log_.info(format("GPU %u (%s) held", held.minor, bdf.c_str()));
        run_actions(table_.open_succeeded(bdf));
    }
    dirty_ = true;
}

// A lost GPU's POLLHUP comes only to a poll, and a waiting unbind or
// removal shows only in sysfs (kHeldCheckInterval says why): a periodic
// timer while any GPU is held, and none otherwise. Rearmed only when that
// changes, so its period is kept.
void Daemon::update_held_checks() {
    bool wanted = !stopping_ && table_.needs_checks();
    if (wanted == held_checks_armed_) {
        return;
    }
    itimerspec spec{};
    if (wanted) {
        spec.it_value.tv_sec = static_cast<time_t>(kHeldCheckInterval.count());
        spec.it_interval = spec.it_value;
    }
    if (::timerfd_settime(held_check_timer_.get(), 0, &spec, nullptr) == 0) {
        held_checks_armed_ = wanted;
    }
}

// The device is in sysfs without its driver link: the kernel removes that
// link before it calls the driver's remove (drivers/base/dd.c
// __device_release_driver), which waits while we hold the GPU.
bool Daemon::unbinding(const std::string& bdf) const {
    std::string device = std::string(kPciDevicesPath) + "/" + bdf;
    auto present = root_.exists(device);
    auto bound = root_.exists(device + "/driver");
    return present && *present && bound && !*bound;
}

void Daemon::check_held() {
    std::vector<pollfd> polled;
    std::vector<std::string> bdfs;
    for (const HeldGpu& gpu : table_.gpus()) {
        auto it = fds_.find(gpu.id.bdf);
        // A file whose open is still in progress polls POLLERR: only held ones.
        if (gpu.state != HoldState::Held || it == fds_.end() || it->second.waiting) {
            continue;
        }
        polled.push_back({it->second.fd.get(), 0, 0});
        bdfs.push_back(gpu.id.bdf);
    }
    if (polled.empty() || ::poll(polled.data(), polled.size(), 0) < 0) {
        return;
    }
    GpuTable::Actions actions;
    for (size_t i = 0; i < polled.size(); ++i) {
        const std::string& bdf = bdfs[i];
        unsigned minor = table_.find(bdf)->id.minor;
        GpuTable::Actions more;
        if ((polled[i].revents & (POLLHUP | POLLERR)) != 0) {
            log_.error(format("GPU %u (%s): the driver reports it lost (%s); released. Check the "
                              "kernel log (Xid 79: fallen off the bus)",
                              minor, bdf.c_str(),
                              (polled[i].revents & POLLHUP) != 0 ? "POLLHUP" : "POLLERR"));
            more = table_.hangup(bdf);
        } else if (unbinding(bdf)) {
            log_.warning(format("GPU %u (%s): the kernel is unbinding or removing it, and the "
                                "driver waits until no file holds it; released. Run "
                                "`gpu-persist disable %s` before a remove, unbind or reset",
                                minor, bdf.c_str(), bdf.c_str()));
            more = table_.unbinding(bdf);
        }
        actions.insert(actions.end(), more.begin(), more.end());
    }
    if (!actions.empty()) {
        run_actions(actions);
    }
}

Result<GpuTable::Actions> Daemon::change(const ControlRequest& request) {
    auto apply = [&] {
        return request.kind == ControlRequest::Kind::Enable ? table_.enable(request.gpu)
                                                            : table_.disable(request.gpu);
    };
    auto actions = apply();
    if (!actions && actions.error().code == ENODEV) {
        // Bound since the last event we heard of (hotplug off or lost): look again.
        rescan();
        actions = apply();
    }
    if (!actions) {
        return actions;
    }
    run_actions(*actions);
    return actions;
}

// An unbind or remove forgets the GPU at once, even when a rescan would find
// it bound again by now: that is a new binding, to be opened again (a GPU
// that had failed included). A bind, or lost events, rescans.
void Daemon::on_uevents() {
    std::vector<Uevent> events;
    bool overflow = monitor_->drain(events);
    bool bound = overflow;
    GpuTable::Actions actions;
    for (const Uevent& event : events) {
        if (!uevent_concerns_gpus(event)) {
            continue;
        }
        if (event.action == "bind") {
            bound = true;
            continue;
        }
        auto bdf = GpuSelector::parse(event.slot_name);
        if (bdf && bdf->kind() == GpuSelector::Kind::Bdf && table_.find(bdf->key()) != nullptr) {
            log_.info("GPU " + bdf->key() + " " + event.action + " (uevent)");
            auto more = table_.gpu_gone(bdf->key());
            actions.insert(actions.end(), more.begin(), more.end());
        }
    }
    run_actions(actions);
    if (bound) {
        rescan();
    }
}

void Daemon::update_inotify() {
    bool wanted = options_.hotplug && table_.any_waiting_for_node();
    if (wanted == inotify_.valid()) {
        return;
    }
    if (!wanted) {
        loop_.forget(inotify_.get());
        inotify_.reset();
        return;
    }
    UniqueFd fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    auto dev = root_.open_dir("dev");
    if (!fd.valid() || !dev) {
        return;
    }
    std::string path = format("/proc/self/fd/%d", dev->get());
    if (::inotify_add_watch(fd.get(), path.c_str(),
                            IN_CREATE | IN_ATTRIB | IN_MOVED_TO | IN_ONLYDIR) < 0 &&
        ::inotify_add_watch(fd.get(), root_.path("dev").c_str(),
                            IN_CREATE | IN_ATTRIB | IN_MOVED_TO | IN_ONLYDIR | IN_DONT_FOLLOW) <
            0) {
        log_.warning("cannot watch /dev for new nodes: " + std::string(std::strerror(errno)) +
                     "; `gpu-persist enable GPU` takes a GPU whose node came later");
        return;
    }
    inotify_ = std::move(fd);
    (void)loop_.watch(inotify_.get(), EPOLLIN, [this](uint32_t) {
        char buffer[4096];
        while (::read(inotify_.get(), buffer, sizeof(buffer)) > 0) {
        }
        run_actions(table_.nodes_changed());
    });
}

} // namespace gpuinit::persist_daemon
