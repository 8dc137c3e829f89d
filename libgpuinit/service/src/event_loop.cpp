#include "gpuinit/service/event_loop.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <vector>

namespace gpuinit::service {

namespace {
constexpr uint64_t kSignalToken = 1;
constexpr uint64_t kTimerToken = 2;
} // namespace

Status EventLoop::open(std::initializer_list<int> signals, SignalHandler on_signal) {
    sigset_t mask;
    sigemptyset(&mask);
    for (int signal : signals) {
        sigaddset(&mask, signal);
    }
    ::sigprocmask(SIG_BLOCK, &mask, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    signals_.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
    timer_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!epoll_.valid() || !signals_.valid() || !timer_.valid()) {
        return errno_error("cannot set up the event loop (epoll, signalfd, timerfd)");
    }
    on_signal_ = std::move(on_signal);
    for (auto [fd, token] :
         {std::pair{signals_.get(), kSignalToken}, {timer_.get(), kTimerToken}}) {
        epoll_event event{};
        event.events = EPOLLIN;
        event.data.u64 = token;
        if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
            return errno_error("epoll_ctl");
        }
    }
    return {};
}

Status EventLoop::watch(int fd, uint32_t events, Handler handler) {
    forget(fd);
    uint64_t token = next_token_++;
    epoll_event event{};
    event.events = events;
    event.data.u64 = token;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
        return errno_error("epoll_ctl add");
    }
    tokens_[fd] = token;
    watches_[token] = Watch{fd, std::make_shared<Handler>(std::move(handler))};
    return {};
}

Status EventLoop::modify(int fd, uint32_t events) {
    auto it = tokens_.find(fd);
    if (it == tokens_.end()) {
        return error("epoll_ctl mod: fd not watched", EBADF);
    }
    epoll_event event{};
    event.events = events;
    event.data.u64 = it->second;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &event) != 0) {
        return errno_error("epoll_ctl mod");
    }
    return {};
}

void EventLoop::forget(int fd) {
    auto it = tokens_.find(fd);
    if (it == tokens_.end()) {
        return;
    }
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    watches_.erase(it->second);
    tokens_.erase(it);
}

void EventLoop::set_deadline(uint64_t key, Clock::time_point at, std::function<void()> expired) {
    deadlines_[key] = Deadline{at, std::move(expired)};
}

void EventLoop::clear_deadline(uint64_t key) {
    deadlines_.erase(key);
}

const Clock::time_point* EventLoop::deadline(uint64_t key) const {
    auto it = deadlines_.find(key);
    return it == deadlines_.end() ? nullptr : &it->second.at;
}

// One timerfd for the earliest deadline, set only when that changes, and
// disarmed when there is none.
void EventLoop::arm() {
    Clock::time_point earliest{};
    for (const auto& [key, deadline] : deadlines_) {
        if (earliest == Clock::time_point{} || deadline.at < earliest) {
            earliest = deadline.at;
        }
    }
    if (earliest == armed_) {
        return;
    }
    itimerspec spec{};
    if (earliest != Clock::time_point{}) {
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(earliest.time_since_epoch())
                      .count();
        ns = std::max<long long>(ns, 1);
        spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
        spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    }
    if (::timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &spec, nullptr) == 0) {
        armed_ = earliest;
    }
}

void EventLoop::on_timer() {
    uint64_t expirations = 0;
    (void)::read(timer_.get(), &expirations, sizeof expirations);
    armed_ = {};
    auto now = Clock::now();
    std::vector<uint64_t> due;
    for (const auto& [key, deadline] : deadlines_) {
        if (deadline.at <= now) {
            due.push_back(key);
        }
    }
    for (uint64_t key : due) {
        auto it = deadlines_.find(key);
        if (it == deadlines_.end() || it->second.at > now) {
            continue; // cleared or set again by an earlier one
        }
        std::function<void()> expired = std::move(it->second.expired);
        deadlines_.erase(it);
        expired();
    }
}

Status EventLoop::run_once(int timeout_ms) {
    arm();
    epoll_event events[32];
    int count = ::epoll_wait(epoll_.get(), events, 32, timeout_ms);
    if (count < 0) {
        return errno == EINTR ? Status() : errno_error("epoll_wait");
    }
    bool timer = false;
    for (int i = 0; i < count; ++i) {
        uint64_t token = events[i].data.u64;
        if (token == kSignalToken) {
            signalfd_siginfo info{};
            while (::read(signals_.get(), &info, sizeof info) ==
                   static_cast<ssize_t>(sizeof info)) {
                if (on_signal_) {
                    on_signal_(info);
                }
            }
            continue;
        }
        if (token == kTimerToken) {
            timer = true;
            continue;
        }
        auto it = watches_.find(token);
        if (it == watches_.end()) {
            continue; // forgotten by an earlier handler of this round
        }
        std::shared_ptr<Handler> handler = it->second.handler; // may forget itself
        (*handler)(events[i].events);
    }
    if (timer) {
        on_timer();
    }
    return {};
}

} // namespace gpuinit::service
