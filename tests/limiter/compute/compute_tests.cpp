// The compute cap end to end on simulated time: gpulimit_compute_load jobs run
// fixed-length kernels on the stand-in GPUs (real threads, real time), with
// libgpulimit.so preloaded and GPU_UTIL_PER_DEVICE set, and report the share
// of the device they got, measured on the stand-in's timeline after a
// warm-up (the controller's settling). Each test has its own stand-in
// devices (GPULIMIT_STANDIN_DIR) and its own group state.
//
// The first tests check the stand-in itself, without the interposer: a job
// alone gets the whole device; two jobs on one device take turns; devices
// are independent.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <gtest/gtest.h>
#include <map>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;

// The tolerance: each share within 5 points of its cap.
constexpr double kTolerance = 0.05;
// Timing of a capped job: warm-up (settling), then the measured stretch.
const std::vector<std::string> kTiming = {"warmup=2.5", "seconds=4"};

std::string temp_dir(const char* what) {
    std::string pattern = (fs::temp_directory_path() / (std::string(what) + "-XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) {
        ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
        return "";
    }
    return pattern;
}

struct Job {
    std::vector<std::string> args;          // key=value for gpulimit_compute_load
    std::map<std::string, std::string> env; // added to the test's environment
    pid_t pid = -1;
    int out = -1;
    int status = -1;
    std::map<std::string, double> result;

    double get(const char* key) const {
        auto it = result.find(key);
        return it == result.end() ? NAN : it->second;
    }
};

void start(Job& job) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry = *e;
        const std::string name = entry.substr(0, entry.find('='));
        if (job.env.count(name) == 0) {
            env_strings.push_back(entry);
        }
    }
    for (const auto& [name, value] : job.env) {
        env_strings.push_back(name + "=" + value);
    }
    std::vector<std::string> argv_strings = {GPULIMIT_COMPUTE_LOAD};
    argv_strings.insert(argv_strings.end(), job.args.begin(), job.args.end());
    std::vector<char*> argv;
    std::vector<char*> envp;
    argv.reserve(argv_strings.size() + 1);
    envp.reserve(env_strings.size() + 1);
    for (auto& a : argv_strings) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    for (auto& e : env_strings) {
        envp.push_back(e.data());
    }
    envp.push_back(nullptr);
    job.pid = fork();
    ASSERT_GE(job.pid, 0);
    if (job.pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execve(argv[0], argv.data(), envp.data());
        _exit(127);
    }
    close(fds[1]);
    job.out = fds[0];
}

void finish(Job& job) {
    std::string text;
    char buffer[512];
    ssize_t n = 0;
    while ((n = read(job.out, buffer, sizeof buffer)) > 0) {
        text.append(buffer, static_cast<size_t>(n));
    }
    close(job.out);
    waitpid(job.pid, &job.status, 0);
    std::istringstream words(text);
    std::string word;
    while (words >> word) {
        const size_t eq = word.find('=');
        if (eq != std::string::npos) {
            job.result[word.substr(0, eq)] = std::strtod(word.c_str() + eq + 1, nullptr);
        }
    }
    EXPECT_TRUE(WIFEXITED(job.status) && WEXITSTATUS(job.status) == 0)
        << "job " << job.pid << " status " << job.status << ", output: " << text;
    std::printf("job:");
    for (const auto& a : job.args) {
        std::printf(" %s", a.c_str());
    }
    for (const auto& [name, value] : job.env) {
        if (name.rfind("GPU_", 0) == 0) {
            std::printf(" %s=%s", name.c_str(), value.c_str());
        }
    }
    std::printf(" -> %s", text.c_str());
}

// Runs the jobs at once and waits for all.
void run_all(const std::vector<Job*>& jobs) {
    for (Job* j : jobs) {
        start(*j);
    }
    for (Job* j : jobs) {
        finish(*j);
    }
}

class Compute : public ::testing::Test {
  protected:
    void SetUp() override {
        standin_dir_ = temp_dir("gpulimit-compute-standin");
        state_dir_ = temp_dir("gpulimit-compute-state");
    }
    void TearDown() override {
        std::error_code ignored;
        fs::remove_all(standin_dir_, ignored);
        fs::remove_all(state_dir_, ignored);
    }
    // A job on the stand-in alone.
    Job plain(std::vector<std::string> args) const {
        Job j;
        j.args = std::move(args);
        j.env["GPULIMIT_STANDIN_DIR"] = standin_dir_;
        return j;
    }
    // A job through libgpulimit.so in `group`; cap 0 leaves
    // GPU_UTIL_PER_DEVICE unset (the limiter on, no compute cap).
    Job capped(const std::string& group, int cap, std::vector<std::string> args) const {
        Job j = plain(kTiming); // the job's own arguments come after and win
        j.args.insert(j.args.end(), args.begin(), args.end());
        j.env["LD_PRELOAD"] = GPULIMIT_LIBRARY;
        j.env["AMP_VGPU_ENABLE"] = "1";
        j.env["GPU_LIMIT_STATE_DIR"] = state_dir_;
        j.env["GPU_LIMIT_GROUP"] = group;
        if (cap != 0) {
            j.env["GPU_UTIL_PER_DEVICE"] = std::to_string(cap);
        }
        return j;
    }
    void expect_share(const Job& job, double cap) const {
        EXPECT_NEAR(job.get("share"), cap, kTolerance) << "cap " << cap;
    }
    void run_through_internal_proc_addresses(const std::vector<std::string>& apis);
    void run_cap(int cap, std::vector<std::string> args) {
        Job j = capped("cap" + std::to_string(cap), cap, std::move(args));
        run_all({&j});
        expect_share(j, cap / 100.0);
    }

    std::string standin_dir_;
    std::string state_dir_;
};

// ---- The stand-in alone ------------------------------------------------------------

TEST_F(Compute, StandinAloneAJobGetsTheWholeDevice) {
    Job j = plain({"warmup=0.3", "seconds=1.5"});
    run_all({&j});
    EXPECT_GE(j.get("share"), 0.85); // what the device is idle for is hand-off latency
    EXPECT_LE(j.get("share"), 1.0);
}

TEST_F(Compute, StandinAloneTwoJobsOnOneDeviceTakeTurns) {
    Job a = plain({"warmup=0.3", "seconds=2"});
    Job b = plain({"warmup=0.3", "seconds=2"});
    run_all({&a, &b});
    const double sum = a.get("share") + b.get("share");
    EXPECT_GE(sum, 0.8) << a.get("share") << " + " << b.get("share");
    EXPECT_LE(sum, 1.0 + 1e-3);                        // one kernel at a time
    EXPECT_NEAR(a.get("share"), b.get("share"), 0.25); // time slices alternate
}

TEST_F(Compute, StandinAloneDevicesAreIndependent) {
    Job a = plain({"device=0", "warmup=0.3", "seconds=1.5"});
    Job b = plain({"device=1", "warmup=0.3", "seconds=1.5"});
    run_all({&a, &b});
    EXPECT_GE(a.get("share"), 0.85);
    EXPECT_GE(b.get("share"), 0.85);
}

// ---- Through libgpulimit.so with GPU_UTIL_PER_DEVICE ---------------------------------

// A training-like loop: 2 ms kernels, a synchronization every 4.
TEST_F(Compute, Cap25) {
    run_cap(25, {"sync=4"});
}

TEST_F(Compute, Cap50) {
    run_cap(50, {"sync=4"});
}

TEST_F(Compute, Cap75) {
    run_cap(75, {"sync=4"});
}

// No synchronization at all: the stream's queue stays full (64 kernels,
// 128 ms of work that the gate cannot take back), so the share comes in
// bursts; over the window it must still hold. Such a program is busy in
// some of NVML's sample windows and idle in others: the driver once weighted
// each sample by the time since the process's previous one and held it to
// 0.24-0.32 (limit::SampleClock).
TEST_F(Compute, Cap50DeepQueue) {
    run_cap(50, {"sync=0", "depth=64", "seconds=8"});
}

// NVML's device samples as a real driver gave them once in a few seconds
// (580.159.04, an H100): an entry stamped about 2^64 us, then the last window
// again 0.5 ms later. The driver took 0.5 ms as the sample window (every
// sample then counted almost nothing) and the far-future stamp as the last
// sample seen (no sample after it ever came); the cap let go.
TEST_F(Compute, Cap50WithTheRealDriversSampleGlitch) {
    Job j = capped("glitch", 50, {"sync=4", "seconds=8"});
    j.env["GPULIMIT_STANDIN_NVML_SAMPLE_GLITCH"] = "1";
    run_all({&j});
    expect_share(j, 0.5);
}

// Two groups on one device at once get their caps, not an even split.
TEST_F(Compute, TwoGroupsAt30And70) {
    Job a = capped("thirty", 30, {"sync=4"});
    Job b = capped("seventy", 70, {"sync=4"});
    run_all({&a, &b});
    expect_share(a, 0.30);
    expect_share(b, 0.70);
}

// A captured graph of 5 kernels replayed in a loop.
TEST_F(Compute, GraphLaunchesAreCapped) {
    run_cap(40, {"api=graph", "graph=5", "sync=1"});
}

// cuLaunchKernelEx, cuLaunchCooperativeKernel and cuLaunchKernel_ptsz on the
// per-thread default stream, each job in its own group on its own device.
TEST_F(Compute, EveryLaunchPathIsCapped) {
    Job ex = capped("ex", 50, {"api=ex", "sync=4", "device=0"});
    Job coop = capped("coop", 50, {"api=coop", "sync=4", "device=1"});
    Job ptsz = capped("ptsz", 50, {"api=ptsz", "sync=4", "device=2"});
    const std::string devices = "GPU-11111111-2222-3333-4444-555555555555:17179869184:0000:3b:00.0,"
                                "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa:8589934592:0000:1a:00.0,"
                                "GPU-bbbbbbbb-cccc-dddd-eeee-ffffffffffff:8589934592:0000:5e:00.0";
    for (Job* j : {&ex, &coop, &ptsz}) {
        j->env["GPULIMIT_STANDIN_DEVICES"] = devices;
    }
    run_all({&ex, &coop, &ptsz});
    expect_share(ex, 0.50);
    expect_share(coop, 0.50);
    expect_share(ptsz, 0.50);
}

// The same launch paths reached as the CUDA runtime reaches them, through
// cuGetProcAddress, over a driver that answers internal pointers rather than
// its exports: libgpulimit wraps them by name, and the gate holds. Each job
// in its own group on its own device, at most three at once (as above).
void Compute::run_through_internal_proc_addresses(const std::vector<std::string>& apis) {
    std::string devices;
    for (size_t device = 0; device < apis.size(); ++device) {
        char entry[96];
        std::snprintf(entry, sizeof entry,
                      "%sGPU-%08zu-2222-3333-4444-555555555555:8589934592:0000:%02zx:00.0",
                      device == 0 ? "" : ",", device, 0x10 + device);
        devices += entry;
    }
    std::vector<Job> jobs;
    for (size_t device = 0; device < apis.size(); ++device) {
        const std::string& api = apis[device];
        jobs.push_back(capped("internal-" + api, 50,
                              {"api=" + api, "resolve=getproc", "sync=4", "graph=5",
                               "device=" + std::to_string(device)}));
        jobs.back().env["GPULIMIT_STANDIN_INTERNAL_PROCS"] = "1";
        jobs.back().env["GPULIMIT_STANDIN_DEVICES"] = devices;
    }
    std::vector<Job*> all;
    all.reserve(jobs.size());
    for (Job& j : jobs) {
        all.push_back(&j);
    }
    run_all(all);
    for (const Job& j : jobs) {
        expect_share(j, 0.50);
    }
}

TEST_F(Compute, KernelPtszAndGraphLaunchesAreCappedThroughInternalProcAddresses) {
    run_through_internal_proc_addresses({"kernel", "ptsz", "graph"});
}

TEST_F(Compute, ExAndCooperativeLaunchesAreCappedThroughInternalProcAddresses) {
    run_through_internal_proc_addresses({"ex", "coop"});
}

// While the gate holds the job's launches back (a launch waits tens of ms),
// a thread capturing a graph on another stream is never held: capture-time
// launches return at once.
TEST_F(Compute, ACapturingStreamIsNeverBlocked) {
    Job j = capped("capture", 20, {"sync=4", "capture=1"});
    run_all({&j});
    expect_share(j, 0.20);
    EXPECT_GE(j.get("max_launch_us"), 20'000) << "the gate never held a launch";
    EXPECT_GE(j.get("capture_launches"), 1000);
    EXPECT_LT(j.get("capture_max_us"), 5'000);
}

// A capped group on device 1 and an uncapped one on device 0 at once.
TEST_F(Compute, ACapOnDeviceOneLeavesDeviceZeroAlone) {
    Job capped_job = capped("capped", 30, {"sync=4", "device=1"});
    Job free_job = capped("free", 0, {"sync=4", "device=0"});
    run_all({&capped_job, &free_job});
    expect_share(capped_job, 0.30);
    EXPECT_GE(free_job.get("share"), 0.85); // the whole device, less hand-off latency
}

// One group working on both devices: each device is capped on its own (not
// a share of the sum, not device 0 only).
TEST_F(Compute, OneGroupOnTwoDevicesIsCappedPerDevice) {
    Job a = capped("both", 50, {"sync=4", "device=0"});
    Job b = capped("both", 50, {"sync=4", "device=1"});
    run_all({&a, &b});
    expect_share(a, 0.50);
    expect_share(b, 0.50);
}

// Two processes of one group on one device; the first (which drives the
// controller, having started first or won the lock) exits after 2.5 s and
// the other takes over. The new driver once read NVML's whole history of
// the group's samples as new: a second of debt, every launch held ~2 s and
// a share of 0.10-0.13 after the hand-over. Its window starts after the
// hand-over, where it has the group's whole cap.
TEST_F(Compute, ADriverThatExitsIsTakenOverWithoutAStall) {
    Job first = capped("handover", 50, {"sync=4", "warmup=0.5", "seconds=2"});
    Job second = capped("handover", 50, {"sync=4", "warmup=3.5", "seconds=3"});
    run_all({&first, &second});
    expect_share(second, 0.50);
    EXPECT_LT(second.get("max_launch_us"), 500'000) << "a launch was held across the hand-over";
}

} // namespace
