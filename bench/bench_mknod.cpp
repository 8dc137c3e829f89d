// Times gpu-mknod as a whole process against a static no-op process (the
// floor: what starting any static program costs here) and against the
// classic init.d shell procedure under bash, on 8- and 16-GPU server
// fixtures, in one run: the first run on a fresh tree and the no-change run
// on the tree that run left. Needs root (mknod, chown, a private mount
// namespace).
//
// Everything happens in this process's own mount namespace, gone when it
// exits. A tmpfs holds the fixture roots and work dirs: a real /dev is
// devtmpfs, and on the disk under /tmp each mknod or symlink costs a journal
// update that would swamp what is being measured. Every first run gets a fresh
// copy of the fixture root, written before the clock starts, so no state
// (run/gpuinit/gpus, the lock, nodes) carries over from another tool's or
// another round's runs; its no-change run gets the tree it left. The script
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
#include <cstring>
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
// Besides each GPU and its audio function: bridges, NICs, NVMe, SMBus...
constexpr unsigned kOtherFunctions = 80;
// Whole-process time against a static no-op's, on the 8-GPU server.
constexpr double kTargetFirst = 1.6;
constexpr double kTargetAgain = 1.4;
constexpr const char* kBash = "/bin/bash";
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

// A first run (fresh tree) and a no-change run (the same tree again, now
// correct), each a whole process.
struct Samples {
    std::vector<double> first;
    std::vector<double> again;
};

struct Medians {
    double first = 0;
    double again = 0;
};

Medians medians_of(const Samples& samples) {
    return {median(samples.first), median(samples.again)};
}

struct Results {
    std::vector<Medians> tools; // one per tool, in argument order
    Medians classic;
    Medians noop;
};

// Times `argv` on a tree that must then hold the nodes: the first run on a
// fresh tree, then the no-change run on the tree it left. False (reported)
// on a failed run or a wrong /dev.
bool time_pair(const std::vector<std::string>& argv, const std::string& dev,
               const FakeMachine& machine, unsigned gpus, bool uvm_tools, const RunLabel& label,
               Samples& samples) {
    for (int pass = 0; pass < 2; ++pass) {
        auto ms = timed_run(argv, label);
        if (!ms) {
            return false;
        }
        if (std::string problem = check_dev(dev, machine, gpus, uvm_tools); !problem.empty()) {
            fail(label, problem + (pass == 0 ? " on its first run" : " on its no-change run"));
            return false;
        }
        (pass == 0 ? samples.first : samples.again).push_back(*ms);
    }
    return true;
}

// Interleaves the tools, the script and the static no-op, so that drift on a
// noisy machine hits all alike. Returns nullopt (reported) on the first
// failed run.
std::optional<Results> measure(const std::vector<std::string>& tools, const std::string& script,
                               const std::string& noop, unsigned gpus, int runs) {
    const FakeMachine machine = gpuinit::testing::server(gpus, kOtherFunctions);
    std::vector<Samples> ours(tools.size());
    Samples classic;
    // The cost of starting a static process that does nothing: the floor
    // under gpu-mknod. Timed as the tools are, in the same two places: right
    // after a fresh fixture root has been written (the one before it
    // removed), and right after another run. Each first run pays for that
    // churn (caches, deferred frees) as much as the process itself, so the
    // first runs are set against the first, the no-change runs against the
    // second.
    Samples floor;
    const std::string classic_what = "the classic script under bash";
    auto time_noop = [&](int run) {
        const RunLabel label{noop, gpus, run};
        TempDir root;
        if (!write_root(machine, root, label)) {
            return false;
        }
        for (int pass = 0; pass < 2; ++pass) {
            auto ms = timed_run({noop}, label);
            if (!ms) {
                return false;
            }
            (pass == 0 ? floor.first : floor.again).push_back(*ms);
        }
        return true;
    };
    for (int run = 0; run < runs; ++run) {
        if (!time_noop(run)) {
            return std::nullopt;
        }
        for (size_t t = 0; t < tools.size(); ++t) {
            const RunLabel label{tools[t], gpus, run};
            TempDir root;
            if (!write_root(machine, root, label) ||
                !time_pair({tools[t], "--root", root.path(), "-q"}, root / "dev", machine, gpus,
                           true, label, ours[t])) {
                return std::nullopt;
            }
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
            // The seed script's own loop, unmodified, under bash as it ran
            // there (not dash, Debian's /bin/sh).
            if (!time_pair({kBash, script}, root / "dev", machine, gpus, false, label, classic)) {
                return std::nullopt;
            }
        }
        if (!time_noop(run)) {
            return std::nullopt;
        }
    }
    Results results;
    for (const Samples& samples : ours) {
        results.tools.push_back(medians_of(samples));
    }
    results.classic = medians_of(classic);
    results.noop = medians_of(floor);
    return results;
}

const char* verdict(bool met) {
    return met ? "met" : "MISSED";
}

int usage() {
    std::fputs("usage: bench_mknod [--runs N] [--noop PATH] PATH-TO-gpu-mknod [PATH...]\n"
               "  e.g. bench_mknod build-static/tools/gpu-mknod build/tools/gpu-mknod\n",
               stderr);
    return 1;
}

} // namespace

int main(int argc, char** argv) {
    int runs = 30;
    std::string noop = GPUINIT_BENCH_NOOP;
    const option options[] = {{"runs", required_argument, nullptr, 'n'},
                              {"noop", required_argument, nullptr, 'o'},
                              {nullptr, 0, nullptr, 0}};
    for (int opt = 0; (opt = ::getopt_long(argc, argv, "n:o:", options, nullptr)) != -1;) {
        if (opt == 'n') {
            // At least 3, so that the median is not just one run.
            runs = std::max(3, std::atoi(optarg));
        } else if (opt == 'o') {
            noop = optarg;
        } else {
            return usage();
        }
    }
    std::vector<std::string> tools(argv + optind, argv + argc);
    if (tools.empty()) {
        return usage();
    }
    if (::geteuid() != 0) {
        std::fputs("bench_mknod: needs root (mknod, chown, a private mount namespace)\n", stderr);
        return 77;
    }
    for (const std::string& program : [&] {
             std::vector<std::string> all = tools;
             all.push_back(noop);
             all.push_back(kBash);
             return all;
         }()) {
        if (::access(program.c_str(), X_OK) != 0) {
            std::fprintf(stderr, "bench_mknod: FAILED: %s: %m; no results\n", program.c_str());
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

    std::printf("gpu-mknod against a static no-op and the classic script under bash, each a whole"
                " process;\nmedians of %d interleaved runs; each first run on a fresh copy of the"
                " fixture root,\neach no-change run on the tree its first run left; fixture roots"
                " and /dev on a tmpfs\n",
                runs);
    int width = static_cast<int>(std::strlen("classic script (bash)"));
    for (const std::string& tool : tools) {
        width = std::max(width, static_cast<int>(tool.size()));
    }
    std::vector<Results> results;
    for (unsigned gpus : kGpuCounts) {
        std::printf("\n%u-GPU server: %u GPUs, their %u audio functions and %u other PCI functions"
                    " (%u)\n",
                    gpus, gpus, gpus, kOtherFunctions, 2 * gpus + kOtherFunctions);
        std::printf("%-*s %9s %8s %13s %8s %11s\n", width, "", "first ms", "x no-op",
                    "no-change ms", "x no-op", "bash/first");
        std::fflush(stdout);
        std::optional<Results> measured = measure(tools, script, noop, gpus, runs);
        if (!measured) {
            return 1;
        }
        const Results& r = *measured;
        for (size_t t = 0; t < tools.size(); ++t) {
            const Medians& m = r.tools[t];
            std::printf("%-*s %9.3f %7.2fx %13.3f %7.2fx %10.0fx\n", width, tools[t].c_str(),
                        m.first, m.first / r.noop.first, m.again, m.again / r.noop.again,
                        r.classic.first / m.first);
        }
        std::printf("%-*s %9.3f %7.0fx %13.3f %7.0fx\n", width, "classic script (bash)",
                    r.classic.first, r.classic.first / r.noop.first, r.classic.again,
                    r.classic.again / r.noop.again);
        std::printf("%-*s %9.3f %7.2fx %13.3f %7.2fx\n", width, "static no-op", r.noop.first, 1.0,
                    r.noop.again, 1.0);
        std::fflush(stdout);
        results.push_back(r);
    }

    // Timing decides only these lines, never the exit status: the machines
    // are noisy, and a slow run is not a broken one.
    std::printf("\n");
    const Results& server8 = results.front(); // kGpuCounts[0] is 8
    for (size_t t = 0; t < tools.size(); ++t) {
        const Medians& m = server8.tools[t];
        double first = m.first / server8.noop.first;
        double again = m.again / server8.noop.again;
        // The first run also against the no-op timed after another run,
        // for whoever compares with a plain no-op.
        std::printf("target  %-6s  %-*s  8-GPU server, first run <= %.1fx the no-op: %.2fx"
                    " (%.2fx its no-change time)\n",
                    verdict(first <= kTargetFirst), width, tools[t].c_str(), kTargetFirst, first,
                    m.first / server8.noop.again);
        std::printf("target  %-6s  %-*s  8-GPU server, no-change run <= %.1fx the no-op: %.2fx\n",
                    verdict(again <= kTargetAgain), width, tools[t].c_str(), kTargetAgain, again);
    }
    return 0;
}
