// The compute cap (GPU_UTIL_PER_DEVICE): a gate on kernel launches per device
// and group, and the controller that opens and closes it from measured busy
// time.
//
// - The gate is ComputeRecord::gate in the group's shared state file. A
//   launch passes with one acquire load when it is open; when it is closed
//   the launching thread sleeps on the word with a shared futex (no spinning,
//   no sleep loops) until the driver opens it.
// - The controller is an integral controller on GPU time: the group earns
//   cap x elapsed time, spends the busy time measured for its processes
//   (NVML's per-process samples, summed), and the gate is open while the
//   balance is positive. The balance is bounded above (no hoarding while
//   idle) and below (a burst of queued work is paid back, not forever). Work
//   already queued on a stream still runs while the gate is closed; the
//   balance charges it when it is measured, so the share holds over a window
//   of a few control periods.
// - Measurements lag: NVML reports a process's busy time in samples of 1/6 s
//   to 1 s, after the fact. A plain integral controller then keeps the gate
//   open for a whole sample period before it sees the work, and the share
//   swings by a sample period's worth around the cap. The controller therefore
//   also predicts (a Smith predictor): each control period the gate was open
//   is charged at once, provisionally, at the utilization the group has shown
//   while open; a measurement replaces the oldest provisional charges, and a
//   provisional charge no measurement claimed within a second lapses. The
//   integral of measured time is what decides in the long run; the
//   prediction only removes the lag's swing.
// - One driver per device and group at a time: the host daemon when it runs
//   (ComputeRecord::driver == 2), else one process of the group elected by an
//   OFD lock on a byte of the state file (in-process sampling). A driver that
//   dies lets go of its lock; a stale heartbeat opens the gate for waiters.
//
// Freestanding (no heap, no exceptions): used by libgpulimit.so and by the
// daemon in `gpu-limit`.
#pragma once

#include "gpuinit/limit/group_state.hpp"

#include <cstdint>

namespace gpuinit::limit {

// 25 ms between steps: the gate opens and closes in these quanta, so one
// quantum is 0.025 of a 1-s window's share (50 ms made a 1-s window swing by
// 0.05, the whole tolerance).
inline constexpr uint64_t kControlPeriodNs = 25'000'000;
// A driver whose heartbeat is older than this is gone (or stopped): the gate
// counts as open. Ten periods: a driver thread delayed by a busy host or a
// slow NVML call must not open every gate.
inline constexpr uint64_t kStaleHeartbeatNs = 10 * kControlPeriodNs;
// A sleeping launch wakes at least this often to look at the heartbeat.
inline constexpr uint64_t kGateSleepNs = 2 * kControlPeriodNs;

// The controller, pure: no clock, no I/O, so tests drive it on simulated time.
class ShareController {
  public:
    // cap_percent: 1..95 (GPU_UTIL_PER_DEVICE); anything else disables.
    void reset(uint32_t cap_percent, uint64_t now_ns);
    // Takes over a balance another driver left (ComputeRecord::tokens_ns),
    // bounded like its own: the group's debt or credit does not change hands
    // with the driver.
    void resume(int64_t balance_ns);
    // One step at now_ns: busy_ns is the group's busy time measured since the
    // previous step (summed over its processes). Measurements arrive in lumps
    // (a sample period's worth at once), so a step may carry more busy time
    // than its own elapsed time: it is clamped to the elapsed time plus one
    // second (the longest NVML sample period), not to the elapsed time.
    // Returns whether the gate should be open until the next step. Disabled:
    // always open.
    bool step(uint64_t now_ns, uint64_t busy_ns);
    bool enabled() const { return cap_ppm_ != 0; }
    // The predicted balance (measured balance minus provisional charges):
    // the gate is open while it is positive.
    int64_t balance_ns() const { return balance_ns_ - provisional_ns_; }
    // The measured balance alone (earned minus measured): what a driver
    // taking over resumes, since it measures for itself the samples still to
    // come, which the predictions stand for.
    int64_t measured_balance_ns() const { return balance_ns_; }
    // The measured share over the last second of steps, parts per million.
    uint64_t share_ppm() const;

    // Bounds of the predicted balance: above, two control periods' worth of
    // the cap (an idle group hoards no more); below, two seconds of debt.
    static constexpr uint64_t kCeilingPeriods = 2;
    static constexpr int64_t kFloorNs = 2'000'000'000;
    // A provisional charge no measurement claimed within this lapses.
    static constexpr uint64_t kPredictionHorizonNs = 1'000'000'000;

  private:
    static constexpr int kRing = 128;            // steps kept (>= 2 s at 25 ms)
    static constexpr int kUtilizationSteps = 80; // 2 s: the utilization while open
    static constexpr int kShareSteps = 40;       // 1 s: share_ppm
    struct History {
        uint64_t elapsed_ns;
        uint64_t busy_ns;
        uint64_t open_ns;
    };
    struct Provisional {
        uint64_t at_ns;
        int64_t amount_ns;
    };
    uint64_t utilization_ppm() const;
    void add_provisional(uint64_t now_ns, int64_t amount_ns);

    uint64_t cap_ppm_ = 0;
    uint64_t last_ns_ = 0;
    int64_t balance_ns_ = 0;     // earned minus measured, bounded
    int64_t provisional_ns_ = 0; // sum of the provisional ring
    bool open_ = true;
    History history_[kRing] = {};
    int history_next_ = 0;
    int history_count_ = 0;
    Provisional provisional_[kRing] = {};
    int provisional_first_ = 0;
    int provisional_count_ = 0;
};

// NVML's per-process utilization samples turned into busy time, for one
// device. A sample {pid, timeStamp, smUtil} says that in the sample window
// ending at timeStamp a kernel of pid ran smUtil percent of the window. NVML
// reports a process only for windows it was busy in, so the time since the
// process's previous sample is not the window: after an idle window it is
// two windows, and weighting by it counted a process that runs every other
// window twice over (a program that never synchronizes was held to half its
// cap). The window is learnt instead, as the shortest of the last kGaps gaps
// between:
//   - the device's own utilization samples (nvmlDeviceGetSamples), one per
//     window whether busy or idle: exact, and once seen the only source;
//   - else two samples of one process (any process on the device): a skipped
//     window makes a gap too long, never too short, so the shortest is the
//     window once some process was busy in two windows in a row.
// Until then, NVML's most common window, 1/6 s. Pure: tests feed it samples.
// Whether an NVML sample's timestamp (CLOCK_REALTIME, microseconds) can be a
// sample at all at now_us: not later than the longest window from now. The
// same real driver returned, once, a device sample stamped about 2^64 us:
// taken as the last one seen, it would make every later query ask for
// samples after it, get none, and measure nothing for good.
inline bool plausible_sample_time(uint64_t timestamp_us, uint64_t now_us) {
    return timestamp_us <= now_us + 1'000'000;
}

class SampleClock {
  public:
    // The busy time one new sample stands for; 0 for a sample already seen
    // (a timestamp not after the process's previous one). Feed it every
    // sample of the device, the group's or not: other processes' gaps teach
    // the window too.
    uint64_t busy_ns(uint32_t pid, uint64_t timestamp_us, uint32_t percent);
    // The timestamp of one of the device's own utilization samples.
    void device_sample(uint64_t timestamp_us);
    // The sample window as learnt so far, in microseconds.
    uint64_t window_us() const;

    static constexpr uint64_t kDefaultWindowUs = 1'000'000 / 6;
    static constexpr uint64_t kMaxWindowUs = 1'000'000; // NVML's longest
    // NVML's shortest sample period is 1/6 s (nvml.h); a gap much shorter
    // than that is not a window and teaches nothing. A real driver
    // (580.159.04, an H100, 200 ms windows) returned two device samples
    // 272 us apart once in a few seconds: taken as the window, it made every
    // later sample count 272 us of busy time, and the cap let go.
    static constexpr uint64_t kMinWindowUs = 150'000;
    static constexpr int kPids = 64;
    static constexpr int kGaps = 32;

  private:
    struct PidStamp {
        uint32_t pid;
        uint64_t timestamp_us;
    };
    void learn_gap(uint64_t gap_us);

    PidStamp pids_[kPids] = {};
    int pid_next_ = 0;
    uint64_t gaps_[kGaps] = {};
    int gap_next_ = 0;
    int gap_count_ = 0;
    uint64_t device_last_us_ = 0;
    bool device_gaps_ = false; // the gaps are the device's own
};

// Gate operations on a record in shared memory.
// Opens (waking every sleeper) or closes the gate.
void gate_set(ComputeRecord& record, bool open);
// The launch path: returns at once when the gate is open, else sleeps until
// it opens. A sleep is bounded (kGateSleepNs) and the heartbeat is checked
// after each one: with no live driver the gate counts as open, so a dead
// controller never hangs a launch. Counts launches_held and waiters.
void gate_pass(ComputeRecord& record);
// Whether a driver stepped the record within kStaleHeartbeatNs of now_ns
// (CLOCK_MONOTONIC).
bool heartbeat_fresh(const ComputeRecord& record, uint64_t now_ns);
// CLOCK_MONOTONIC in ns (the heartbeat's clock).
uint64_t monotonic_ns();

// One driver step on a record, for the in-process driver and the daemon
// alike: steps the controller with the group's busy time since the last
// step, then publishes the figures (tokens, cumulative busy, share, closed
// time, heartbeat, driver) and sets the gate. `driver` is 1 (in-process) or
// 2 (daemon). Returns whether the gate is open.
bool drive_step(ComputeRecord& record, ShareController& controller, uint64_t now_ns,
                uint64_t busy_ns, uint32_t driver);

} // namespace gpuinit::limit
