// Times gpu-mknod as a whole process against the classic init.d shell
// procedure on the same 8- and 16-GPU fixtures, in one run. Needs root
// (mknod, chown, a private mount namespace).
//
// Everything happens in this process's own mount namespace, gone when it
// exits. A tmpfs holds the fixture roots and work dirs: a real /dev is
// devtmpfs, and on the disk under /tmp each mknod or symlink costs a journal
// update that would swamp what is being measured. Every timed run gets a fresh
// copy of the fixture root, written before the clock starts, so no state
// (run/gpuinit/gpus, the lock, nodes) carries over between runs. The script
// runs unmodified, with that copy's /dev, PCI devices, /proc/devices and
// /etc/group bind-mounted over the real ones.
#include "classic_script.hpp"
#include "gpuinit/base/text.hpp"
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <memory>
#include <optional>
#include <sched.h>
#include <string>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <vector>

namespace {

using gpuinit::format;
using gpuinit::testing::FakeMachine;
using gpuinit::testing::kClassicScript;
using gpuinit::testing::run_process;
using gpuinit::testing::TempDir;

constexpr unsigned kGpuCounts[] = {8, 16};
constexpr double kTargetMs8 = 5.0;
constexpr double kTargetSpeedUp = 50.0;
constexpr unsigned kNvidiaMajor = 195;

// A mount that is undone when the object goes away, so that the directories
// under it can be removed and the next run starts from the real tree.
class ScopedMount {
  public:
    ScopedMount(const char* source, const std::string& target, const char* type,
                unsigned long flags, const char* data) {
        if (::mount(source, target.c_str(), type, flags, data) == 0) {
            target_ = target;
        } else {
            std::fprintf(stderr, "bench_mknod: FAILED: mount %s on %s: %m\n", source,
                         target.c_str());
        }
    }
    ~ScopedMount() {
        if (!target_.empty()) {
            ::umount2(target_.c_str(), MNT_DETACH);
        }
    }
    ScopedMount(const ScopedMount&) = delete;
    ScopedMount& operator=(const ScopedMount&) = delete;

    bool ok() const { return !target_.empty(); }

  private:
    std::string target_;
};

ScopedMount bind_mount(const std::string& from, const std::string& to) {
    return ScopedMount(from.c_str(), to, nullptr, MS_BIND, nullptr);
}

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

// What one timed run is, for the error message that ends the benchmark.
struct RunLabel {
    const std::string& what;
    unsigned gpus;
    int run;
};

void fail(const RunLabel& label, const std::string& problem) {
    std::fprintf(stderr, "bench_mknod: FAILED: %s %s (%u-GPU fixture, run %d); no results\n",
                 label.what.c_str(), problem.c_str(), label.gpus, label.run + 1);
}

// Milliseconds the process took from spawn to exit, or nullopt (reported)
// when it did not exit 0: a failed run is no result.
std::optional<double> timed_run(const std::vector<std::string>& argv, const RunLabel& label) {
    auto start = std::chrono::steady_clock::now();
    int code = run_process(argv);
    auto end = std::chrono::steady_clock::now();
    if (code != 0) {
        fail(label, code < 0 ? "could not be started or was killed" : format("exited %d", code));
        return std::nullopt;
    }
    return std::chrono::duration<double, std::milli>(end - start).count();
}

size_t count_char_devices(const std::string& dir) {
    std::unique_ptr<DIR, int (*)(DIR*)> stream(::opendir(dir.c_str()), ::closedir);
    size_t count = 0;
    if (!stream) {
        return count;
    }
    while (const dirent* entry = ::readdir(stream.get())) {
        struct stat st {};
        if (::fstatat(::dirfd(stream.get()), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISCHR(st.st_mode)) {
            ++count;
        }
    }
    return count;
}

// Empty when `dev` holds what both procedures must make: nvidiactl,
// nvidia-uvm and a 0660 node per GPU in the GPU's group, and no other device
// nodes (gpu-mknod also makes nvidia-uvm-tools).
std::string check_dev(const std::string& dev, const FakeMachine& machine, unsigned gpus,
                      bool uvm_tools) {
    struct Node {
        std::string name;
        dev_t rdev;
        std::optional<gid_t> gid;
    };
    std::vector<Node> expected = {
        {"nvidiactl", ::makedev(kNvidiaMajor, 255), std::nullopt},
        {"nvidia-uvm", ::makedev(machine.uvm_major, 0), std::nullopt},
    };
    if (uvm_tools) {
        expected.push_back({"nvidia-uvm-tools", ::makedev(machine.uvm_major, 1), std::nullopt});
    }
    for (unsigned i = 0; i < gpus; ++i) {
        std::string name = "nvidia" + std::to_string(i);
        expected.push_back({name, ::makedev(kNvidiaMajor, i), machine.gid_of(name)});
    }
    for (const Node& node : expected) {
        struct stat st {};
        if (::lstat((dev + "/" + node.name).c_str(), &st) != 0) {
            return "left no /dev/" + node.name;
        }
        if (!S_ISCHR(st.st_mode) || st.st_rdev != node.rdev) {
            return format("made /dev/%s not the character device %u:%u", node.name.c_str(),
                          ::major(node.rdev), ::minor(node.rdev));
        }
        if (node.gid && (st.st_gid != *node.gid || (st.st_mode & 07777) != 0660)) {
            return format("made /dev/%s group %u mode %04o, not %u 0660", node.name.c_str(),
                          static_cast<unsigned>(st.st_gid), st.st_mode & 07777, *node.gid);
        }
    }
    if (size_t found = count_char_devices(dev); found != expected.size()) {
        return format("left %zu device nodes in /dev, not %zu", found, expected.size());
    }
    return {};
}

// Writes the fixture machine into a fresh root; false (reported) if it fails.
bool write_root(const FakeMachine& machine, const TempDir& root, const RunLabel& label) {
    if (auto written = gpuinit::testing::write_fixture(machine, root.path()); !written) {
        fail(label, "had no fixture: " + written.error().message);
        return false;
    }
    return true;
}

struct Medians {
    std::vector<double> tools_ms; // one per tool, in argument order
    double classic_ms = 0;
    double floor_ms = 0;
};

// Interleaves the tools, the script and /bin/true, so that drift on a noisy
// machine hits all alike. Returns nullopt (reported) on the first failed run.
std::optional<Medians> measure(const std::vector<std::string>& tools, const std::string& script,
                               unsigned gpus, int runs) {
    const FakeMachine machine = gpuinit::testing::workstation(gpus);
    std::vector<std::vector<double>> ours(tools.size());
    std::vector<double> classic;
    // The cost of starting any process on this machine: the floor under
    // gpu-mknod, and so the ceiling on any speed-up.
    std::vector<double> floor;
    const std::string classic_what = "the classic script";
    const std::string true_what = "/bin/true";
    for (int run = 0; run < runs; ++run) {
        for (size_t t = 0; t < tools.size(); ++t) {
            const RunLabel label{tools[t], gpus, run};
            TempDir root;
            if (!write_root(machine, root, label)) {
                return std::nullopt;
            }
            auto ms = timed_run({tools[t], "--root", root.path(), "-q"}, label);
            if (!ms) {
                return std::nullopt;
            }
            if (std::string problem = check_dev(root / "dev", machine, gpus, true);
                !problem.empty()) {
                fail(label, problem);
                return std::nullopt;
            }
            ours[t].push_back(*ms);
        }
        {
            const RunLabel label{classic_what, gpus, run};
            TempDir root;
            if (!write_root(machine, root, label)) {
                return std::nullopt;
            }
            // Declared after `root`, so undone before it is removed.
            ScopedMount dev = bind_mount(root / "dev", "/dev");
            ScopedMount pci = bind_mount(root / "sys/bus/pci/devices", "/sys/bus/pci/devices");
            ScopedMount devices = bind_mount(root / "proc/devices", "/proc/devices");
            ScopedMount group = bind_mount(root / "etc/group", "/etc/group");
            if (!dev.ok() || !pci.ok() || !devices.ok() || !group.ok()) {
                return std::nullopt;
            }
            auto ms = timed_run({"/bin/sh", script}, label);
            if (!ms) {
                return std::nullopt;
            }
            if (std::string problem = check_dev(root / "dev", machine, gpus, false);
                !problem.empty()) {
                fail(label, problem);
                return std::nullopt;
            }
            classic.push_back(*ms);
        }
        auto ms = timed_run({true_what}, {true_what, gpus, run});
        if (!ms) {
            return std::nullopt;
        }
        floor.push_back(*ms);
    }
    Medians medians;
    for (const std::vector<double>& samples : ours) {
        medians.tools_ms.push_back(median(samples));
    }
    medians.classic_ms = median(classic);
    medians.floor_ms = median(floor);
    return medians;
}

const char* verdict(bool met) {
    return met ? "met" : "MISSED";
}

int usage() {
    std::fputs("usage: bench_mknod [--runs N] PATH-TO-gpu-mknod [PATH-TO-gpu-mknod...]\n"
               "  e.g. bench_mknod build/tools/gpu-mknod build-static/tools/gpu-mknod\n",
               stderr);
    return 1;
}

} // namespace

int main(int argc, char** argv) {
    int runs = 30;
    const option options[] = {{"runs", required_argument, nullptr, 'n'}, {nullptr, 0, nullptr, 0}};
    for (int opt = 0; (opt = ::getopt_long(argc, argv, "n:", options, nullptr)) != -1;) {
        if (opt != 'n') {
            return usage();
        }
        // At least 3, so that the median is not just one run.
        runs = std::max(3, std::atoi(optarg));
    }
    std::vector<std::string> tools(argv + optind, argv + argc);
    if (tools.empty()) {
        return usage();
    }
    if (::geteuid() != 0) {
        std::fputs("bench_mknod: needs root (mknod, chown, a private mount namespace)\n", stderr);
        return 77;
    }
    for (const std::string& tool : tools) {
        if (::access(tool.c_str(), X_OK) != 0) {
            std::fprintf(stderr, "bench_mknod: FAILED: %s: %m; no results\n", tool.c_str());
            return 1;
        }
    }
    // Private, so that none of the mounts below reach the rest of the system.
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        std::perror("bench_mknod: FAILED: a private mount namespace");
        return 1;
    }
    TempDir scratch;
    // No MS_NODEV: the device nodes must be creatable there, as on devtmpfs.
    ScopedMount tmpfs("tmpfs", scratch.path(), "tmpfs", MS_NOSUID, "mode=0755");
    if (!tmpfs.ok()) {
        return 1;
    }
    // Every TempDir from here on, the per-run fixture roots included, lands
    // on that tmpfs.
    ::setenv("TMPDIR", scratch.path().c_str(), 1);
    std::string script = scratch / "gpu-restriction.sh";
    {
        std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(script.c_str(), "w"), ::fclose);
        if (!out || std::fputs(kClassicScript, out.get()) < 0) {
            std::perror("bench_mknod: FAILED: writing the classic script");
            return 1;
        }
    }

    std::printf("gpu-mknod against the classic shell procedure, each a whole process;\n"
                "medians of %d interleaved runs, each on a fresh copy of the fixture root;\n"
                "fixture roots, work dirs and /dev on a tmpfs (a real /dev is devtmpfs)\n\n",
                runs);
    int width = 4;
    for (const std::string& tool : tools) {
        width = std::max(width, static_cast<int>(tool.size()));
    }
    std::printf("%-5s %-*s %10s %14s %9s %13s %9s\n", "GPUs", width, "tool", "tool ms",
                "classic sh ms", "speed-up", "/bin/true ms", "ceiling");
    std::fflush(stdout);
    std::vector<Medians> results;
    for (unsigned gpus : kGpuCounts) {
        std::optional<Medians> medians = measure(tools, script, gpus, runs);
        if (!medians) {
            return 1;
        }
        for (size_t t = 0; t < tools.size(); ++t) {
            std::printf("%-5u %-*s %10.3f %14.3f %8.1fx %13.3f %8.1fx\n", gpus, width,
                        tools[t].c_str(), medians->tools_ms[t], medians->classic_ms,
                        medians->classic_ms / medians->tools_ms[t], medians->floor_ms,
                        medians->classic_ms / medians->floor_ms);
        }
        std::fflush(stdout);
        results.push_back(*medians);
    }

    // Timing decides only these lines, never the exit status: the machines
    // are noisy, and a slow run is not a broken one.
    std::printf("\n");
    for (size_t t = 0; t < tools.size(); ++t) {
        // results follow kGpuCounts: front() is 8 GPUs, back() is 16.
        double ms8 = results.front().tools_ms[t];
        std::printf("target  %-6s  %-*s  8 GPUs under %.0f ms: %.3f ms\n",
                    verdict(ms8 < kTargetMs8), width, tools[t].c_str(), kTargetMs8, ms8);
        double speed_up8 = results.front().classic_ms / ms8;
        double speed_up16 = results.back().classic_ms / results.back().tools_ms[t];
        std::printf("target  %-6s  %-*s  >= %.0fx the shell: %.1fx (8 GPUs), %.1fx (16 GPUs)\n",
                    verdict(speed_up8 >= kTargetSpeedUp && speed_up16 >= kTargetSpeedUp), width,
                    tools[t].c_str(), kTargetSpeedUp, speed_up8, speed_up16);
    }
    return 0;
}
