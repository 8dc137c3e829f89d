// Module planning on fixture module trees indexed by the real depmod, and
// failure injection through the loader interface. No kernel is touched.
#include "common/exit_codes.hpp"
#include "gpuinit/modules/executor.hpp"
#include "gpuinit/modules/option_text.hpp"
#include "gpuinit/modules/planner.hpp"
#include "json_check.hpp"
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <map>
#include <sched.h>
#include <set>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuinit {

using testing::run_process;
using testing::TempDir;
using namespace tools; // the exit codes

namespace {

constexpr const char* kRelease = "6.1.0-fake-amd64";

std::string depmod_path() {
    for (const char* path : {"/usr/sbin/depmod", "/sbin/depmod"}) {
        if (::access(path, X_OK) == 0) {
            return path;
        }
    }
    return "";
}

void write(const std::string& path, const std::string& text) {
    run_process({"/bin/mkdir", "-p", path.substr(0, path.rfind('/'))});
    FILE* out = std::fopen(path.c_str(), "w");
    ASSERT_NE(out, nullptr) << path;
    std::fputs(text.c_str(), out);
    std::fclose(out);
}

class FakeLoader : public ModuleLoader {
  public:
    bool is_loaded(const std::string& name) override { return loaded.count(name) != 0; }
    int insert(const std::string& name, const std::string& /*path*/,
               const std::string& options) override {
        inserted.push_back(options.empty() ? name : name + " " + options);
        auto failure = fail_with.find(name);
        return failure == fail_with.end() ? 0 : -failure->second;
    }
    int run_install(const std::string& name, const std::string& command) override {
        installs.push_back(name + ": " + command);
        return 0;
    }
    std::set<std::string> loaded;
    std::map<std::string, int> fail_with;
    std::vector<std::string> inserted;
    std::vector<std::string> installs;
};

class ModuleTree : public ::testing::Test {
  protected:
    void SetUp() override {
        if (depmod_path().empty()) {
            GTEST_SKIP() << "SKIPPED LOUDLY: depmod (Debian package kmod) is not installed";
        }
        std::string dir = root_ / ("lib/modules/" + std::string(kRelease));
        std::string kernel_dir = dir + "/kernel/drivers/video";
        ASSERT_EQ(run_process({"/bin/mkdir", "-p", kernel_dir}), 0);
        for (const char* module : {"nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"}) {
            ASSERT_EQ(run_process({"/bin/cp", std::string(FAKE_MODULES_DIR) + "/" + module + ".ko",
                                   kernel_dir}),
                      0);
        }
        write(dir + "/modules.order", "");
        write(dir + "/modules.builtin", "");
        std::string output;
        ASSERT_EQ(run_process({depmod_path(), "-b", root_.path(), kRelease}, &output), 0) << output;
        write(root_ / "etc/modprobe.d/nvidia.conf",
              "options nvidia NVreg_DeviceFileUID=0 NVreg_DeviceFileGID=0 "
              "NVreg_DeviceFileMode=0660 NVreg_ModifyDeviceFiles=0\n");
    }

    // The plan as "verb name options" lines, or the failure.
    std::vector<std::string> plan(const std::vector<ModuleRequest>& modules, bool force = false,
                                  bool run_install = false) {
        ModloadOptions options;
        options.release = kRelease;
        options.modules = modules;
        options.force = force;
        options.run_install = run_install;
        auto root = Sysroot::open(root_.path());
        diagnostics_ = Diagnostics();
        auto planned = plan_modules(*root, options, loader_, diagnostics_);
        std::vector<std::string> lines;
        failure_exit_ = planned ? 0 : modload_exit_for(planned.error());
        if (!planned) {
            return {"error " + std::to_string(failure_exit_) + ": " + planned.error().text()};
        }
        for (const ModuleStep& step : planned->steps) {
            switch (step.kind) {
            case ModuleStep::Kind::Insert:
                lines.push_back("insert " + step.name +
                                (step.options.empty() ? "" : " " + step.options));
                break;
            case ModuleStep::Kind::AlreadyLoaded:
                lines.push_back("loaded " + step.name);
                break;
            case ModuleStep::Kind::Builtin:
                lines.push_back("builtin " + step.name);
                break;
            case ModuleStep::Kind::RunInstall:
                lines.push_back("install " + step.name + ": " + step.command);
                break;
            }
        }
        for (const Diagnostic& problem : planned->option_errors) {
            lines.push_back("bad-option " + problem.text());
        }
        plan_ = std::move(*planned);
        return lines;
    }

    TempDir root_;
    FakeLoader loader_;
    Diagnostics diagnostics_;
    int failure_exit_ = 0;
    ModulePlan plan_;
};

using Lines = std::vector<std::string>;

constexpr int kNoNamespace = 77;

// Runs argv in a private mount namespace whose /proc/cmdline reads
// `host_cmdline`, as if the host running the tool had booted with it.
// kNoNamespace when no mount namespace can be made here.
int run_with_host_cmdline(const std::string& host_cmdline, const std::vector<std::string>& argv,
                          std::string* output) {
    TempDir dir;
    std::string cmdline = dir / "cmdline";
    write(cmdline, host_cmdline);
    return testing::run_in_child(
        [&] {
            // Root can do it directly; anyone else through a user namespace.
            if (::unshare(CLONE_NEWNS) != 0 && ::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
                return kNoNamespace;
            }
            if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
                ::mount(cmdline.c_str(), "/proc/cmdline", nullptr, MS_BIND, nullptr) != 0) {
                return kNoNamespace;
            }
            std::vector<char*> args;
            for (const std::string& arg : argv) {
                args.push_back(const_cast<char*>(arg.c_str()));
            }
            args.push_back(nullptr);
            ::execv(args[0], args.data());
            return 127;
        },
        output);
}

constexpr const char* kNvidiaOptions =
    "NVreg_DeviceFileUID=0 NVreg_DeviceFileGID=0 NVreg_DeviceFileMode=0660 "
    "NVreg_ModifyDeviceFiles=0";

} // namespace

TEST_F(ModuleTree, PlainLoad) {
    EXPECT_EQ(plan({{"nvidia", {}}}), (Lines{std::string("insert nvidia ") + kNvidiaOptions}));
    EXPECT_EQ(plan_.steps[0].path,
              root_ / ("lib/modules/" + std::string(kRelease) + "/kernel/drivers/video/nvidia.ko"));
}

TEST_F(ModuleTree, DependencyFirstWithMergedOptions) {
    EXPECT_EQ(plan({{"nvidia_uvm", {"uvm_perf_prefetch_enable=0"}}}),
              (Lines{std::string("insert nvidia ") + kNvidiaOptions,
                     "insert nvidia_uvm uvm_perf_prefetch_enable=0"}));
    EXPECT_EQ(plan({{"nvidia_drm", {}}}), (Lines{std::string("insert nvidia ") + kNvidiaOptions,
                                                 "insert nvidia_modeset", "insert nvidia_drm"}));
}

TEST_F(ModuleTree, AlreadyLoadedIsLeftAlone) {
    loader_.loaded = {"nvidia"};
    EXPECT_EQ(plan({{"nvidia", {}}, {"nvidia_uvm", {}}}),
              (Lines{"loaded nvidia", "insert nvidia_uvm"}));
}

TEST_F(ModuleTree, BlacklistIsHonouredUnlessForced) {
    write(root_ / "etc/modprobe.d/blacklist-drm.conf", "blacklist nvidia_drm\n");
    Lines refused = plan({{"nvidia_drm", {}}});
    ASSERT_EQ(refused.size(), 1u);
    EXPECT_EQ(refused[0].rfind("error 3: module nvidia_drm is blacklisted", 0), 0u) << refused[0];
    EXPECT_EQ(plan({{"nvidia_drm", {}}}, true).back(), "insert nvidia_drm");
}

TEST_F(ModuleTree, InstallLinesAreIgnoredUnlessAsked) {
    write(root_ / "etc/modprobe.d/install.conf", "install nvidia /sbin/gpu-modload nvidia\n");
    EXPECT_EQ(plan({{"nvidia_uvm", {}}}),
              (Lines{std::string("insert nvidia ") + kNvidiaOptions, "insert nvidia_uvm"}));
    EXPECT_EQ(plan({{"nvidia_uvm", {}}}, false, true),
              (Lines{"install nvidia: /sbin/gpu-modload nvidia", "insert nvidia_uvm"}));
}

TEST_F(ModuleTree, CommandLineOptionsOverrideModprobeD) {
    EXPECT_EQ(plan({{"nvidia", {"NVreg_DeviceFileMode=0600", "NVreg_EnableMSI=0"}}}),
              (Lines{"insert nvidia NVreg_DeviceFileUID=0 NVreg_DeviceFileGID=0 "
                     "NVreg_DeviceFileMode=0600 NVreg_ModifyDeviceFiles=0 NVreg_EnableMSI=0"}));
}

TEST_F(ModuleTree, RootKernelCommandLineAppliesButNotTheHosts) {
    write(root_ / "proc/cmdline", "BOOT_IMAGE=/vmlinuz quiet nvidia.NVreg_EnableMSI=0 "
                                  "nvidia.NVreg_DeviceFileMode=0640 other.x=1\n");
    // Exactly modprobe.d, then the root's cmdline: whatever the host booted
    // with never shows up.
    EXPECT_EQ(plan({{"nvidia", {}}}),
              (Lines{"insert nvidia NVreg_DeviceFileUID=0 NVreg_DeviceFileGID=0 "
                     "NVreg_DeviceFileMode=0640 NVreg_ModifyDeviceFiles=0 NVreg_EnableMSI=0"}));
}

TEST_F(ModuleTree, HostKernelCommandLineNeverReachesAnotherRoot) {
    // Two files: the later one's 0600 must win. kmod appends what it reads
    // from the host's /proc/cmdline after them, and the host's blacklist
    // would refuse nvidia itself.
    write(root_ / "etc/modprobe.d/y-vendor.conf", "options nvidia NVreg_DeviceFileMode=0666\n");
    write(root_ / "etc/modprobe.d/z-site.conf", "options nvidia NVreg_DeviceFileMode=0600\n");
    std::string output;
    int code = run_with_host_cmdline(
        "BOOT_IMAGE=/vmlinuz nvidia.NVreg_DeviceFileMode=0666 modprobe.blacklist=nouveau,nvidia "
        "nvidia.NVreg_EnableMSI=0 quiet\n",
        {GPU_MODLOAD_BIN, "--root", root_.path(), "--release", kRelease, "--dry-run", "nvidia"},
        &output);
    if (code == kNoNamespace) {
        GTEST_SKIP() << "SKIPPED LOUDLY: no private mount namespace here (needs root or"
                        " unprivileged user namespaces) to fake the host's /proc/cmdline";
    }
    EXPECT_EQ(code, kModloadOk) << output;
    EXPECT_NE(output.find("NVreg_DeviceFileMode=0600"), std::string::npos) << output;
    EXPECT_EQ(output.find("0666"), std::string::npos) << output;
    EXPECT_EQ(output.find("EnableMSI"), std::string::npos) << output;
}

TEST_F(ModuleTree, RootKernelCommandLineBlacklistApplies) {
    write(root_ / "proc/cmdline", "quiet modprobe.blacklist=nouveau,nvidia_drm\n");
    Lines refused = plan({{"nvidia_drm", {}}});
    ASSERT_EQ(refused.size(), 1u);
    EXPECT_EQ(refused[0].rfind("error 3: module nvidia_drm is blacklisted", 0), 0u) << refused[0];
    EXPECT_EQ(plan({{"nvidia_drm", {}}}, true).back(), "insert nvidia_drm");
    // modprobe.blacklist is not an option of a module called "modprobe".
    EXPECT_EQ(plan({{"nvidia", {}}}), (Lines{std::string("insert nvidia ") + kNvidiaOptions}));
}

TEST_F(ModuleTree, BuiltinModuleIsReportedNotInserted) {
    std::string dir = root_ / ("lib/modules/" + std::string(kRelease));
    write(dir + "/modules.builtin", "kernel/drivers/video/fb_builtin.ko\n");
    std::string output;
    ASSERT_EQ(run_process({depmod_path(), "-b", root_.path(), kRelease}, &output), 0) << output;
    EXPECT_EQ(plan({{"fb_builtin", {}}, {"nvidia", {}}}),
              (Lines{"builtin fb_builtin", std::string("insert nvidia ") + kNvidiaOptions}));
}

TEST_F(ModuleTree, OptionsGivenForTheAliasOrAGlobApply) {
    write(root_ / "etc/modprobe.d/alias.conf",
          "alias gpu-compute nvidia_uvm\noptions gpu-compute uvm_perf_prefetch_enable=0\n"
          "options nvidia_u* uvm_ats_mode=0\n");
    EXPECT_EQ(plan({{"gpu-compute", {}}}),
              (Lines{std::string("insert nvidia ") + kNvidiaOptions,
                     "insert nvidia_uvm uvm_perf_prefetch_enable=0 uvm_ats_mode=0"}));
    // By its own name the alias's options do not apply.
    EXPECT_EQ(plan({{"nvidia_uvm", {}}}), (Lines{std::string("insert nvidia ") + kNvidiaOptions,
                                                 "insert nvidia_uvm uvm_ats_mode=0"}));
}

TEST_F(ModuleTree, AnAliasLoadsEveryModuleItNames) {
    write(root_ / "etc/modprobe.d/alias.conf",
          "alias gpu-display nvidia_drm\nalias gpu-display nvidia_uvm\n");
    Lines lines = plan({{"gpu-display", {}}});
    ASSERT_EQ(lines.size(), 4u) << ::testing::PrintToString(lines);
    EXPECT_EQ(lines[0], std::string("insert nvidia ") + kNvidiaOptions);
    EXPECT_NE(std::find(lines.begin(), lines.end(), "insert nvidia_drm"), lines.end());
    EXPECT_NE(std::find(lines.begin(), lines.end(), "insert nvidia_uvm"), lines.end());
}

TEST_F(ModuleTree, InstallCommandsGetTheCommandLineOptions) {
    write(root_ / "etc/modprobe.d/install.conf",
          "install nvidia /sbin/site-load nvidia $CMDLINE_OPTS --quiet\n");
    EXPECT_EQ(plan({{"nvidia", {"NVreg_EnableMSI=0", "NVreg_EnableMSI=1"}}}, false, true),
              (Lines{"install nvidia: /sbin/site-load nvidia NVreg_EnableMSI=1 --quiet"}));
}

TEST_F(ModuleTree, MissingModuleNamesTheDirectory) {
    Lines lines = plan({{"nvidia_peermem", {}}});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(failure_exit_, kModloadNotFound);
    EXPECT_NE(lines[0].find("module nvidia_peermem not found in " +
                            root_ / ("lib/modules/" + std::string(kRelease))),
              std::string::npos)
        << lines[0];
}

TEST_F(ModuleTree, AliasesResolve) {
    write(root_ / "etc/modprobe.d/alias.conf", "alias gpu-driver nvidia\n");
    EXPECT_EQ(plan({{"gpu-driver", {}}}), (Lines{std::string("insert nvidia ") + kNvidiaOptions}));
    EXPECT_EQ(plan({{"pci:v000010DEd00002330sv000010DEsd00001626bc03sc02i00", {}}}),
              (Lines{std::string("insert nvidia ") + kNvidiaOptions}));
}

TEST_F(ModuleTree, OptionsFromTwoFilesMerge) {
    write(root_ / "lib/modprobe.d/nvidia-vendor.conf",
          "options nvidia NVreg_PreserveVideoMemoryAllocations=1 NVreg_DeviceFileMode=0666\n");
    // /etc/modprobe.d/nvidia.conf comes first in kmod's order; a later file's
    // value for the same key wins, as the kernel applies the last one.
    Lines lines = plan({{"nvidia", {}}});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("NVreg_PreserveVideoMemoryAllocations=1"), std::string::npos)
        << lines[0];
    EXPECT_NE(lines[0].find("NVreg_ModifyDeviceFiles=0"), std::string::npos) << lines[0];
    // A file of the same name in /etc hides the one in /lib.
    write(root_ / "etc/modprobe.d/nvidia-vendor.conf", "options nvidia NVreg_EnableMSI=1\n");
    lines = plan({{"nvidia", {}}});
    EXPECT_EQ(lines[0].find("NVreg_PreserveVideoMemoryAllocations"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("NVreg_EnableMSI=1"), std::string::npos) << lines[0];
}

TEST_F(ModuleTree, SoftdepsLoadFirst) {
    write(root_ / "etc/modprobe.d/softdep.conf", "softdep nvidia_uvm pre: nvidia_modeset\n");
    EXPECT_EQ(plan({{"nvidia_uvm", {}}}), (Lines{std::string("insert nvidia ") + kNvidiaOptions,
                                                 "insert nvidia_modeset", "insert nvidia_uvm"}));
}

struct Injected {
    const char* name;
    int error;
    int exit_code;
    const char* message;
};

void PrintTo(const Injected& injected, std::ostream* out) {
    *out << injected.name;
}

class InjectedFailure : public ModuleTree, public ::testing::WithParamInterface<Injected> {};

TEST_P(InjectedFailure, MapsToMessageAndExitCode) {
    ASSERT_EQ(plan({{"nvidia_uvm", {}}}).size(), 2u);
    loader_.fail_with["nvidia_uvm"] = GetParam().error;
    ModloadReport report = execute_plan(plan_, loader_);
    ASSERT_TRUE(report.failure);
    EXPECT_EQ(modload_exit_for(*report.failure), GetParam().exit_code);
    EXPECT_EQ(report.failure->code, GetParam().error);
    EXPECT_NE(report.failure->message.find(GetParam().message), std::string::npos)
        << report.failure->message;
    EXPECT_EQ(loader_.inserted.front(), std::string("nvidia ") + kNvidiaOptions);
}

INSTANTIATE_TEST_SUITE_P(
    Errors, InjectedFailure,
    ::testing::Values(Injected{"ENOENT", ENOENT, kModloadBadModule, "unknown symbol"},
                      Injected{"ENOSYS", ENOSYS, kModloadOtherError, "cannot load modules"},
                      Injected{"EPERM", EPERM, kModloadPermission, "run as root"},
                      Injected{"ENOEXEC", ENOEXEC, kModloadBadModule, "dmesg"},
                      Injected{"EINVAL", EINVAL, kModloadBadModule, "vermagic"},
                      Injected{"EKEYREJECTED", EKEYREJECTED, kModloadKeyRejected,
                               "signature rejected"}),
    [](const ::testing::TestParamInfo<Injected>& param_info) {
        return std::string(param_info.param.name);
    });

TEST_F(ModuleTree, AlreadyExistsCountsAsLoaded) {
    ASSERT_EQ(plan({{"nvidia_uvm", {}}}).size(), 2u);
    loader_.fail_with["nvidia"] = EEXIST;
    ModloadReport report = execute_plan(plan_, loader_);
    EXPECT_FALSE(report.failure) << report.failure->message;
    ASSERT_EQ(report.done.size(), 2u);
    EXPECT_EQ(report.done[0].kind, ModuleStep::Kind::AlreadyLoaded);
    EXPECT_EQ(report.done[1].kind, ModuleStep::Kind::Insert);
}

TEST_F(ModuleTree, ToolDryRunShowsNvidiaFirstWithMergedOptions) {
    std::string output;
    int code = run_process({GPU_MODLOAD_BIN, "--root", root_.path(), "--release", kRelease,
                            "--dry-run", "nvidia_uvm", "nvidia", "NVreg_DeviceFileMode=0600"},
                           &output);
    EXPECT_EQ(code, 0) << output;
    size_t nvidia = output.find("insmod          nvidia ");
    size_t uvm = output.find("insmod          nvidia_uvm ");
    ASSERT_NE(nvidia, std::string::npos) << output;
    ASSERT_NE(uvm, std::string::npos) << output;
    EXPECT_LT(nvidia, uvm);
    EXPECT_NE(output.find("NVreg_DeviceFileMode=0600 NVreg_ModifyDeviceFiles=0"), std::string::npos)
        << output;
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "--root", root_.path(), "--dry-run", "nvidia_nope"}),
              kModloadNotFound);
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "NVreg_X=1"}), kModloadUsage);
    // An option after a module would otherwise be a module or a parameter.
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "--root", root_.path(), "nvidia", "--dry-run"}),
              kModloadUsage);
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "--root", root_.path(), "nvidia", "--x=1"}),
              kModloadUsage);
}

// --root DIR once loaded DIR's modules into the running kernel and ran
// DIR's install commands with this machine's shell, judging "loaded" from
// DIR/sys. Now only a dry run, unless --live says otherwise.
TEST_F(ModuleTree, AnotherRootNeverReachesTheRunningKernelUnasked) {
    std::string output;
    EXPECT_EQ(
        run_process({GPU_MODLOAD_BIN, "--root", root_.path(), "--release", kRelease, "nvidia"},
                    &output),
        kModloadUsage);
    EXPECT_NE(output.find("does not load into the running kernel"), std::string::npos) << output;
    EXPECT_NE(output.find("--live"), std::string::npos) << output;
    output.clear();
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "--live", "--dry-run", "nvidia"}, &output),
              kModloadUsage);
    EXPECT_NE(output.find("--live is for --root DIR"), std::string::npos) << output;
    // With --live, "already loaded" is the running kernel's view: a
    // sys/module/nvidia under DIR does not count.
    write(root_ / "sys/module/nvidia/initstate", "live\n");
    output.clear();
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "--root", root_.path(), "--release", kRelease,
                           "--dry-run", "nvidia"},
                          &output),
              kModloadOk);
    EXPECT_NE(output.find("already-loaded  nvidia"), std::string::npos) << output;
    output.clear();
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "--root", root_.path(), "--release", kRelease,
                           "--dry-run", "--live", "nvidia"},
                          &output),
              kModloadOk);
    EXPECT_NE(output.find("insmod          nvidia "), std::string::npos) << output;
}

// modprobe.d was handed to libkmod unchecked: a FIFO .conf hung it, a
// 100 MB one took 8 s and 700 MB. Both are refused, naming the file.
TEST_F(ModuleTree, ModprobeDIsBoundedBeforeLibkmodReadsIt) {
    std::string fifo = root_ / "etc/modprobe.d/fifo.conf";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
    Lines lines = plan({{"nvidia", {}}});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(failure_exit_, kModloadOtherError) << lines[0];
    EXPECT_NE(lines[0].find(fifo + " is not a regular file"), std::string::npos) << lines[0];
    ::unlink(fifo.c_str());

    std::string big = root_ / "run/modprobe.d/big.conf";
    write(big, "# " + std::string(2u << 20, 'x') + "\n");
    lines = plan({{"nvidia", {}}});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find(big + " is 2097155 bytes"), std::string::npos) << lines[0];
    ::unlink(big.c_str());
    // A directory named like a file is skipped, as libkmod would.
    ASSERT_EQ(run_process({"/bin/mkdir", "-p", root_ / "etc/modprobe.d/dir.conf"}), 0);
    EXPECT_EQ(plan({{"nvidia", {}}}), (Lines{std::string("insert nvidia ") + kNvidiaOptions}));
    // Only *.conf and *.alias, and the same name in an earlier directory hides it.
    write(root_ / "etc/modprobe.d/notes.txt", "options nvidia NVreg_EnableMSI=1\n");
    EXPECT_EQ(plan({{"nvidia", {}}}), (Lines{std::string("insert nvidia ") + kNvidiaOptions}));
}

// libkmod printed "libkmod: ERROR: ..." to stderr while parsing the
// configuration, before its log level could be set: now its words are
// warnings of the run.
TEST_F(ModuleTree, LibkmodsComplaintsAreWarningsNotStrayStderr) {
    write(root_ / "etc/modprobe.d/bad.conf", "this is not a modprobe command\n");
    std::string output;
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "--root", root_.path(), "--release", kRelease,
                           "--dry-run", "nvidia"},
                          &output),
              kModloadOk);
    EXPECT_NE(output.find("gpu-modload: warning: libkmod: "), std::string::npos) << output;
    EXPECT_NE(output.find("bad.conf"), std::string::npos) << output;
    EXPECT_EQ(output.find("\nlibkmod:"), std::string::npos) << output;
    EXPECT_NE(output.rfind("libkmod:", 0), 0u) << output;
}

// gpu-modload --dry-run passed NVreg_DeviceFileMod=0600 (a misspelt name),
// NVreg_DeviceFileMode=abc and NVreg_ModifyDeviceFiles=1 without a word.
// Now each is one error line naming its origin and the fix, nothing is
// planned or loaded, and --force goes on with warnings.
TEST_F(ModuleTree, ToolRefusesOptionsTheModuleDoesNotTake) {
    write(root_ / "etc/modprobe.d/typo.conf",
          "# a comment\noptions nvidia NVreg_EnableMSI=0 \\\n  NVreg_DeviceFileMod=0600\n");
    std::string output;
    int code =
        run_process({GPU_MODLOAD_BIN, "--root", root_.path(), "--release", kRelease, "--dry-run",
                     "nvidia", "NVreg_DeviceFileMode=abc", "NVreg_ModifyDeviceFiles=1"},
                    &output);
    EXPECT_EQ(code, kModloadBadModule) << output;
    std::string conf = root_ / "etc/modprobe.d/typo.conf";
    // In the order the options reach the module: a later value replaces an
    // earlier one in place.
    EXPECT_EQ(output, "gpu-modload: error: NVreg_DeviceFileMode=abc (command line): nvidia's"
                      " NVreg_DeviceFileMode is an int (a 32-bit number: decimal, 0x hex or 0"
                      " octal), not 'abc', so the kernel would refuse to load nvidia: give it"
                      " a valid value\n"
                      "gpu-modload: error: NVreg_ModifyDeviceFiles=1 (command line): every CUDA"
                      " or NVML start would have nvidia-modprobe reset every /dev/nvidia* to"
                      " NVreg_DeviceFileUID/GID/Mode, undoing the per-GPU groups of gpu-mknod:"
                      " set NVreg_ModifyDeviceFiles=0\n"
                      "gpu-modload: error: " +
                          conf +
                          ":2: NVreg_DeviceFileMod=0600: nvidia declares no parameter"
                          " NVreg_DeviceFileMod (did you mean NVreg_DeviceFileMode?), so the kernel"
                          " would ignore it: correct the name or remove the option\n");
    // --json: one "error" key (the first), every problem in "diagnostics".
    output.clear();
    EXPECT_EQ(
        run_process({GPU_MODLOAD_BIN, "--root", root_.path(), "--release", kRelease, "--dry-run",
                     "--json", "nvidia", "NVreg_DeviceFileMode=abc", "NVreg_ModifyDeviceFiles=1"},
                    &output),
        kModloadBadOption);
    std::string why;
    EXPECT_TRUE(testing::valid_json(output, &why)) << why << ": " << output;
    EXPECT_EQ(output.find("\"error\":"), output.rfind("\"error\":")) << output;
    EXPECT_NE(output.find("NVreg_DeviceFileMod=0600"), std::string::npos) << output;
    // The same refusal stops a real load before anything is inserted.
    plan({{"nvidia_uvm", {}}, {"nvidia", {"NVreg_ModifyDeviceFiles=1"}}});
    ASSERT_FALSE(plan_.option_errors.empty());
    EXPECT_EQ(modload_exit_for(plan_.option_errors[0]), kModloadBadModule);
    // From modprobe.d, with its file and line; --force loads anyway, warning.
    write(root_ / "etc/modprobe.d/zz-modify.conf", "options nvidia NVreg_ModifyDeviceFiles=1\n");
    ::unlink(conf.c_str());
    output.clear();
    code = run_process(
        {GPU_MODLOAD_BIN, "--root", root_.path(), "--release", kRelease, "--dry-run", "nvidia"},
        &output);
    EXPECT_EQ(code, kModloadBadModule) << output;
    EXPECT_EQ(output.rfind("gpu-modload: error: " + root_ / "etc/modprobe.d/zz-modify.conf" +
                               ":1: NVreg_ModifyDeviceFiles=1: ",
                           0),
              0u)
        << output;
    output.clear();
    code = run_process({GPU_MODLOAD_BIN, "--root", root_.path(), "--release", kRelease, "--dry-run",
                        "--force", "nvidia"},
                       &output);
    EXPECT_EQ(code, kModloadOk) << output;
    EXPECT_NE(output.find("insmod          nvidia "), std::string::npos) << output;
    EXPECT_NE(output.find("gpu-modload: warning: " + root_ / "etc/modprobe.d/zz-modify.conf" +
                          ":1: NVreg_ModifyDeviceFiles=1: "),
              std::string::npos)
        << output;
    EXPECT_NE(output.find("(--force: loading anyway)"), std::string::npos) << output;
    EXPECT_EQ(output.find("error"), std::string::npos) << output;
}

TEST_F(ModuleTree, AModuleWhoseParametersCannotBeReadIsSaidOnce) {
    std::string ko =
        root_ / ("lib/modules/" + std::string(kRelease) + "/kernel/drivers/video/nvidia.ko");
    write(ko, ""); // an empty placeholder: no ELF, no .modinfo
    Lines lines = plan({{"nvidia", {"NVreg_Anything=1"}}});
    EXPECT_EQ(lines, (Lines{std::string("insert nvidia ") + kNvidiaOptions + " NVreg_Anything=1"}));
    ASSERT_EQ(diagnostics_.count(Severity::Warning), 1u);
    EXPECT_NE(diagnostics_.items()[0].message.find("cannot read the parameters nvidia declares"),
              std::string::npos)
        << diagnostics_.items()[0].message;
}

// --check judged only what the loaded driver got: a misspelt or dangerous
// option in modprobe.d showed up at the next load. Now it reads them too,
// against the module file.
TEST_F(ModuleTree, CheckAlsoJudgesTheConfiguredOptions) {
    testing::FakeMachine machine = testing::workstation(2);
    machine.params = "ModifyDeviceFiles: 0\nDeviceFileUID: 0\nDeviceFileGID: 0\n"
                     "DeviceFileMode: 432\n";
    ASSERT_TRUE(testing::write_fixture(machine, root_.path()));
    std::vector<std::string> check = {GPU_MODLOAD_BIN, "--root", root_.path(),
                                      "--release",     kRelease, "--check"};
    std::string output;
    EXPECT_EQ(run_process(check, &output), kModloadOk) << output;
    EXPECT_EQ(output.find("error"), std::string::npos) << output;
    std::string conf = root_ / "etc/modprobe.d/zz.conf";
    write(conf, "options nvidia NVreg_ModifyDeviceFiles=1\n");
    output.clear();
    EXPECT_EQ(run_process(check, &output), kModloadCheckFailed) << output;
    EXPECT_NE(output.find("gpu-modload: DANGER: " + conf + ":1: NVreg_ModifyDeviceFiles=1: "),
              std::string::npos)
        << output;
    write(conf, "options nvidia NVreg_DeviceFileMod=0600\n");
    output.clear();
    EXPECT_EQ(run_process(check, &output), kModloadBadModule) << output;
    EXPECT_NE(output.find("gpu-modload: error: " + conf + ":1: NVreg_DeviceFileMod=0600: "),
              std::string::npos)
        << output;
    // Without the module tree the configuration is not judged, and it says so.
    ASSERT_EQ(run_process({"/bin/rm", "-rf", root_ / "lib/modules"}), 0);
    ::unlink(conf.c_str());
    output.clear();
    EXPECT_EQ(run_process(check, &output), kModloadOk) << output;
    EXPECT_NE(output.find("warning: the configured options of nvidia are not checked"),
              std::string::npos)
        << output;
}

// gpu-modload had its own numbers (2 not found, 6 blacklisted, 7 danger, 9
// driver not loaded...); now gpuinit(8)'s table: written out, not through
// the enum, so that a change of the enum shows here.
TEST_F(ModuleTree, ToolExitCodesFollowTheTable) {
    auto exit_of = [&](std::vector<std::string> args) {
        std::vector<std::string> argv = {GPU_MODLOAD_BIN, "--root", root_.path(), "--release",
                                         kRelease};
        argv.insert(argv.end(), args.begin(), args.end());
        return run_process(argv);
    };
    EXPECT_EQ(exit_of({"--dry-run", "nvidia"}), 0);
    EXPECT_EQ(exit_of({"--dry-run", "--bogus"}), 1);
    EXPECT_EQ(exit_of({"--dry-run", "nvidia_nope"}), 3);
    EXPECT_EQ(exit_of({"--dry-run", "nvidia", "NVreg_DeviceFileMod=0600"}), 3);
    write(root_ / "etc/modprobe.d/blacklist.conf", "blacklist nvidia_drm\n");
    EXPECT_EQ(exit_of({"--dry-run", "nvidia_drm"}), 3);
    EXPECT_EQ(exit_of({"--check"}), 3); // the driver is not loaded
    testing::FakeMachine machine = testing::workstation(1);
    machine.params = "ModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 0\n"
                     "DeviceFileMode: 438\n";
    ASSERT_TRUE(testing::write_fixture(machine, root_.path()));
    EXPECT_EQ(exit_of({"--check"}), 4);
}

// A bare NVreg_ word was taken for a module: "module NVreg_DeviceFileMode
// not found".
TEST_F(ModuleTree, AnOptionWithoutAValueIsAUsageError) {
    std::string output;
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "--root", root_.path(), "--release", kRelease,
                           "--dry-run", "nvidia", "NVreg_DeviceFileMode"},
                          &output),
              kModloadUsage);
    EXPECT_NE(output.find("NVreg_DeviceFileMode is a module option: give it as"
                          " NVreg_DeviceFileMode=VALUE after its module"),
              std::string::npos)
        << output;
    EXPECT_EQ(output.find("not found"), std::string::npos) << output;
}

// The sample module tree (gpuinit-make-fixture --modules): gpu-modload
// finds its one release without --release, plans the shipped options, and
// refuses a bad one there as on a real machine.
TEST(SampleModuleTree, GpuModloadWorksOnIt) {
    if (depmod_path().empty()) {
        GTEST_SKIP() << "SKIPPED LOUDLY: depmod (Debian package kmod) is not installed";
    }
    TempDir dir;
    std::string root = dir / "machine";
    std::string output;
    ASSERT_EQ(run_process({GPUINIT_MAKE_FIXTURE_BIN, "--gpus", "2", "--modules", root}, &output), 0)
        << output;
    std::string modules = root + "/lib/modules/6.1.0-gpuinit-sample/updates/dkms/";
    output.clear();
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "--root", root, "--dry-run", "--modeset"}, &output), 0)
        << output;
    EXPECT_EQ(output, "insmod          nvidia           " + modules + "nvidia.ko " +
                          kNvidiaOptions +
                          "\n"
                          "insmod          nvidia_uvm       " +
                          modules +
                          "nvidia-uvm.ko\n"
                          "insmod          nvidia_modeset   " +
                          modules +
                          "nvidia-modeset.ko\n"
                          "insmod          nvidia_drm       " +
                          modules + "nvidia-drm.ko\n");
    output.clear();
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "--root", root, "--check"}, &output), 0) << output;
    EXPECT_EQ(output.find("warning"), std::string::npos) << output;
    output.clear();
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "--root", root, "--dry-run", "nvidia",
                           "NVreg_DeviceFileMod=0600"},
                          &output),
              3)
        << output;
    EXPECT_EQ(output.rfind("gpu-modload: error: NVreg_DeviceFileMod=0600 (command line): nvidia"
                           " declares no parameter NVreg_DeviceFileMod (did you mean"
                           " NVreg_DeviceFileMode?)",
                           0),
              0u)
        << output;
    output.clear();
    EXPECT_EQ(run_process({GPU_MODLOAD_BIN, "--root", root, "--dry-run", "--force", "nvidia",
                           "NVreg_DeviceFileMod=0600"},
                          &output),
              0)
        << output;
    EXPECT_NE(output.find("gpu-modload: warning: NVreg_DeviceFileMod=0600"), std::string::npos)
        << output;
    EXPECT_NE(output.find("insmod          nvidia "), std::string::npos) << output;
}

TEST(ModuleOptions, MergeReplacesKeysInPlace) {
    EXPECT_EQ(merge_module_options({"a=1 b=2", "c=3", "a=9"}), "a=9 b=2 c=3");
    EXPECT_EQ(merge_module_options({"s=\"x y\" flag"}), "s=\"x y\" flag");
    EXPECT_EQ(merge_module_options({}), "");
}

} // namespace gpuinit
