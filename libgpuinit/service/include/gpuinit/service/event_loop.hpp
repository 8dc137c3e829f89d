// A daemon's event loop: epoll over the fds it watches, its signals through
// a signalfd, and deadlines through one timerfd armed for the earliest
// (disarmed when there are none: an idle daemon is never woken). A
// connection's deadline is set once, when it is accepted; the loop never
// moves it on input, so a client trickling bytes is dropped on time.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <sys/signalfd.h>

namespace gpuinit::service {

using Clock = std::chrono::steady_clock; // CLOCK_MONOTONIC, as the timerfd

class EventLoop {
  public:
    using Handler = std::function<void(uint32_t events)>;
    using SignalHandler = std::function<void(const signalfd_siginfo& info)>;

    // Blocks `signals` and takes them through a signalfd; SIGPIPE ignored.
    Status open(std::initializer_list<int> signals, SignalHandler on_signal);

    // `events`: EPOLLIN etc. A handler may watch, modify or forget any fd,
    // its own included.
    Status watch(int fd, uint32_t events, Handler handler);
    Status modify(int fd, uint32_t events);
    void forget(int fd);
    bool watching(int fd) const { return tokens_.count(fd) != 0; }

    // Calls `expired` once at `at` unless cleared or set again first.
    void set_deadline(uint64_t key, Clock::time_point at, std::function<void()> expired);
    void clear_deadline(uint64_t key);
    const Clock::time_point* deadline(uint64_t key) const;

    // Waits for one round of events (or `timeout_ms`, -1: none) and runs
    // their handlers, then the deadlines that have passed.
    Status run_once(int timeout_ms = -1);

  private:
    struct Watch {
        int fd;
        std::shared_ptr<Handler> handler;
    };
    struct Deadline {
        Clock::time_point at;
        std::function<void()> expired;
    };
    void arm();
    void on_timer();

    UniqueFd epoll_;
    UniqueFd signals_;
    UniqueFd timer_;
    SignalHandler on_signal_;
    uint64_t next_token_ = 3; // 1 and 2 are the signalfd and the timerfd
    std::map<int, uint64_t> tokens_;
    std::map<uint64_t, Watch> watches_;
    std::map<uint64_t, Deadline> deadlines_;
    Clock::time_point armed_{};
};

} // namespace gpuinit::service
