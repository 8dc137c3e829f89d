// The tools as processes: shared options, the multi-call binary, and what
// reaches the terminal from hostile input files.
#include "json_check.hpp"
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <chrono>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit {

using testing::FakeMachine;
using testing::run_process;
using testing::TempDir;
using testing::workstation;
using testing::write_fixture;

namespace {

void write_policy(const TempDir& dir, const std::string& text) {
    std::ofstream(dir / "etc/gpu-restriction.conf", std::ios::binary) << text;
}

bool exists(const std::string& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0;
}

} // namespace

// --root "" once meant the live root for both tools.
TEST(Tools, AnEmptyRootIsAUsageError) {
    for (const char* tool : {GPU_MKNOD_BIN, GPU_MODLOAD_BIN}) {
        std::string output;
        EXPECT_EQ(run_process({tool, "--root", "", "--dry-run"}, &output), 1) << tool;
        EXPECT_NE(output.find("an empty root is not '/'"), std::string::npos) << output;
        output.clear();
        EXPECT_EQ(run_process({tool, "--root="}, &output), 1) << tool;
    }
}

// "/." is "/": gpu-modload once took it for another machine and listed
// /./lib/modules instead of using the running kernel's release.
TEST(Tools, RootSpelledAnotherWayIsStillThisMachine) {
    for (const char* tool : {GPU_MODLOAD_BIN, GPU_MKNOD_BIN}) {
        std::string plain;
        std::string dotted;
        int plain_code = run_process({tool, "--root", "/", "--dry-run", "--json"}, &plain);
        int dotted_code = run_process({tool, "--root", "/.", "--dry-run", "--json"}, &dotted);
        EXPECT_EQ(plain_code, dotted_code) << tool;
        EXPECT_EQ(plain, dotted) << tool;
    }
}

TEST(Tools, SharedOptionsBehaveAlike) {
    for (const char* tool : {GPU_MKNOD_BIN, GPU_MODLOAD_BIN}) {
        std::string output;
        EXPECT_EQ(run_process({tool, "--help"}, &output), 0);
        EXPECT_NE(output.find("-r, --root DIR"), std::string::npos) << output;
        output.clear();
        EXPECT_EQ(run_process({tool, "--bogus"}, &output), 1);
        EXPECT_NE(output.find("unknown option --bogus"), std::string::npos) << output;
        EXPECT_NE(output.find("Try '"), std::string::npos) << output;
        output.clear();
        EXPECT_EQ(run_process({tool, "--root"}, &output), 1);
        EXPECT_NE(output.find("needs a value"), std::string::npos) << output;
    }
}

// One binary, every tool: by its link's name, or by its first argument.
TEST(Tools, TheMultiCallBinaryDispatchesOnItsName) {
    TempDir dir;
    std::string output;
    EXPECT_EQ(run_process({GPUINIT_BIN, "mknod", "--version"}, &output), 0);
    EXPECT_EQ(output.rfind("gpu-mknod ", 0), 0u) << output;
    output.clear();
    EXPECT_EQ(run_process({GPUINIT_BIN, "gpu-modload", "--version"}, &output), 0);
    EXPECT_EQ(output.rfind("gpu-modload ", 0), 0u) << output;
    ASSERT_EQ(::symlink(GPUINIT_BIN, (dir / "gpu-mknod").c_str()), 0);
    output.clear();
    EXPECT_EQ(run_process({dir / "gpu-mknod", "--version"}, &output), 0);
    EXPECT_EQ(output.rfind("gpu-mknod ", 0), 0u) << output;
    // Only an installed name dispatches: under another name it is gpuinit.
    ASSERT_EQ(::symlink(GPUINIT_BIN, (dir / "mknod").c_str()), 0);
    output.clear();
    EXPECT_EQ(run_process({dir / "mknod", "--version"}, &output), 0);
    EXPECT_EQ(output.rfind("gpuinit ", 0), 0u) << output;
    output.clear();
    EXPECT_EQ(run_process({GPUINIT_BIN, "--help"}, &output), 0);
    EXPECT_NE(output.find("modload"), std::string::npos) << output;
    EXPECT_EQ(run_process({GPUINIT_BIN}), 1);
    output.clear();
    EXPECT_EQ(run_process({GPUINIT_BIN, "bogus\x1b"}, &output), 1);
    EXPECT_NE(output.find("unknown command 'bogus\\x1b'"), std::string::npos) << output;
}

// Text from files reaches the terminal escaped (ESC, BEL, CSI), whole
// (a NUL does not cut it) and short (a huge value is cut, with its size).
TEST(Tools, MessagesFromHostileFilesAreEscapedWholeAndShort) {
    TempDir dir;
    FakeMachine machine = workstation(1);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    struct Case {
        std::string policy;
        std::string expected;
    } cases[] = {
        {"gpu=0 group=\x1b]0;pwned\x07 mode=0660\n", "group=\\x1b]0;pwned\\x07"},
        {std::string("gpu=0 group=ab\0cd\n", 18), "group=ab\\x00cd is not a valid group name"},
        {"gpu=\xc2\x9b"
         "2J group=x\n",
         "gpu=\\xc2\\x9b2J"},
        {"gpu=0 group=" + std::string(100000, 'g') + ":\n", "(100001 bytes)"},
    };
    for (const Case& c : cases) {
        write_policy(dir, c.policy);
        std::string output;
        EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--dry-run"}, &output), 3);
        EXPECT_NE(output.find(c.expected), std::string::npos) << output;
        EXPECT_EQ(output.find('\x1b'), std::string::npos) << output;
        EXPECT_EQ(output.find('\x07'), std::string::npos) << output;
        EXPECT_EQ(output.find("\xc2\x9b"), std::string::npos) << output;
        EXPECT_LT(output.size(), 1000u);
    }
}

// A policy byte that is not UTF-8 once made --json print invalid JSON.
TEST(Tools, JsonIsJsonWhateverTheFilesHold) {
    TempDir dir;
    FakeMachine machine = workstation(2);
    ASSERT_TRUE(write_fixture(machine, dir.path()));
    write_policy(dir, "gpu=0 group=gr\xffp\ngpu=1 group=\xc2\x9bx\n");
    std::string output;
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--dry-run", "--json"}, &output),
              2);
    std::string why;
    EXPECT_TRUE(testing::valid_json(output, &why)) << why << "\n" << output;
    EXPECT_NE(output.find("gr\xef\xbf\xbdp"), std::string::npos) << output;
}

// A FIFO at an input path hung the tool, for some paths after it had taken
// the run lock; now it is refused at once and nothing is locked.
TEST(Tools, AFifoAtAnInputPathIsRefusedWithoutHangingOrLocking) {
    for (const char* input : {"etc/group", "etc/passwd", "etc/gpu-restriction.conf", "proc/devices",
                              "proc/driver/nvidia/gpus/0000:17:00.0/information"}) {
        TempDir dir;
        ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
        ::unlink((dir / input).c_str());
        ASSERT_EQ(::mkfifo((dir / input).c_str(), 0644), 0) << input;
        std::string output;
        auto start = std::chrono::steady_clock::now();
        int code = run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--dry-run"}, &output);
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << input;
        EXPECT_NE(code, 0) << input << "\n" << output;
        EXPECT_NE(output.find(dir / input), std::string::npos) << output;
        EXPECT_NE(output.find("not a regular file"), std::string::npos) << output;
        EXPECT_FALSE(exists(dir / "run/gpuinit/lock")) << input;
    }
    // The records: read by --remove.
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(1), dir.path()));
    ASSERT_EQ(::mkdir((dir / "run/gpuinit").c_str(), 0755), 0);
    ASSERT_EQ(::mkfifo((dir / "run/gpuinit/gpus").c_str(), 0644), 0);
    std::string output;
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--dry-run", "--remove", "--device",
                           "0000:99:00.0"},
                          &output),
              2);
    EXPECT_NE(output.find("not a regular file"), std::string::npos) << output;
}

} // namespace gpuinit

namespace gpuinit {

// --mig plans only the MIG cap nodes (a scheduler prolog after nvidia-smi mig
// changes), and excludes the other scopes.
TEST(Tools, MknodMigScopeTouchesOnlyTheCapNodes) {
    TempDir dir;
    ASSERT_TRUE(testing::write_fixture(testing::a100_mig_box(), dir.path()));
    std::string output;
    EXPECT_EQ(
        testing::run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--mig", "--dry-run"}, &output),
        0);
    EXPECT_NE(output.find("/dev/nvidia-caps/nvidia-cap1 "), std::string::npos) << output;
    EXPECT_NE(output.find("DeviceFileModify 1 -> 0"), std::string::npos) << output;
    EXPECT_EQ(output.find("/dev/nvidia0 "), std::string::npos) << output;
    EXPECT_EQ(output.find("/dev/nvidiactl "), std::string::npos) << output;
    for (const char* other : {"--control", "--device=0"}) {
        output.clear();
        EXPECT_EQ(
            testing::run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--mig", other}, &output), 1)
            << other;
        EXPECT_NE(output.find("give one of --device, --control and --mig"), std::string::npos)
            << output;
    }
}

} // namespace gpuinit
