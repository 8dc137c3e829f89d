// A setuid copy of a tool let a user aim it at a tree of their own (nodes
// with their group) and read root-only files back through its messages.
// Every tool refuses to start set-id.
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuinit {

using testing::run_process;
using testing::TempDir;

namespace {

// Runs `program` as uid/gid 65534 (without no_new_privs, so a set-id bit
// takes effect); returns its exit status and output.
int run_as_nobody(const std::string& program, const std::vector<std::string>& args,
                  std::string* output) {
    return testing::run_in_child(
        [&] {
            gid_t none[] = {65534};
            if (::setgroups(1, none) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
                ::setresuid(65534, 65534, 65534) != 0) {
                return 120;
            }
            std::vector<char*> argv = {const_cast<char*>(program.c_str())};
            for (const std::string& arg : args) {
                argv.push_back(const_cast<char*>(arg.c_str()));
            }
            argv.push_back(nullptr);
            ::execv(argv[0], argv.data());
            return 127;
        },
        output);
}

} // namespace

TEST(Setuid, EveryToolRefusesToRunSetIdAndReadsNothing) {
    GPUINIT_REQUIRE_ROOT();
    TempDir dir;
    ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
    struct Case {
        const char* binary;
        const char* name;
        mode_t bits;
        int refused_exit;
    } cases[] = {
        {GPU_MKNOD_BIN, "gpu-mknod", S_ISUID, 3},
        {GPU_MKNOD_BIN, "gpu-mknod", S_ISGID, 3},
        {GPU_MODLOAD_BIN, "gpu-modload", S_ISUID, 3},
    };
    for (const Case& c : cases) {
        std::string copy = dir / c.name;
        ::unlink(copy.c_str());
        ASSERT_EQ(run_process({"/bin/cp", c.binary, copy}), 0);
        ASSERT_EQ(::chown(copy.c_str(), 0, 0), 0);
        ASSERT_EQ(::chmod(copy.c_str(), 0755 | c.bits), 0);
        std::string output;
        // /etc/shadow stands for a root-only file a user would like to read
        // back through a parse error.
        int code = run_as_nobody(copy, {"--root", "/etc/shadow/..", "--dry-run"}, &output);
        ASSERT_NE(code, 120) << "could not become nobody";
        EXPECT_EQ(code, c.refused_exit) << c.name << ": " << output;
        EXPECT_NE(output.find("refuses to run setuid or setgid"), std::string::npos) << output;
        // Without the bit the same user gets an ordinary run.
        ASSERT_EQ(::chmod(copy.c_str(), 0755), 0);
        output.clear();
        EXPECT_NE(run_as_nobody(copy, {"--version"}, &output), c.refused_exit) << output;
    }
}

} // namespace gpuinit
