// The compute cap (libgpuinit/limit_core/src/compute.cpp): the controller on
// simulated time against a simulated device, and the gate between processes
// sharing a state file.
//
// The simulated device: each group runs a program that launches fixed-length
// kernels into its stream while its gate is open and it has fewer than
// `depth` kernels outstanding (depth 1-2: a program that synchronizes; 64: a
// deep launch queue); the device runs all streams' kernels one at a time in
// launch order (one FIFO, as a GPU time-slices contexts). "NVML" reports each
// group's busy time in samples of 1/6 s, in whole percent, as the real one
// does; the driver polls it every other control period and steps the
// controller every period. The delivered share is the group's busy time over
// the run; the settling time is when the share over a sliding 1-s window
// enters ±0.05 of the cap for good.
#include "gpuinit/limit/compute.hpp"
#include "gpuinit/limit/group_state.hpp"
#include "temp_dir.hpp"

#include <cmath>
#include <cstdio>
#include <deque>
#include <gtest/gtest.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace gpuinit::limit {

using gpuinit::testing::TempDir;

namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kSecond = 1'000'000'000;

struct GroupSpec {
    uint32_t cap_percent;
    int depth;
};

struct GroupResult {
    double share = 0;      // over the whole run
    double settle_s = 0;   // time until the 1-s windowed share stays within ±0.05
    double window_min = 1; // 1-s windowed share after 5 s
    double window_max = 0;
};

std::vector<GroupResult> simulate(const std::vector<GroupSpec>& specs,
                                  uint64_t run_ns = 20 * kSecond, uint64_t kernel_ns = 2 * kMs) {
    constexpr uint64_t kTick = 100'000; // 0.1 ms
    constexpr uint64_t kSample = kSecond / 6;
    constexpr uint64_t kPollEvery = 2; // NVML every other control period
    const size_t groups = specs.size();

    struct Group {
        ShareController controller;
        bool open = true;
        int outstanding = 0;
        uint64_t busy = 0;        // true busy time
        uint64_t sample_busy = 0; // since the last NVML sample
        uint64_t reported = 0;    // sampled, not yet polled by the driver
        std::vector<uint64_t> busy_at_step;
    };
    std::vector<Group> state(groups);
    for (size_t g = 0; g < groups; ++g) {
        state[g].controller.reset(specs[g].cap_percent, 0);
    }
    struct Kernel {
        size_t group;
        uint64_t left;
    };
    std::deque<Kernel> queue;
    auto launch = [&](uint64_t tick_index) {
        for (size_t k = 0; k < groups; ++k) {
            size_t g = (k + tick_index) % groups; // no group always first
            while (state[g].open && state[g].outstanding < specs[g].depth) {
                queue.push_back({g, kernel_ns});
                ++state[g].outstanding;
            }
        }
    };
    uint64_t next_sample = kSample;
    uint64_t next_step = kControlPeriodNs;
    uint64_t steps = 0;
    for (uint64_t now = 0; now < run_ns; now += kTick) {
        launch(now / kTick);
        uint64_t left = kTick;
        while (left > 0 && !queue.empty()) {
            Kernel& head = queue.front();
            uint64_t ran = std::min(left, head.left);
            head.left -= ran;
            left -= ran;
            state[head.group].busy += ran;
            state[head.group].sample_busy += ran;
            if (head.left == 0) {
                --state[head.group].outstanding;
                queue.pop_front();
                launch(now / kTick); // a synchronizing program relaunches at once
            }
        }
        const uint64_t end = now + kTick;
        if (end >= next_sample) {
            for (Group& group : state) {
                uint64_t percent = group.sample_busy * 100 / kSample; // NVML's whole percent
                group.reported += percent * kSample / 100;
                group.sample_busy = 0;
            }
            next_sample += kSample;
        }
        if (end >= next_step) {
            ++steps;
            const bool poll = steps % kPollEvery == 0;
            for (Group& group : state) {
                uint64_t busy = poll ? group.reported : 0;
                if (poll) {
                    group.reported = 0;
                }
                group.open = group.controller.step(end, busy);
                group.busy_at_step.push_back(group.busy);
            }
            next_step += kControlPeriodNs;
        }
    }
    std::vector<GroupResult> results(groups);
    const size_t window = kSecond / kControlPeriodNs;
    for (size_t g = 0; g < groups; ++g) {
        GroupResult& result = results[g];
        const std::vector<uint64_t>& at = state[g].busy_at_step;
        result.share = static_cast<double>(state[g].busy) / static_cast<double>(run_ns);
        const double cap = specs[g].cap_percent / 100.0;
        for (size_t i = window; i < at.size(); ++i) {
            double share = static_cast<double>(at[i] - at[i - window]) / kSecond;
            double t = static_cast<double>((i + 1) * kControlPeriodNs) / kSecond;
            if (std::fabs(share - cap) > 0.05) {
                result.settle_s = t;
            }
            if (t >= 5) {
                result.window_min = std::min(result.window_min, share);
                result.window_max = std::max(result.window_max, share);
            }
        }
        if (result.settle_s == 0) {
            result.settle_s = 1; // in the band from the first full window on
        }
    }
    return results;
}

std::string describe(const GroupSpec& spec, const GroupResult& result) {
    char line[200];
    std::snprintf(line, sizeof line,
                  "cap %u%% depth %d: share %.3f, settled after %.2f s, 1-s window after 5 s "
                  "%.3f..%.3f",
                  spec.cap_percent, spec.depth, result.share, result.settle_s, result.window_min,
                  result.window_max);
    return line;
}

void report(const std::string& key, const GroupSpec& spec, const GroupResult& result) {
    std::string line = describe(spec, result);
    std::printf("[ compute  ] %s\n", line.c_str());
    ::testing::Test::RecordProperty(key, line);
}

} // namespace

TEST(Compute, ControllerDisabledOutsideOneToNinetyFive) {
    for (uint32_t cap : {0u, 96u, 100u, 1000u}) {
        ShareController controller;
        controller.reset(cap, 0);
        EXPECT_FALSE(controller.enabled()) << cap;
        EXPECT_TRUE(controller.step(kControlPeriodNs, 10 * kSecond)) << cap;
    }
    ShareController controller;
    controller.reset(95, 0);
    EXPECT_TRUE(controller.enabled());
}

TEST(Compute, ControllerClosesWhenOverAndHoardsNothingWhileIdle) {
    ShareController controller;
    controller.reset(50, 0);
    uint64_t now = 0;
    // Idle for ten seconds: the balance stops at two periods' worth of the cap.
    for (int i = 0; i < 400; ++i) {
        now += kControlPeriodNs;
        EXPECT_TRUE(controller.step(now, 0));
    }
    EXPECT_LE(controller.balance_ns(),
              static_cast<int64_t>(ShareController::kCeilingPeriods * kControlPeriodNs / 2));
    EXPECT_GT(controller.balance_ns(), 0);
    // A lump of measured work far over the cap closes the gate, and the debt
    // is bounded: it opens again within the floor's time at the cap.
    // One step's lump is clamped to its elapsed time plus a second (the
    // longest NVML sample); five of them pile up more than the floor.
    for (int i = 0; i < 5; ++i) {
        now += kControlPeriodNs;
        EXPECT_FALSE(controller.step(now, 100 * kSecond));
    }
    EXPECT_GE(controller.balance_ns(), -ShareController::kFloorNs - int64_t(kSecond));
    EXPECT_LE(controller.balance_ns(), -ShareController::kFloorNs + int64_t(kSecond / 2));
    int closed_steps = 0;
    while (!controller.step(now += kControlPeriodNs, 0)) {
        ++closed_steps;
        ASSERT_LT(closed_steps, 1000);
    }
    // 2 s of debt (plus what the prediction holds) at 50%: about 4 s closed.
    EXPECT_GE(closed_steps * kControlPeriodNs, 3 * kSecond);
    EXPECT_LE(closed_steps * kControlPeriodNs, 5 * kSecond);
}

// A driver taking over carries the balance the previous one published,
// bounded: its debt is neither forgiven nor grown, its credit not hoarded.
TEST(Compute, ControllerResumesAPublishedBalanceWithinItsBounds) {
    ShareController controller;
    controller.reset(50, 0);
    controller.resume(-300'000'000);
    EXPECT_EQ(controller.balance_ns(), -300'000'000);
    EXPECT_FALSE(controller.step(kControlPeriodNs, 0)); // still in debt
    controller.resume(-50'000'000'000);
    EXPECT_EQ(controller.balance_ns(), -ShareController::kFloorNs);
    controller.resume(50'000'000'000);
    EXPECT_EQ(controller.balance_ns(),
              static_cast<int64_t>(ShareController::kCeilingPeriods * kControlPeriodNs / 2));
    ShareController disabled;
    disabled.reset(0, 0);
    disabled.resume(-300'000'000);
    EXPECT_TRUE(disabled.step(kControlPeriodNs, 0));
}

TEST(Compute, ControllerMeasuredShareFollowsBusyTime) {
    ShareController controller;
    controller.reset(50, 0);
    uint64_t now = 0;
    for (int i = 0; i < 80; ++i) {
        now += kControlPeriodNs;
        controller.step(now, kControlPeriodNs / 4);
    }
    EXPECT_NEAR(static_cast<double>(controller.share_ppm()), 250'000.0, 1000.0);
}

// One group alone on the device at 25, 50 and 75%, with a program that
// synchronizes after each kernel (depth 1), one that keeps two in flight,
// and one with a deep launch queue (64 x 2 ms = 128 ms queued).
TEST(Compute, SimulatedShareHoldsTheCap) {
    for (int depth : {1, 2, 64}) {
        for (uint32_t cap : {25u, 50u, 75u}) {
            GroupSpec spec{cap, depth};
            GroupResult result = simulate({spec})[0];
            report("cap" + std::to_string(cap) + "_depth" + std::to_string(depth), spec, result);
            EXPECT_NEAR(result.share, cap / 100.0, 0.05) << describe(spec, result);
            if (depth <= 2) {
                // A program that synchronizes: the 1-s share is in the band
                // within a few seconds and stays there.
                EXPECT_LE(result.settle_s, 3.0) << describe(spec, result);
            }
            // A deep queue bursts: each opening releases at least the queue
            // (128 ms) of work, so a 1-s window holds one burst more or
            // less; the share over the run still holds (above).
        }
    }
}

// Two groups at 30 and 70% on one device: the device serializes their
// kernels, and each gets its cap.
TEST(Compute, SimulatedTwoGroupsSplitTheDevice) {
    for (int depth : {1, 2, 64}) {
        std::vector<GroupSpec> specs{{30, depth}, {70, depth}};
        std::vector<GroupResult> results = simulate(specs);
        for (size_t g = 0; g < specs.size(); ++g) {
            report("pair_cap" + std::to_string(specs[g].cap_percent) + "_depth" +
                       std::to_string(depth),
                   specs[g], results[g]);
            EXPECT_NEAR(results[g].share, specs[g].cap_percent / 100.0, 0.05)
                << describe(specs[g], results[g]);
            if (depth <= 2) {
                EXPECT_LE(results[g].settle_s, 3.0) << describe(specs[g], results[g]);
            }
        }
    }
}

// Longer kernels (10 ms) than the NVML sample's granularity: still the cap.
TEST(Compute, SimulatedLongerKernels) {
    for (uint32_t cap : {25u, 75u}) {
        GroupSpec spec{cap, 1};
        GroupResult result = simulate({spec}, 20 * kSecond, 10 * kMs)[0];
        report("cap" + std::to_string(cap) + "_kernel10ms", spec, result);
        EXPECT_NEAR(result.share, cap / 100.0, 0.05) << describe(spec, result);
    }
}

// NVML reports a process only for windows it was busy in. A process busy
// 60% of every other 1/6-s window ran 0.1 s per two windows: weighting each
// sample by the time since the process's previous one (two windows) counted
// it twice over, and the controller held such a program (a full launch
// queue, bursts between long closed stretches) to half its cap.
TEST(Compute, SampleClockCountsTheWindowNotTheGapSinceTheLastSample) {
    constexpr uint64_t kWindowUs = 1'000'000 / 6;
    constexpr uint64_t kStartUs = 1'000'000'000;
    SampleClock clock;
    uint64_t counted = 0;
    uint64_t truth = 0;
    for (uint64_t window = 1; window <= 60; ++window) {
        // Another process, busy in every window, and the device's own
        // samples: both show the window.
        clock.busy_ns(7, kStartUs + window * kWindowUs, 10);
        if (window % 2 == 0) {
            continue; // process 42 idle: no sample
        }
        counted += clock.busy_ns(42, kStartUs + window * kWindowUs, 60);
        truth += kWindowUs * 1000 * 60 / 100;
    }
    EXPECT_EQ(clock.window_us(), kWindowUs);
    EXPECT_EQ(counted, truth);
}

// Per-process gaps alone cannot tell a skipped window from a long one; the
// device's own samples (one per window, busy or idle) can, and win.
TEST(Compute, SampleClockTakesTheWindowFromDeviceSamples) {
    constexpr uint64_t kWindowUs = 1'000'000 / 6;
    constexpr uint64_t kStartUs = 1'000'000'000;
    SampleClock clock;
    clock.busy_ns(42, kStartUs + kWindowUs, 60);
    clock.busy_ns(42, kStartUs + 3 * kWindowUs, 60);
    EXPECT_EQ(clock.window_us(), 2 * kWindowUs); // all it has seen
    clock.device_sample(kStartUs + 3 * kWindowUs);
    clock.device_sample(kStartUs + 4 * kWindowUs);
    EXPECT_EQ(clock.window_us(), kWindowUs);
    EXPECT_EQ(clock.busy_ns(42, kStartUs + 6 * kWindowUs, 60), kWindowUs * 1000 * 60 / 100);
    // Device samples rule from now on: short per-process gaps (a clock
    // step) do not shrink it...
    clock.busy_ns(42, kStartUs + 6 * kWindowUs + 10, 60);
    EXPECT_EQ(clock.window_us(), kWindowUs);
    // ...and a device that samples once a second is learnt from them too,
    // the same timestamp twice (a repeated read) teaching nothing.
    clock.device_sample(kStartUs + 10'000'000);
    clock.device_sample(kStartUs + 10'000'000);
    clock.device_sample(kStartUs + 11'000'000);
    clock.device_sample(kStartUs + 12'000'000);
    EXPECT_EQ(clock.window_us(), kWindowUs); // the shortest of the recent gaps
    for (int second = 13; second < 13 + SampleClock::kGaps; ++second) {
        clock.device_sample(kStartUs + static_cast<uint64_t>(second) * 1'000'000);
    }
    EXPECT_EQ(clock.window_us(), 1'000'000u);
}

// As a real driver showed it (580.159.04 on an H100, the acceptance run's
// compute trace): device samples every 200 ms, give or take 2 ms, and once
// two of them 272 us apart. The short gap used to become the window, every
// later sample of a busy process then counted 272 us, and a 50% cap let the
// process run at 99%.
TEST(Compute, SampleClockIgnoresAGapNoWindowCouldBe) {
    constexpr uint64_t kStartUs = 1'000'000'000;
    SampleClock clock;
    uint64_t t = kStartUs;
    const uint64_t jitter[] = {199'998, 199'867, 201'428, 198'509, 200'066, 200'280};
    for (int i = 0; i < 24; ++i) {
        t += jitter[i % 6];
        clock.device_sample(t);
        clock.busy_ns(42, t, 99);
    }
    EXPECT_EQ(clock.window_us(), 198'509u);
    clock.device_sample(t + 272);
    EXPECT_EQ(clock.window_us(), 198'509u);
    t += 200'000;
    clock.device_sample(t);
    EXPECT_EQ(clock.busy_ns(42, t, 99), uint64_t{198'509'000} * 99 / 100);
    // Per-process gaps teach nothing that short either.
    SampleClock fresh;
    fresh.busy_ns(7, kStartUs, 50);
    fresh.busy_ns(7, kStartUs + 300, 50);
    EXPECT_EQ(fresh.window_us(), SampleClock::kDefaultWindowUs);
}

TEST(Compute, SampleClockLearnsLongWindowsAndIgnoresSamplesSeen) {
    SampleClock clock;
    // A GPU that samples once a second: the first sample counts the default
    // window, later ones the learnt second.
    EXPECT_EQ(clock.busy_ns(5, 10'000'000, 50), SampleClock::kDefaultWindowUs * 1000 / 2);
    EXPECT_EQ(clock.busy_ns(5, 11'000'000, 50), 500'000'000u);
    EXPECT_EQ(clock.window_us(), 1'000'000u);
    EXPECT_EQ(clock.busy_ns(5, 11'000'000, 50), 0u); // the same sample again
    EXPECT_EQ(clock.busy_ns(5, 10'500'000, 50), 0u); // an older one
    // A gap beyond NVML's longest window counts one window, not the gap.
    EXPECT_EQ(clock.busy_ns(5, 20'000'000, 100), 1'000'000'000u);
    // A hostile utilization above 100% counts as 100%.
    EXPECT_EQ(clock.busy_ns(5, 21'000'000, 250), 1'000'000'000u);
}

namespace {

// A group state with one device whose compute record the test drives.
struct SharedRecord {
    TempDir dir;
    GroupState state;
    ComputeRecord* record = nullptr;

    void open() {
        Problem problem;
        ASSERT_TRUE(state.open(dir.path().c_str(), "g", problem)) << problem.text;
        int device = state.attach_device("GPU-aaaaaaaa-1111-2222-3333-444444444444", 1000, 4096, 50,
                                         problem);
        ASSERT_EQ(device, 0) << problem.text;
        record = state.compute(device);
        ASSERT_NE(record, nullptr);
    }
};

// In a child: opens the same state file (its own mapping) and passes the
// gate; writes one byte to `done` when through.
pid_t pass_in_child(const std::string& dir, int done) {
    pid_t pid = ::fork();
    if (pid == 0) {
        GroupState state;
        Problem problem;
        if (!state.open(dir.c_str(), "g", problem)) {
            ::_exit(2);
        }
        ComputeRecord* record = state.compute(0);
        if (record == nullptr) {
            ::_exit(3);
        }
        gate_pass(*record);
        char byte = 1;
        ::_exit(::write(done, &byte, 1) == 1 ? 0 : 4);
    }
    return pid;
}

bool readable_within(int fd, int timeout_ms) {
    fd_set set;
    FD_ZERO(&set);
    FD_SET(fd, &set);
    timeval timeout{timeout_ms / 1000, (timeout_ms % 1000) * 1000L};
    if (::select(fd + 1, &set, nullptr, nullptr, &timeout) != 1) {
        return false;
    }
    char byte = 0;
    return ::read(fd, &byte, 1) == 1; // consumed: the next child's byte is its own
}

} // namespace

TEST(Compute, GateBlocksAnotherProcessUntilOpened) {
    SharedRecord shared;
    ASSERT_NO_FATAL_FAILURE(shared.open());
    ASSERT_NE(shared.record, nullptr);
    ComputeRecord& record = *shared.record;
    EXPECT_EQ(record.cap_percent.load(), 50u);
    // Open: passes at once, counts nothing.
    gate_pass(record);
    EXPECT_EQ(record.launches_held.load(), 0u);

    // Closed by a live driver: the child waits.
    record.heartbeat_ns.store(monotonic_ns());
    gate_set(record, false);
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    pid_t child = pass_in_child(shared.dir.path(), pipe_fds[1]);
    // Keep the heartbeat fresh while the child should be held.
    for (int i = 0; i < 20; ++i) {
        record.heartbeat_ns.store(monotonic_ns());
        EXPECT_FALSE(readable_within(pipe_fds[0], 20)) << "passed a closed gate";
    }
    EXPECT_EQ(record.waiters.load(), 1u);
    EXPECT_EQ(record.launches_held.load(), 1u);
    // Opening lets it through.
    record.heartbeat_ns.store(monotonic_ns());
    gate_set(record, true);
    EXPECT_TRUE(readable_within(pipe_fds[0], 2000)) << "not woken";
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_EQ(record.waiters.load(), 0u);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
}

TEST(Compute, StaleHeartbeatLetsLaunchesThrough) {
    SharedRecord shared;
    ASSERT_NO_FATAL_FAILURE(shared.open());
    ASSERT_NE(shared.record, nullptr);
    ComputeRecord& record = *shared.record;
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);

    // Closed, and no driver ever stepped: open in effect.
    gate_set(record, false);
    record.heartbeat_ns.store(0);
    pid_t child = pass_in_child(shared.dir.path(), pipe_fds[1]);
    EXPECT_TRUE(readable_within(pipe_fds[0], 1000));
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

    // Closed by a driver that then stops: held while the beat is fresh, let
    // through once it is stale, with the gate still closed.
    record.heartbeat_ns.store(monotonic_ns());
    uint64_t beat = monotonic_ns();
    child = pass_in_child(shared.dir.path(), pipe_fds[1]);
    EXPECT_FALSE(readable_within(pipe_fds[0], static_cast<int>(kStaleHeartbeatNs / kMs / 2)));
    EXPECT_TRUE(readable_within(pipe_fds[0], 3000)) << "held past a stale heartbeat";
    EXPECT_GE(monotonic_ns() - beat, kStaleHeartbeatNs);
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_EQ(record.gate.load(), 1u);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
}

TEST(Compute, DriveStepPublishesAndElectionExcludes) {
    SharedRecord shared;
    ASSERT_NO_FATAL_FAILURE(shared.open());
    ASSERT_NE(shared.record, nullptr);
    ComputeRecord& record = *shared.record;
    ShareController controller;
    uint64_t now = monotonic_ns();
    controller.reset(50, now);
    EXPECT_FALSE(drive_step(record, controller, now + kControlPeriodNs, 10 * kSecond, 1));
    EXPECT_EQ(record.gate.load(), 1u);
    EXPECT_EQ(record.driver.load(), 1u);
    EXPECT_EQ(record.heartbeat_ns.load(), now + kControlPeriodNs);
    EXPECT_EQ(record.busy_ns.load(), 10 * kSecond);
    EXPECT_LT(record.tokens_ns.load(), 0);

    // One controller per device: another description cannot take the byte
    // while this one holds it, and can once it is released; the daemon byte
    // is seen as held from the other side.
    ASSERT_TRUE(shared.state.try_controller_lock(0));
    ASSERT_TRUE(shared.state.try_daemon_lock());
    GroupState other;
    Problem problem;
    ASSERT_TRUE(other.open(shared.dir.path().c_str(), "g", problem)) << problem.text;
    EXPECT_FALSE(other.try_controller_lock(0));
    EXPECT_TRUE(other.try_controller_lock(1)); // another device's byte
    EXPECT_TRUE(other.daemon_lock_held());
    EXPECT_FALSE(shared.state.daemon_lock_held()); // our own is not "another's"
    shared.state.release_controller_lock(0);
    shared.state.release_daemon_lock();
    EXPECT_TRUE(other.try_controller_lock(0));
    EXPECT_FALSE(other.daemon_lock_held());
}

TEST(Compute, OneComputeCapPerDeviceAndGroup) {
    TempDir dir;
    GroupState state;
    Problem problem;
    ASSERT_TRUE(state.open(dir.path().c_str(), "g", problem)) << problem.text;
    const char* uuid = "GPU-aaaaaaaa-1111-2222-3333-444444444444";
    ASSERT_EQ(state.attach_device(uuid, 1000, 4096, 30, problem), 0) << problem.text;
    EXPECT_EQ(state.attach_device(uuid, 1000, 4096, 30, problem), 0);
    EXPECT_TRUE(state.any_compute_cap());
    Problem mismatch;
    EXPECT_EQ(state.attach_device(uuid, 1000, 4096, 70, mismatch), -1);
    EXPECT_NE(std::string(mismatch.text).find("compute cap of 30%"), std::string::npos)
        << mismatch.text;
    EXPECT_EQ(state.attach_device(uuid, 1000, 4096, mismatch), -1) << "none is a cap too";
    ASSERT_EQ(state.attach_device("GPU-bbbbbbbb-1111-2222-3333-444444444444", 1000, 4096, problem),
              1);
    EXPECT_EQ(state.compute(1)->cap_percent.load(), 0u);
    EXPECT_EQ(state.compute(2), nullptr);

    TempDir plain;
    GroupState none;
    ASSERT_TRUE(none.open(plain.path().c_str(), "g", problem)) << problem.text;
    ASSERT_EQ(none.attach_device(uuid, 1000, 4096, problem), 0);
    EXPECT_FALSE(none.any_compute_cap());
}

} // namespace gpuinit::limit
