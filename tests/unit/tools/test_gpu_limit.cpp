// gpu-limit through the multi-call binary: the environment run gives a job
// (checked by the library's own parser), what it refuses and with which exit
// code, a real exec, and status over a group state made here with
// GroupState.
#include "gpuinit/base/text.hpp"
#include "gpuinit/limit/compute.hpp"
#include "gpuinit/limit/group_state.hpp"
#include "json_check.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace gpuinit {

using testing::run_process;
using testing::TempDir;

namespace {

// A real shared object to preload (the stand-in NVML: it does nothing until
// called), so that the loader of the job has nothing to complain about.
constexpr const char* kLibrary = FAKE_NVML_LIBRARY;

// `gpuinit limit ARGS` with exactly `environment` (and PATH).
int gpu_limit(std::vector<std::string> args, std::string* output,
              std::vector<std::string> environment = {}) {
    std::vector<std::string> argv = {"/usr/bin/env", "-i", "PATH=/usr/bin:/bin"};
    argv.insert(argv.end(), environment.begin(), environment.end());
    argv.insert(argv.end(), {GPUINIT_BIN, "limit"});
    argv.insert(argv.end(), args.begin(), args.end());
    output->clear();
    return run_process(argv, output);
}

struct StateDir {
    TempDir temp;
    std::string path = temp / "state";
    StateDir() { ::mkdir(path.c_str(), 0700); }
};

// The dry run's "export NAME=VALUE" lines, in order, and the exec line.
std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t end = text.find('\n'); end != std::string::npos; end = text.find('\n', start)) {
        std::string line = text.substr(start, end - start);
        // The loader's complaint about a made-up LD_PRELOAD entry, in gpu-limit itself.
        if (!line.starts_with("ERROR: ld.so:")) {
            lines.push_back(line);
        }
        start = end + 1;
    }
    return lines;
}

} // namespace

TEST(GpuLimitTool, DryRunSetsTheEgpuVariablesForEachOption) {
    StateDir state;
    std::string output;
    ASSERT_EQ(gpu_limit({"run", "--mem", "2G", "--state-dir", state.path, "--group", "train",
                         "--library", kLibrary, "--dry-run", "--", "python3", "it's.py"},
                        &output),
              0)
        << output;
    EXPECT_EQ(lines_of(output),
              (std::vector<std::string>{
                  "export AMP_VGPU_ENABLE=1", "export GPU_MEM_PER_DEVICE=2147483648",
                  "export GPU_LIMIT_GROUP=train", "export GPU_LIMIT_STATE_DIR=" + state.path,
                  "export LD_PRELOAD=" + std::string(kLibrary), "exec python3 'it'\\''s.py'"}))
        << output;

    // A share, the reserve, the OOM script and policy; an inherited
    // GPU_MEM_PER_DEVICE would conflict with the share and is unset; the
    // library goes first in LD_PRELOAD, once.
    ASSERT_EQ(gpu_limit({"run", "--mem-ratio", "1/4", "--reserved", "0", "--oom-script",
                         "/usr/local/bin/notify", "--oom-policy", "kill", "--state-dir", state.path,
                         "--group", "g", "--library", kLibrary, "--dry-run", "--", "true"},
                        &output,
                        {"GPU_MEM_PER_DEVICE=1",
                         "LD_PRELOAD=/lib/a.so " + std::string(kLibrary) + ":/lib/b.so"}),
              0)
        << output;
    EXPECT_EQ(
        lines_of(output),
        (std::vector<std::string>{
            "unset GPU_MEM_PER_DEVICE", "export AMP_VGPU_ENABLE=1",
            "export ALIYUN_COM_GPU_MEM_CONTAINER=1", "export ALIYUN_COM_GPU_MEM_DEV=4",
            "export ALIYUN_COM_GPU_MEM_RESERVED=0",
            "export ALIYUN_COM_GPU_OOM_SCRIPT=/usr/local/bin/notify",
            "export GPU_LIMIT_OOM_POLICY=kill", "export GPU_LIMIT_GROUP=g",
            "export GPU_LIMIT_STATE_DIR=" + state.path,
            "export LD_PRELOAD=" + std::string(kLibrary) + ":/lib/a.so:/lib/b.so", "exec true"}))
        << output;

    // The compute share goes to the library as GPU_UTIL_PER_DEVICE.
    ASSERT_EQ(gpu_limit({"run", "--util", "30", "--state-dir", state.path, "--group", "g",
                         "--library", kLibrary, "--dry-run", "--", "true"},
                        &output),
              0)
        << output;
    EXPECT_EQ(lines_of(output),
              (std::vector<std::string>{"export AMP_VGPU_ENABLE=1", "export GPU_UTIL_PER_DEVICE=30",
                                        "export GPU_LIMIT_GROUP=g",
                                        "export GPU_LIMIT_STATE_DIR=" + state.path,
                                        "export LD_PRELOAD=" + std::string(kLibrary), "exec true"}))
        << output;

    // Binary suffixes.
    for (auto [given, bytes] :
         std::vector<std::pair<std::string, std::string>>{{"512M", "536870912"},
                                                          {"512m", "536870912"},
                                                          {"1GiB", "1073741824"},
                                                          {"3gb", "3221225472"},
                                                          {"1T", "1099511627776"},
                                                          {"40960K", "41943040"},
                                                          {"123456789", "123456789"},
                                                          {"20000000B", "20000000"}}) {
        ASSERT_EQ(gpu_limit({"run", "-m", given, "--state-dir", state.path, "--library", kLibrary,
                             "--dry-run", "--", "true"},
                            &output),
                  0)
            << given << ": " << output;
        EXPECT_NE(output.find("export GPU_MEM_PER_DEVICE=" + bytes + "\n"), std::string::npos)
            << given << ": " << output;
    }
}

TEST(GpuLimitTool, GroupDefaultsToTheJobThenToTheRun) {
    StateDir state;
    std::string output;
    std::vector<std::string> args = {"run",       "--mem",  "1G",     "--state-dir", state.path,
                                     "--library", kLibrary, "--json", "--",          "true"};
    ASSERT_EQ(gpu_limit(args, &output, {"SLURM_JOB_ID=4711", "LSB_JOBID=9"}), 0) << output;
    EXPECT_NE(output.find("\"group\":\"slurm-4711\",\"group_source\":\"SLURM_JOB_ID\""),
              std::string::npos)
        << output;
    EXPECT_NE(output.find("\"GPU_LIMIT_GROUP\":\"slurm-4711\""), std::string::npos) << output;
    EXPECT_TRUE(testing::valid_json(output)) << output;
    ASSERT_EQ(gpu_limit(args, &output, {"LSB_JOBID=9"}), 0) << output;
    EXPECT_NE(output.find("\"group\":\"lsf-9\""), std::string::npos) << output;
    ASSERT_EQ(gpu_limit(args, &output, {"LSB_JOBID=9", "LSB_JOBINDEX=3"}), 0) << output;
    EXPECT_NE(output.find("\"group\":\"lsf-9_3\""), std::string::npos) << output;
    ASSERT_EQ(gpu_limit(args, &output), 0) << output;
    EXPECT_NE(output.find("\"group\":\"run-"), std::string::npos) << output;
    EXPECT_NE(output.find("\"group_source\":\"per run\""), std::string::npos) << output;
    std::string first = output;
    ASSERT_EQ(gpu_limit(args, &output), 0);
    EXPECT_NE(first.substr(0, first.find("group_source")),
              output.substr(0, output.find("group_source"))); // a new group per run
    // --group wins over the job.
    args.insert(args.begin() + 1, {"--group", "mine"});
    ASSERT_EQ(gpu_limit(args, &output, {"SLURM_JOB_ID=4711"}), 0) << output;
    EXPECT_NE(output.find("\"group\":\"mine\",\"group_source\":\"--group\""), std::string::npos)
        << output;
    // A job id that is not one.
    args.erase(args.begin() + 1, args.begin() + 3);
    EXPECT_EQ(gpu_limit(args, &output, {"SLURM_JOB_ID=../x"}), 3) << output;
    EXPECT_NE(output.find("SLURM_JOB_ID"), std::string::npos) << output;
}

TEST(GpuLimitTool, DefaultStateDirIsTheCallersAndPinned) {
    TempDir runtime;
    std::string output;
    ASSERT_EQ(gpu_limit({"run", "--mem", "1G", "--library", kLibrary, "--dry-run", "--", "true"},
                        &output, {"XDG_RUNTIME_DIR=" + runtime.path()}),
              0)
        << output;
    std::string expected = ::getuid() == 0 ? "/run/gpu-limit" : runtime / "gpu-limit";
    EXPECT_NE(output.find("export GPU_LIMIT_STATE_DIR=" + expected + "\n"), std::string::npos)
        << output;
    // GPU_LIMIT_STATE_DIR given in the environment is kept.
    ASSERT_EQ(gpu_limit({"run", "--mem", "1G", "--library", kLibrary, "--dry-run", "--", "true"},
                        &output, {"GPU_LIMIT_STATE_DIR=" + runtime / "mine"}),
              0)
        << output;
    EXPECT_NE(output.find("export GPU_LIMIT_STATE_DIR=" + runtime / "mine\n"), std::string::npos)
        << output;
}

TEST(GpuLimitTool, RefusesWhatTheLibraryWouldRefuse) {
    StateDir state;
    struct Case {
        std::vector<std::string> options;
        std::vector<std::string> environment;
        int code;
        std::string says;
    };
    std::vector<Case> cases = {
        {{"--mem", "0"}, {}, 3, "--mem '0'"},
        {{"--mem", "-1G"}, {}, 3, "--mem '-1G'"},
        {{"--mem", "2X"}, {}, 3, "not a size"},
        {{"--mem", "0x10"}, {}, 3, "not a size"},
        {{"--mem", "16777216T"}, {}, 3, "below 2^64"},
        {{"--mem", "10M"}, {}, 3, "ALIYUN_COM_GPU_MEM_RESERVED"}, // all of it reserved
        {{"--mem-ratio", "5/4"}, {}, 3, "must not exceed DEV"},
        {{"--mem-ratio", "1/0"}, {}, 3, "ALIYUN_COM_GPU_MEM_DEV=\"0\""},
        {{"--mem-ratio", "1"}, {}, 3, "is not C/D"},
        {{"--mem-ratio", "a/4"}, {}, 3, "ALIYUN_COM_GPU_MEM_CONTAINER=\"a\""},
        {{"--mem", "1G", "--mem-ratio", "1/2"}, {}, 1, "do not go together"},
        {{"--mem", "1G", "--reserved", "ten"}, {}, 3, "ALIYUN_COM_GPU_MEM_RESERVED=\"ten\""},
        {{"--mem", "1G", "--oom-script", "notify.sh"}, {}, 3, "not an absolute path"},
        {{"--mem", "1G", "--oom-policy", "abort"}, {}, 3, "GPU_LIMIT_OOM_POLICY=\"abort\""},
        {{"--util", "half"}, {}, 3, "GPU_UTIL_PER_DEVICE=\"half\""},
        {{"--util", "-5"}, {}, 3, "GPU_UTIL_PER_DEVICE"},
        {{"--mem", "1G", "--group", "a/b"}, {}, 3, "GPU_LIMIT_GROUP=\"a/b\""},
        {{"--mem", "1G", "--group", ".."}, {}, 3, "GPU_LIMIT_GROUP"},
        {{"--mem", "1G"}, {"NVIDIA_VISIBLE_DEVICES=0:1"}, 3, "memory-isolated"},
        {{"--mem", "1G"}, {"NVIDIA_VISIBLE_DEVICES=0,,1"}, 3, "NVIDIA_VISIBLE_DEVICES"},
        {{"--mem", "1G"}, {"GPU_LIMIT_OOM_SCRIPT_TIMEOUT=0"}, 3, "GPU_LIMIT_OOM_SCRIPT_TIMEOUT"},
        {{}, {"ALIYUN_COM_GPU_MEM_DEV=4"}, 3, "without ALIYUN_COM_GPU_MEM_CONTAINER"},
        {{}, {"GPU_MEM_PER_DEVICE=1073741824", "ALIYUN_COM_GPU_MEM_CONTAINER=1"}, 3, "both set"},
        {{"--mem", "1G", "--library", "relative.so"}, {}, 3, "not an absolute path"},
        {{"--mem", "1G", "--library", "/nonexistent/libgpulimit.so"}, {}, 3, "No such file"},
        {{"--mem", "1G", "--library", "/tmp"}, {}, 3, "not a regular file"},
        {{"--mem", "1G", "--library", "/a b.so"}, {}, 3, "split LD_PRELOAD"},
        {{"--mem", "1G", "--state-dir", "relative"}, {}, 3, "not an absolute path"},
    };
    for (const Case& c : cases) {
        std::vector<std::string> args = {"run", "--state-dir", state.path};
        bool has_library = false;
        for (const std::string& option : c.options) {
            has_library = has_library || option == "--library";
        }
        if (!has_library) {
            args.insert(args.end(), {"--library", kLibrary});
        }
        args.insert(args.end(), c.options.begin(), c.options.end());
        args.insert(args.end(), {"--", "true"});
        std::string output;
        std::string shown;
        for (const std::string& arg : args) {
            shown += arg + " ";
        }
        EXPECT_EQ(gpu_limit(args, &output, c.environment), c.code) << shown << output;
        EXPECT_NE(output.find(c.says), std::string::npos) << shown << output;
        EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), c.code == 1 ? 2 : 1)
            << shown << output; // one line (a usage error adds the --help hint)
    }
    // The library from GPU_LIMIT_LIBRARY, checked the same way.
    std::string output;
    EXPECT_EQ(gpu_limit({"run", "--mem", "1G", "--state-dir", state.path, "--", "true"}, &output,
                        {"GPU_LIMIT_LIBRARY=/nonexistent.so"}),
              3);
    EXPECT_NE(output.find("GPU_LIMIT_LIBRARY"), std::string::npos) << output;
    EXPECT_EQ(
        gpu_limit({"run", "--mem", "1G", "--state-dir", state.path, "--dry-run", "--", "true"},
                  &output, {"GPU_LIMIT_LIBRARY=" + std::string(kLibrary)}),
        0)
        << output;
}

TEST(GpuLimitTool, UsageErrors) {
    std::string output;
    EXPECT_EQ(gpu_limit({}, &output), 1);
    EXPECT_NE(output.find("run or status"), std::string::npos) << output;
    EXPECT_EQ(gpu_limit({"run", "--mem", "1G"}, &output), 1);
    EXPECT_NE(output.find("needs a command after --"), std::string::npos) << output;
    EXPECT_EQ(gpu_limit({"status", "--mem", "1G"}, &output), 1);
    EXPECT_EQ(gpu_limit({"status", "--", "true"}, &output), 1);
    EXPECT_EQ(gpu_limit({"stats"}, &output), 1);
    EXPECT_EQ(gpu_limit({"run", "--bogus", "--", "true"}, &output), 1);
    EXPECT_EQ(gpu_limit({"--help"}, &output), 0);
    EXPECT_NE(output.find("Exit status:"), std::string::npos);
    EXPECT_EQ(gpu_limit({"--version"}, &output), 0);
    EXPECT_EQ(output.rfind("gpu-limit ", 0), 0u) << output;
}

TEST(GpuLimitTool, RunExecsTheCommandWithTheEnvironment) {
    StateDir state;
    std::string output;
    ASSERT_EQ(gpu_limit({"run", "--mem", "3G", "--group", "exec-test", "--state-dir", state.path,
                         "--library", kLibrary, "--", "/usr/bin/env"},
                        &output, {"ALIYUN_COM_GPU_MEM_DEV=8", "KEEP=me"}),
              0)
        << output;
    EXPECT_NE(output.find("AMP_VGPU_ENABLE=1\n"), std::string::npos) << output;
    EXPECT_NE(output.find("GPU_MEM_PER_DEVICE=3221225472\n"), std::string::npos) << output;
    EXPECT_NE(output.find("GPU_LIMIT_GROUP=exec-test\n"), std::string::npos) << output;
    EXPECT_NE(output.find("GPU_LIMIT_STATE_DIR=" + state.path + "\n"), std::string::npos);
    EXPECT_NE(output.find("LD_PRELOAD=" + std::string(kLibrary) + "\n"), std::string::npos);
    EXPECT_NE(output.find("KEEP=me\n"), std::string::npos) << output;
    EXPECT_EQ(output.find("ALIYUN_COM_GPU_MEM_DEV"), std::string::npos) << output;
    EXPECT_EQ(output.find("gpu-limit:"), std::string::npos) << output;
    // CMD's own status, and the shell's 127 and 126.
    EXPECT_EQ(gpu_limit({"run", "--mem", "1G", "--state-dir", state.path, "--library", kLibrary,
                         "--", "/bin/sh", "-c", "exit 7"},
                        &output),
              7);
    EXPECT_EQ(gpu_limit({"run", "--mem", "1G", "--state-dir", state.path, "--library", kLibrary,
                         "--", "no-such-command-here"},
                        &output),
              127);
    EXPECT_NE(output.find("cannot run 'no-such-command-here'"), std::string::npos) << output;
    std::string not_executable = state.temp / "script";
    std::ofstream(not_executable) << "#!/bin/sh\n";
    ::chmod(not_executable.c_str(), 0644);
    EXPECT_EQ(gpu_limit({"run", "--mem", "1G", "--state-dir", state.path, "--library", kLibrary,
                         "--", not_executable},
                        &output),
              126);
}

TEST(GpuLimitTool, RefusesAnUntrustedStateDir) {
    TempDir temp;
    std::string open_dir = temp / "open";
    ::mkdir(open_dir.c_str(), 0700);
    ::chmod(open_dir.c_str(), 0777);
    std::string group_writable = temp / "group";
    ::mkdir(group_writable.c_str(), 0700);
    ::chmod(group_writable.c_str(), 0770);
    std::string link = temp / "link";
    ASSERT_EQ(::symlink(temp.path().c_str(), link.c_str()), 0);
    std::string output;
    for (const auto& [dir, says] : std::vector<std::pair<std::string, std::string>>{
             {open_dir, "writable by others (mode 0777)"},
             {group_writable, "writable by its group (mode 0770)"},
             {link, "not a directory"}}) {
        EXPECT_EQ(gpu_limit({"run", "--mem", "1G", "--state-dir", dir, "--library", kLibrary, "--",
                             "true"},
                            &output),
                  3)
            << dir;
        EXPECT_NE(output.find(says), std::string::npos) << output;
        EXPECT_EQ(gpu_limit({"status", "--state-dir", dir}, &output), 3) << dir;
        EXPECT_NE(output.find(says), std::string::npos) << output;
    }
    EXPECT_NE(output.find("--state-dir"), std::string::npos) << output; // the fix
    if (::geteuid() == 0) {
        std::string others = temp / "others";
        ::mkdir(others.c_str(), 0700);
        ASSERT_EQ(::chown(others.c_str(), 4242, 4242), 0);
        EXPECT_EQ(gpu_limit({"status", "--state-dir", others}, &output), 3);
        EXPECT_NE(output.find("owned by uid 4242"), std::string::npos) << output;
        EXPECT_EQ(gpu_limit({"run", "--mem", "1G", "--state-dir", others, "--library", kLibrary,
                             "--", "true"},
                            &output),
                  3);
        EXPECT_NE(output.find("owned by uid 4242"), std::string::npos) << output;
    }
}

TEST(GpuLimitTool, StatusShowsGroupsDevicesAndProcesses) {
    StateDir state;
    std::string output;
    ASSERT_EQ(gpu_limit({"status", "--state-dir", state.path}, &output), 0) << output;
    EXPECT_EQ(output, "no group in " + state.path + "\n");
    ASSERT_EQ(gpu_limit({"status", "--state-dir", state.temp / "missing", "--json"}, &output), 0)
        << output;
    EXPECT_NE(output.find("\"groups\":[]"), std::string::npos) << output;

    constexpr const char* kUuid = "GPU-28df3c1e-6b3e-4c5b-9a8f-0123456789ab";
    constexpr unsigned long long kGiB = 1ULL << 30;
    limit::GroupState group;
    limit::Problem problem;
    ASSERT_TRUE(group.open(state.path.c_str(), "job-7", problem)) << problem.text;
    ASSERT_TRUE(group.register_process(problem)) << problem.text;
    int device = group.attach_device(kUuid, 2 * kGiB, 80 * kGiB, problem);
    ASSERT_GE(device, 0) << problem.text;
    ASSERT_EQ(group.charge(device, kGiB + kGiB / 2), limit::Admission::Admitted);
    ASSERT_EQ(group.charge(device, kGiB), limit::Admission::OverCap);
    group.note_refusal(device);

    ASSERT_EQ(gpu_limit({"status", "--state-dir", state.path}, &output), 0) << output;
    EXPECT_NE(output.find("group job-7: 1 device(s), 1 live process(es)"), std::string::npos)
        << output;
    EXPECT_EQ(output.find("compute:"), std::string::npos) << output; // no compute cap
    // The group's record keeps the UUID as GroupState spells it: compare the hex.
    std::string hex = std::string(kUuid).substr(4);
    EXPECT_NE(output.find(hex), std::string::npos) << output;
    EXPECT_NE(output.find("2.00 GiB"), std::string::npos) << output; // cap
    EXPECT_NE(output.find("1.50 GiB"), std::string::npos) << output; // used and peak
    EXPECT_NE(output.find(format("pid %-8d", static_cast<int>(::getpid()))), std::string::npos)
        << output;
    EXPECT_NE(output.find("dev 0: 1.50 GiB"), std::string::npos) << output;

    ASSERT_EQ(
        gpu_limit({"status", "--state-dir", state.path, "--group", "job-7", "--json"}, &output), 0)
        << output;
    EXPECT_TRUE(testing::valid_json(output)) << output;
    EXPECT_NE(
        output.find(format("-%s\",\"cap_bytes\":%llu,\"used_bytes\":%llu,"
                           "\"peak_bytes\":%llu,\"physical_bytes\":%llu,\"refusals\":1,"
                           "\"external_bytes\":0,\"compute\":{\"cap_percent\":0,",
                           hex.c_str(), 2 * kGiB, kGiB + kGiB / 2, kGiB + kGiB / 2, 80 * kGiB)),
        std::string::npos)
        << output;
    EXPECT_NE(output.find(format("\"pid\":%d,", static_cast<int>(::getpid()))), std::string::npos)
        << output;
    EXPECT_NE(output.find(format("\"alive\":true,\"used_bytes\":[%llu]", kGiB + kGiB / 2)),
              std::string::npos)
        << output;

    // /run/gpu-limit also holds the daemon's socket and pid file and the
    // containers' ld.so.preload: no groups, and no error (status exited 2
    // on the very directory the README tells admins to look at).
    for (const char* name : {"daemon.pid", "ld.so.preload"}) {
        FILE* file = std::fopen((state.path + "/" + name).c_str(), "w");
        ASSERT_NE(file, nullptr);
        std::fclose(file);
    }
    int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s/daemon.sock", state.path.c_str());
    ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(gpu_limit({"status", "--state-dir", state.path, "--json"}, &output), 0) << output;
    EXPECT_NE(output.find("\"host_pid\":0,"), std::string::npos) << output; // no daemon
    ::close(sock);

    // A group that is not there, and a directory that is not a group.
    EXPECT_EQ(gpu_limit({"status", "--state-dir", state.path, "--group", "nope"}, &output), 3);
    ::mkdir((state.path + "/broken").c_str(), 0700);
    EXPECT_EQ(gpu_limit({"status", "--state-dir", state.path}, &output), 2) << output;
    EXPECT_NE(output.find("group job-7"), std::string::npos) << output;
    group.close();
}

// The live slot of this process in the group's state file, mapped as the
// group's processes map it: writable, every field of it.
limit::SlotRecord* own_slot(const std::string& state_file, limit::StateFile*& file) {
    int fd = ::open(state_file.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        return nullptr;
    }
    void* mapped =
        ::mmap(nullptr, sizeof(limit::StateFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (mapped == MAP_FAILED) {
        return nullptr;
    }
    file = static_cast<limit::StateFile*>(mapped);
    for (limit::SlotRecord& slot : file->slots) {
        if (slot.state.load() == 1 && slot.pid.load() == ::getpid()) {
            return &slot;
        }
    }
    return nullptr;
}

// host_pid sits in the group's state file, which the group's processes
// write: a container could name any host process there, for an admin (or a
// script reading --json) to kill. Status shows it only while that process
// holds the slot's lock, as the daemon checked before writing it.
TEST(GpuLimitTool, StatusShowsOnlyAHostPidThatHoldsTheSlot) {
    StateDir state;
    limit::GroupState group;
    limit::Problem problem;
    ASSERT_TRUE(group.open(state.path.c_str(), "ctr", problem)) << problem.text;
    ASSERT_TRUE(group.register_process(problem)) << problem.text;
    limit::StateFile* file = nullptr;
    limit::SlotRecord* slot = own_slot(state.path + "/ctr/state", file);
    ASSERT_NE(slot, nullptr);

    const int forged = static_cast<int>(::getppid()); // alive, holds no lock of the group
    slot->host_pid.store(forged);
    std::string output;
    ASSERT_EQ(gpu_limit({"status", "--state-dir", state.path, "--json"}, &output), 0) << output;
    EXPECT_NE(output.find("\"host_pid\":0,"), std::string::npos) << output;
    ASSERT_EQ(gpu_limit({"status", "--state-dir", state.path}, &output), 0) << output;
    EXPECT_EQ(output.find(format("host pid %d", forged)), std::string::npos) << output;

    slot->host_pid.store(static_cast<int>(::getpid())); // the holder itself
    ASSERT_EQ(gpu_limit({"status", "--state-dir", state.path, "--json"}, &output), 0) << output;
    EXPECT_NE(output.find(format("\"host_pid\":%d,", static_cast<int>(::getpid()))),
              std::string::npos)
        << output;
    ::munmap(file, sizeof(limit::StateFile));
    group.close();
}

// A slot's comm and a device's UUID are the group's processes' to write:
// status, run by an admin over every container's group, shows each on the
// line it belongs to (the output layer escapes control bytes line by line,
// so a newline in a value would start a line of the group's making).
TEST(GpuLimitTool, StatusShowsWhatAGroupWroteOnItsOwnLine) {
    StateDir state;
    limit::GroupState group;
    limit::Problem problem;
    ASSERT_TRUE(group.open(state.path.c_str(), "ctr", problem)) << problem.text;
    ASSERT_TRUE(group.register_process(problem)) << problem.text;
    ASSERT_GE(group.attach_device("GPU-28df3c1e-6b3e-4c5b-9a8f-0123456789ab", 1ULL << 30,
                                  80ULL << 30, problem),
              0)
        << problem.text;
    limit::StateFile* file = nullptr;
    limit::SlotRecord* slot = own_slot(state.path + "/ctr/state", file);
    ASSERT_NE(slot, nullptr);
    std::memcpy(slot->comm, "x\n  pid 1 fake", 15);
    std::memcpy(file->header.devices[0].uuid, "GPU-\ngroup evil", 16);
    std::string output;
    ASSERT_EQ(gpu_limit({"status", "--state-dir", state.path}, &output), 0) << output;
    std::vector<std::string> lines = lines_of(output);
    EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                            [](const std::string& line) { return line.starts_with("  pid "); }),
              1)
        << output;
    EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                            [](const std::string& line) { return line.starts_with("group "); }),
              1)
        << output;
    EXPECT_NE(output.find("x\\n  pid 1 fake"), std::string::npos) << output;
    EXPECT_NE(output.find("GPU-\\ngroup evil"), std::string::npos) << output;
    ::munmap(file, sizeof(limit::StateFile));
    group.close();
}

TEST(GpuLimitTool, StatusShowsTheComputeShareAndItsDriver) {
    StateDir state;
    constexpr const char* kUuid = "GPU-28df3c1e-6b3e-4c5b-9a8f-0123456789ab";
    limit::GroupState group;
    limit::Problem problem;
    ASSERT_TRUE(group.open(state.path.c_str(), "ctr", problem)) << problem.text;
    ASSERT_TRUE(group.register_process(problem)) << problem.text;
    int device = group.attach_device(kUuid, 1ULL << 30, 80ULL << 30, 30, problem);
    ASSERT_GE(device, 0) << problem.text;
    limit::ComputeRecord* record = group.compute(device);
    ASSERT_NE(record, nullptr);
    record->driver.store(2);
    record->share_ppm.store(297000);
    record->launches_held.store(12);
    record->external_bytes.store(300ULL << 20);
    limit::gate_set(*record, false);

    std::string output;
    ASSERT_EQ(gpu_limit({"status", "--state-dir", state.path}, &output), 0) << output;
    EXPECT_NE(output.find("compute: cap 30%, measured 29.7%, gate closed, 12 launch(es) held, "
                          "driven by the host daemon"),
              std::string::npos)
        << output;
    EXPECT_NE(output.find("of which 300.00 MiB measured by the host daemon"), std::string::npos)
        << output;
    ASSERT_EQ(gpu_limit({"status", "--state-dir", state.path, "--json"}, &output), 0) << output;
    EXPECT_TRUE(testing::valid_json(output)) << output;
    EXPECT_NE(output.find("\"external_bytes\":314572800,\"compute\":{\"cap_percent\":30,"
                          "\"share_ppm\":297000,\"gate_open\":false,\"launches_held\":12,"
                          "\"driver\":\"the host daemon\"}"),
              std::string::npos)
        << output;
}

} // namespace gpuinit
