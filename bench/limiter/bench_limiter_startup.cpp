// Start-up cost libgpulimit.so adds to a process (library load, settings,
// device discovery, group registration in cuInit), timed by a driver:
//
//   bench_limiter_startup [N]   (default 200)
//
// Three configurations: no interposer, interposer preloaded but off, and on
// (AMP_VGPU_ENABLE=1, one group for all). Each runs twice: N processes one
// after another (each one's latency from spawn to the end of its cuInit:
// the cost per process) and N started together (the batch's wall time and
// worst latency: a lock convoy at registration would show here).
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace {

int64_t now_ns() {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

struct Result {
    std::vector<double> latency_us; // spawn -> end of cuInit, per process
    double wall_ms = 0;
    int failed = 0;
};

Result run(const std::vector<std::string>& env_strings, int count, bool together) {
    std::vector<char*> envp;
    for (const std::string& entry : env_strings) {
        envp.push_back(const_cast<char*>(entry.c_str()));
    }
    envp.push_back(nullptr);
    int fds[2];
    if (pipe(fds) != 0) {
        std::perror("pipe");
        std::exit(1);
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 3);
    char* argv[] = {const_cast<char*>(GPULIMIT_BENCH_CHILD), nullptr};

    Result result;
    std::map<pid_t, int64_t> spawned_at;
    auto collect = [&](int n) {
        for (int i = 0; i < n; ++i) {
            int64_t record[2];
            if (read(fds[0], record, sizeof(record)) != static_cast<ssize_t>(sizeof(record))) {
                ++result.failed;
                continue;
            }
            const auto it = spawned_at.find(static_cast<pid_t>(record[0]));
            if (record[0] < 0 || it == spawned_at.end()) {
                ++result.failed;
                continue;
            }
            result.latency_us.push_back(static_cast<double>(record[1] - it->second) / 1000.0);
        }
    };
    const int64_t begin = now_ns();
    for (int i = 0; i < count; ++i) {
        pid_t pid = 0;
        const int64_t at = now_ns();
        if (posix_spawn(&pid, GPULIMIT_BENCH_CHILD, &actions, nullptr, argv, envp.data()) != 0) {
            ++result.failed;
            continue;
        }
        spawned_at[pid] = at;
        if (!together) {
            collect(1);
            waitpid(pid, nullptr, 0);
        }
    }
    if (together) {
        collect(static_cast<int>(spawned_at.size()));
        for (const auto& entry : spawned_at) {
            waitpid(entry.first, nullptr, 0);
        }
    }
    result.wall_ms = static_cast<double>(now_ns() - begin) / 1e6;
    posix_spawn_file_actions_destroy(&actions);
    close(fds[0]);
    close(fds[1]);
    std::sort(result.latency_us.begin(), result.latency_us.end());
    return result;
}

double percentile(const std::vector<double>& sorted, double p) {
    if (sorted.empty()) {
        return 0;
    }
    return sorted[std::min(sorted.size() - 1,
                           static_cast<size_t>(p * static_cast<double>(sorted.size())))];
}

} // namespace

int main(int argc, char** argv) {
    const int count = argc > 1 ? std::atoi(argv[1]) : 200;
    const std::string state_dir =
        (std::filesystem::temp_directory_path() / ("gpulimit-startup-" + std::to_string(getpid())))
            .string();
    std::vector<std::string> base;
    for (char** entry = environ; *entry != nullptr; ++entry) {
        if (std::strncmp(*entry, "LD_PRELOAD=", 11) != 0 &&
            std::strncmp(*entry, "AMP_VGPU_ENABLE=", 16) != 0 &&
            std::strncmp(*entry, "LD_LIBRARY_PATH=", 16) != 0) {
            base.emplace_back(*entry);
        }
    }
    base.emplace_back(std::string("LD_LIBRARY_PATH=") + GPULIMIT_STANDIN_DIR);
    base.emplace_back("GPU_LIMIT_STATE_DIR=" + state_dir);
    base.emplace_back("GPU_MEM_PER_DEVICE=4294967296");

    struct Config {
        const char* name;
        std::vector<std::string> extra;
    };
    const std::string preload = std::string("LD_PRELOAD=") + GPULIMIT_LIBRARY;
    const Config configs[] = {
        {"no interposer", {}},
        {"interposer, off", {preload}},
        {"interposer, on", {preload, "AMP_VGPU_ENABLE=1"}},
    };
    std::printf("%d processes, spawn to end of cuInit (stand-in driver)\n", count);
    std::printf("%-18s %12s %12s %12s | %14s %12s %12s\n", "", "seq p50 us", "seq p90 us",
                "seq max us", "together wall", "p50 us", "max us");
    double baseline_p50 = 0;
    double baseline_wall = 0;
    for (const Config& config : configs) {
        std::vector<std::string> env = base;
        env.insert(env.end(), config.extra.begin(), config.extra.end());
        run(env, 5, false); // warm the page cache
        const Result one_by_one = run(env, count, false);
        const Result together = run(env, count, true);
        std::printf("%-18s %12.0f %12.0f %12.0f | %11.1f ms %12.0f %12.0f%s\n", config.name,
                    percentile(one_by_one.latency_us, 0.5), percentile(one_by_one.latency_us, 0.9),
                    percentile(one_by_one.latency_us, 1.0), together.wall_ms,
                    percentile(together.latency_us, 0.5), percentile(together.latency_us, 1.0),
                    one_by_one.failed + together.failed != 0 ? "  (some failed)" : "");
        if (config.extra.empty()) {
            baseline_p50 = percentile(one_by_one.latency_us, 0.5);
            baseline_wall = together.wall_ms;
        } else {
            std::printf("%-18s added per process: %.0f us (p50, one by one); together: %.1f ms "
                        "more for %d processes (%.0f us each)\n",
                        "", percentile(one_by_one.latency_us, 0.5) - baseline_p50,
                        together.wall_ms - baseline_wall, count,
                        (together.wall_ms - baseline_wall) * 1000.0 / count);
        }
    }
    std::error_code ignored;
    std::filesystem::remove_all(state_dir, ignored);
    return 0;
}
