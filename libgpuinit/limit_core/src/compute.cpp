// The compute cap's controller and gate: see compute.hpp.
//
// Freestanding: no heap, no exceptions, only libc and raw syscalls. The
// futex is a shared one (no FUTEX_PRIVATE_FLAG): the word lives in the
// MAP_SHARED state file, and the kernel keys a shared futex by the file and
// offset, so processes that map the same file at different addresses (and
// in other mount or pid namespaces) wait and wake on the same word.
#include "gpuinit/limit/compute.hpp"

#include <cerrno>
#include <climits>
#include <ctime>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace gpuinit::limit {

namespace {

constexpr uint64_t kPpm = 1'000'000;
constexpr uint64_t kMaxLumpNs = 1'000'000'000; // the longest NVML sample period
constexpr uint64_t kMaxUtilizationPpm = 4 * kPpm;
constexpr uint32_t kGateOpen = 0;
constexpr uint32_t kGateClosed = 1;

long futex(std::atomic<uint32_t>* word, int operation, uint32_t value, const timespec* timeout) {
    // std::atomic<uint32_t> is lock-free and has the layout of uint32_t
    // (static_assert in group_state.hpp), so the kernel may read it.
    return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), operation, value, timeout, nullptr,
                   0);
}

} // namespace

uint64_t monotonic_ns() {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(now.tv_nsec);
}

void ShareController::reset(uint32_t cap_percent, uint64_t now_ns) {
    *this = ShareController{};
    cap_ppm_ = cap_percent >= 1 && cap_percent <= kMaxComputePercent ? cap_percent * 10'000u : 0;
    last_ns_ = now_ns;
}

void ShareController::resume(int64_t balance_ns) {
    if (cap_ppm_ == 0) {
        return;
    }
    const auto ceiling = static_cast<int64_t>(kCeilingPeriods * kControlPeriodNs * cap_ppm_ / kPpm);
    balance_ns_ = balance_ns < -kFloorNs ? -kFloorNs : balance_ns > ceiling ? ceiling : balance_ns;
    open_ = balance_ns_ > 0;
}

uint64_t ShareController::utilization_ppm() const {
    uint64_t busy = 0;
    uint64_t open = 0;
    for (int i = 1; i <= history_count_ && i <= kUtilizationSteps; ++i) {
        const History& entry = history_[(history_next_ - i + kRing) % kRing];
        busy += entry.busy_ns;
        open += entry.open_ns;
    }
    // Nothing open to learn from (the gate was closed throughout): assume
    // the worst, the group uses all the time the gate is open. Before the
    // first measurements arrive the estimate is low, so a new group's first
    // burst is corrected by the integral alone (once, at the start).
    if (open == 0) {
        return kPpm;
    }
    // Above 1 when work queued while open keeps running after the gate
    // closed (a deep launch queue): that work is predicted too.
    const auto ratio = static_cast<uint64_t>(static_cast<unsigned __int128>(busy) * kPpm / open);
    return ratio > kMaxUtilizationPpm ? kMaxUtilizationPpm : ratio;
}

uint64_t ShareController::share_ppm() const {
    uint64_t busy = 0;
    uint64_t elapsed = 0;
    for (int i = 1; i <= history_count_ && i <= kShareSteps; ++i) {
        const History& entry = history_[(history_next_ - i + kRing) % kRing];
        busy += entry.busy_ns;
        elapsed += entry.elapsed_ns;
    }
    if (elapsed == 0) {
        return 0;
    }
    const auto share = static_cast<uint64_t>(static_cast<unsigned __int128>(busy) * kPpm / elapsed);
    return share > kPpm ? kPpm : share;
}

void ShareController::add_provisional(uint64_t now_ns, int64_t amount_ns) {
    if (provisional_count_ == kRing) { // cannot happen within the horizon; keep the newest
        provisional_ns_ -= provisional_[provisional_first_].amount_ns;
        provisional_first_ = (provisional_first_ + 1) % kRing;
        --provisional_count_;
    }
    provisional_[(provisional_first_ + provisional_count_) % kRing] = {now_ns, amount_ns};
    ++provisional_count_;
    provisional_ns_ += amount_ns;
}

bool ShareController::step(uint64_t now_ns, uint64_t busy_ns) {
    if (cap_ppm_ == 0) {
        return true;
    }
    const uint64_t elapsed = now_ns > last_ns_ ? now_ns - last_ns_ : 0;
    last_ns_ = now_ns > last_ns_ ? now_ns : last_ns_;
    const uint64_t limit = elapsed + kMaxLumpNs;
    const uint64_t busy = busy_ns < limit ? busy_ns : limit;

    // The integral: earned at the cap, spent as measured.
    balance_ns_ += static_cast<int64_t>(elapsed * cap_ppm_ / kPpm) - static_cast<int64_t>(busy);
    if (balance_ns_ < -kFloorNs) {
        balance_ns_ = -kFloorNs;
    }

    // The measurement claims the oldest provisional charges (it is of the
    // earliest unmeasured time); what it does not cover stays predicted.
    uint64_t unclaimed = busy;
    while (provisional_count_ > 0 && unclaimed > 0) {
        Provisional& oldest = provisional_[provisional_first_];
        const auto take = static_cast<int64_t>(unclaimed < static_cast<uint64_t>(oldest.amount_ns)
                                                   ? unclaimed
                                                   : static_cast<uint64_t>(oldest.amount_ns));
        oldest.amount_ns -= take;
        provisional_ns_ -= take;
        unclaimed -= static_cast<uint64_t>(take);
        if (oldest.amount_ns == 0) {
            provisional_first_ = (provisional_first_ + 1) % kRing;
            --provisional_count_;
        }
    }
    // Predictions nothing measured within the horizon did not happen.
    while (provisional_count_ > 0 &&
           now_ns - provisional_[provisional_first_].at_ns > kPredictionHorizonNs) {
        provisional_ns_ -= provisional_[provisional_first_].amount_ns;
        provisional_first_ = (provisional_first_ + 1) % kRing;
        --provisional_count_;
    }

    const uint64_t open_ns = open_ ? elapsed : 0;
    history_[history_next_] = {elapsed, busy, open_ns};
    history_next_ = (history_next_ + 1) % kRing;
    if (history_count_ < kRing) {
        ++history_count_;
    }
    if (open_ns > 0) {
        const auto predicted = static_cast<uint64_t>(static_cast<unsigned __int128>(open_ns) *
                                                     utilization_ppm() / kPpm);
        if (predicted > 0) {
            add_provisional(now_ns, static_cast<int64_t>(predicted));
        }
    }

    // Bounded above on the predicted balance: time the group did not use
    // because the gate was closed or it was idle is not saved up beyond two
    // periods; time merely not yet measured is not lost.
    const auto ceiling = static_cast<int64_t>(kCeilingPeriods * kControlPeriodNs * cap_ppm_ / kPpm);
    if (balance_ns_ - provisional_ns_ > ceiling) {
        balance_ns_ = ceiling + provisional_ns_;
    }
    open_ = balance_ns_ - provisional_ns_ > 0;
    return open_;
}

uint64_t SampleClock::window_us() const {
    if (gap_count_ == 0) {
        return kDefaultWindowUs;
    }
    uint64_t shortest = gaps_[0];
    for (int i = 1; i < gap_count_; ++i) {
        shortest = gaps_[i] < shortest ? gaps_[i] : shortest;
    }
    return shortest;
}

void SampleClock::learn_gap(uint64_t gap_us) {
    if (gap_us < kMinWindowUs) {
        return;
    }
    gaps_[gap_next_] = gap_us < kMaxWindowUs ? gap_us : kMaxWindowUs;
    gap_next_ = (gap_next_ + 1) % kGaps;
    gap_count_ += gap_count_ < kGaps ? 1 : 0;
}

void SampleClock::device_sample(uint64_t timestamp_us) {
    if (timestamp_us <= device_last_us_) {
        return; // seen already
    }
    if (device_last_us_ != 0) {
        if (!device_gaps_) {
            gap_count_ = 0; // the processes' gaps were a guess; these are not
            gap_next_ = 0;
            device_gaps_ = true;
        }
        learn_gap(timestamp_us - device_last_us_);
    }
    device_last_us_ = timestamp_us;
}

uint64_t SampleClock::busy_ns(uint32_t pid, uint64_t timestamp_us, uint32_t percent) {
    const uint64_t bounded = percent > 100 ? 100 : percent;
    for (PidStamp& entry : pids_) {
        if (entry.pid != pid || entry.timestamp_us == 0) {
            continue;
        }
        if (timestamp_us <= entry.timestamp_us) {
            return 0; // seen already
        }
        const uint64_t gap = timestamp_us - entry.timestamp_us;
        entry.timestamp_us = timestamp_us;
        if (!device_gaps_) {
            learn_gap(gap);
        }
        // The window, or less: a sample closer to the previous one than a
        // window (a clock step) counts only its gap.
        const uint64_t window = window_us();
        return (gap < window ? gap : window) * 1000u * bounded / 100u;
    }
    pids_[pid_next_] = {pid, timestamp_us};
    pid_next_ = (pid_next_ + 1) % kPids;
    return window_us() * 1000u * bounded / 100u;
}

void gate_set(ComputeRecord& record, bool open) {
    if (!open) {
        record.gate.store(kGateClosed, std::memory_order_seq_cst);
        return;
    }
    const uint32_t was = record.gate.exchange(kGateOpen, std::memory_order_seq_cst);
    // A sleeper adds itself to waiters before it checks the word (seq_cst
    // both sides): either it sees the gate open, or this sees it waiting. The
    // futex's own compare covers the window between its check and its sleep.
    if (was != kGateOpen && record.waiters.load(std::memory_order_seq_cst) != 0) {
        futex(&record.gate, FUTEX_WAKE, INT_MAX, nullptr);
    }
}

bool heartbeat_fresh(const ComputeRecord& record, uint64_t now_ns) {
    const uint64_t beat = record.heartbeat_ns.load(std::memory_order_acquire);
    return beat != 0 && (now_ns < beat || now_ns - beat <= kStaleHeartbeatNs);
}

void gate_pass(ComputeRecord& record) {
    if (record.gate.load(std::memory_order_acquire) == kGateOpen) {
        return;
    }
    record.launches_held.fetch_add(1, std::memory_order_relaxed);
    record.waiters.fetch_add(1, std::memory_order_seq_cst);
    while (record.gate.load(std::memory_order_seq_cst) != kGateOpen) {
        if (!heartbeat_fresh(record, monotonic_ns())) {
            break; // no live driver: the gate counts as open
        }
        const timespec timeout{0, static_cast<long>(kGateSleepNs)};
        // EAGAIN (opened meanwhile), EINTR (a signal) and ETIMEDOUT all
        // lead back to the checks above.
        futex(&record.gate, FUTEX_WAIT, kGateClosed, &timeout);
    }
    record.waiters.fetch_sub(1, std::memory_order_relaxed);
}

bool drive_step(ComputeRecord& record, ShareController& controller, uint64_t now_ns,
                uint64_t busy_ns, uint32_t driver) {
    const uint64_t last = record.heartbeat_ns.load(std::memory_order_relaxed);
    const bool open = controller.step(now_ns, busy_ns);
    if (last != 0 && now_ns > last && record.gate.load(std::memory_order_relaxed) != kGateOpen) {
        record.closed_ns.fetch_add(now_ns - last, std::memory_order_relaxed);
    }
    record.tokens_ns.store(controller.measured_balance_ns(), std::memory_order_relaxed);
    record.busy_ns.fetch_add(busy_ns, std::memory_order_relaxed);
    record.share_ppm.store(controller.share_ppm(), std::memory_order_relaxed);
    record.driver.store(driver, std::memory_order_relaxed);
    // The heartbeat before the gate: a sleeper that sees the gate closed
    // must not find the heartbeat of the driver that just closed it stale.
    record.heartbeat_ns.store(now_ns, std::memory_order_release);
    gate_set(record, open);
    return open;
}

} // namespace gpuinit::limit
