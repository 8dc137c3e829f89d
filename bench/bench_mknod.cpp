// Times gpu-mknod as a whole process against the classic init.d shell
// procedure on the same 8- and 16-GPU fixtures, in one run, each a real run
// into a freshly emptied /dev. Needs root (mknod, chown, mount namespace).
//
// Both run inside one private mount namespace in which the fixture is
// bind-mounted over /sys/bus/pci/devices, /proc/devices and /etc/group and an
// empty directory over /dev, so the script runs unmodified.
#include "classic_script.hpp"
#include "gpuinit/text.hpp"
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <string>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

using gpuinit::testing::kClassicScript;
using gpuinit::testing::run_process;
using gpuinit::testing::TempDir;

int remove_entry(const char* path, const struct stat* /*st*/, int /*flag*/, struct FTW* ftw) {
    if (ftw->level > 0) {
        ::remove(path);
    }
    return 0;
}

void empty_dir(const std::string& dir) {
    ::nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

bool bind(const std::string& from, const char* to) {
    if (::mount(from.c_str(), to, nullptr, MS_BIND, nullptr) != 0) {
        std::perror(to);
        return false;
    }
    return true;
}

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

double time_run(const std::vector<std::string>& argv, const std::string& dev_to_empty) {
    empty_dir(dev_to_empty);
    auto start = std::chrono::steady_clock::now();
    int code = run_process(argv);
    auto end = std::chrono::steady_clock::now();
    if (code != 0) {
        std::fprintf(stderr, "bench_mknod: %s exited %d\n", argv[0].c_str(), code);
    }
    return std::chrono::duration<double, std::milli>(end - start).count();
}

// Runs in a child process: the mount namespace must not outlive it. Returns
// normally so the temporary directories are removed.
int measure_in_namespace(const std::string& tool, unsigned gpus, int repetitions) {
    TempDir fixture;
    TempDir work;
    if (!gpuinit::testing::write_fixture(gpuinit::testing::workstation(gpus), fixture.path())) {
        return 1;
    }
    std::string script = work / "gpu-restriction.sh";
    {
        FILE* out = std::fopen(script.c_str(), "w");
        std::fputs(kClassicScript, out);
        std::fclose(out);
    }
    std::string classic_dev = work / "dev";
    ::mkdir(classic_dev.c_str(), 0755);
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        !bind(fixture / "sys/bus/pci/devices", "/sys/bus/pci/devices") ||
        !bind(fixture / "proc/devices", "/proc/devices") ||
        !bind(fixture / "etc/group", "/etc/group") || !bind(classic_dev, "/dev")) {
        std::perror("bench_mknod: namespace setup");
        return 1;
    }
    std::vector<double> ours;
    std::vector<double> classic;
    // The cost of starting any process on this machine: the floor
    // under gpu-mknod, and so the ceiling on any speed-up.
    std::vector<double> floor;
    std::vector<std::string> ours_argv = {tool, "--root", fixture.path(), "-q"};
    std::vector<std::string> classic_argv = {"/bin/sh", script};
    for (int i = 0; i < repetitions; ++i) {
        // Interleaved, so drift on a noisy machine hits both alike.
        ours.push_back(time_run(ours_argv, fixture / "dev"));
        classic.push_back(time_run(classic_argv, "/dev"));
        floor.push_back(time_run({"/bin/true"}, work / "empty"));
    }
    double ours_ms = median(ours);
    double classic_ms = median(classic);
    double floor_ms = median(floor);
    std::printf("%-6u %16.3f %16.3f %9.1fx %16.3f %11.1fx\n", gpus, ours_ms, classic_ms,
                classic_ms / ours_ms, floor_ms, classic_ms / floor_ms);
    std::fflush(stdout);
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fputs("usage: bench_mknod PATH-TO-gpu-mknod [REPETITIONS]\n", stderr);
        return 1;
    }
    std::string tool = argv[1];
    int repetitions = argc > 2 ? std::max(3, std::atoi(argv[2])) : 30;
    if (::geteuid() != 0) {
        std::fputs("bench_mknod: needs root (mknod, chown, a private mount namespace)\n", stderr);
        return 77;
    }
    std::printf("%-6s %16s %16s %10s %16s %12s\n", "GPUs", "gpu-mknod ms", "classic sh ms",
                "speed-up", "/bin/true ms", "true/sh");
    std::fflush(stdout); // before fork(), or the children print it again
    for (unsigned gpus : {8u, 16u}) {
        pid_t child = ::fork();
        if (child == 0) {
            ::_exit(measure_in_namespace(tool, gpus, repetitions));
        }
        int status = 0;
        ::waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            return 1;
        }
    }
    std::printf("medians of %d interleaved runs each; every run into an emptied /dev\n",
                repetitions);
    return 0;
}
