#include "gpuinit/base/process.hpp"
#include "gpuinit/base/spawn.hpp"
#include "temp_dir.hpp"

#include <cerrno>
#include <csignal>
#include <fstream>
#include <gtest/gtest.h>
#include <thread>

namespace gpuinit {

using namespace std::chrono_literals;
using testing::TempDir;

namespace {

pid_t pid_in(const std::string& path) {
    std::ifstream in(path);
    pid_t pid = 0;
    in >> pid;
    return pid;
}

// Whether `pid` has died within two seconds: gone, or a zombie that is not
// ours to reap (a grandchild whose parent was killed too).
bool dies(pid_t pid) {
    for (auto until = std::chrono::steady_clock::now() + 2s;
         std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(10ms)) {
        if (::kill(pid, 0) != 0 && errno == ESRCH) {
            return true;
        }
        std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
        std::string pid_field;
        std::string comm;
        char state = '?';
        if (stat >> pid_field >> comm >> state && state == 'Z') {
            return true;
        }
    }
    return false;
}

// Whether `pid`, a child of run_program, is gone, not left as a zombie.
bool reaped(pid_t pid) {
    return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace

TEST(Spawn, ExitStatusOutputAndEnvironment) {
    std::string output;
    auto status = run_program({{"/bin/sh", "-c", "echo out; echo err >&2; echo $EXTRA; exit 3"},
                               {"EXTRA=given"},
                               &output});
    ASSERT_TRUE(status) << status.error().message;
    EXPECT_EQ(*status, 3);
    EXPECT_EQ(output, "out\nerr\ngiven\n");
    auto killed = run_program({{"/bin/sh", "-c", "kill -9 $$"}, {}, nullptr});
    ASSERT_TRUE(killed);
    EXPECT_EQ(*killed, 128 + 9);
    auto missing = run_program({{"/nonexistent/program"}, {}, nullptr});
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().message.find("/nonexistent/program"), std::string::npos);
}

TEST(Spawn, BoundsLeaveOutputAndExitStatusAsTheyAre) {
    std::string output;
    SpawnRequest request{{"/bin/sh", "-c", "printf %10000s x; echo err >&2; exit 3"}, {}, &output};
    request.output_limit = 10004; // exactly what it prints
    request.timeout = 10s;
    auto status = run_program(request);
    ASSERT_TRUE(status) << status.error().message;
    EXPECT_EQ(*status, 3);
    EXPECT_EQ(output, std::string(9999, ' ') + "xerr\n");

    SpawnRequest killed{{"/bin/sh", "-c", "kill -9 $$"}, {}, nullptr};
    killed.timeout = 10s;
    auto status_killed = run_program(killed);
    ASSERT_TRUE(status_killed) << status_killed.error().message;
    EXPECT_EQ(*status_killed, 128 + 9);

    SpawnRequest quiet{{"/bin/sh", "-c", "exit 5"}, {}, nullptr};
    quiet.timeout = 10s;
    auto status_quiet = run_program(quiet);
    ASSERT_TRUE(status_quiet) << status_quiet.error().message;
    EXPECT_EQ(*status_quiet, 5);
}

TEST(Spawn, OutputOverTheLimitIsRefusedAndTheProgramKilled) {
    TempDir dir;
    std::string output;
    SpawnRequest request{
        {"/bin/sh", "-c", "echo $$ > '" + dir / "pid" + "'; exec /usr/bin/yes"}, {}, &output};
    request.output_limit = 65536;
    auto start = std::chrono::steady_clock::now();
    auto status = run_program(request);
    EXPECT_LT(seconds_since(start), 5.0);
    ASSERT_FALSE(status);
    EXPECT_EQ(status.error().code, EFBIG);
    EXPECT_NE(status.error().message.find("/bin/sh"), std::string::npos) << status.error().message;
    EXPECT_NE(status.error().message.find("65536 bytes"), std::string::npos)
        << status.error().message;
    EXPECT_EQ(output.size(), 65536u);
    EXPECT_EQ(output.substr(0, 4), "y\ny\n");
    EXPECT_TRUE(reaped(pid_in(dir / "pid")));
}

TEST(Spawn, AProgramPastItsTimeoutIsKilled) {
    TempDir dir;
    SpawnRequest request{
        {"/bin/sh", "-c", "echo $$ > '" + dir / "pid" + "'; exec /bin/sleep 30"}, {}, nullptr};
    request.timeout = 200ms;
    auto start = std::chrono::steady_clock::now();
    auto status = run_program(request);
    double took = seconds_since(start);
    EXPECT_GE(took, 0.19);
    EXPECT_LT(took, 2.0);
    ASSERT_FALSE(status);
    EXPECT_EQ(status.error().code, ETIMEDOUT);
    EXPECT_NE(status.error().message.find("/bin/sh"), std::string::npos) << status.error().message;
    EXPECT_NE(status.error().message.find("200 ms"), std::string::npos) << status.error().message;
    EXPECT_TRUE(reaped(pid_in(dir / "pid")));
}

// What a script started in the background dies with it: the whole process
// group is killed, whether the output is captured (the background program
// holds the pipe) or not (the exit is watched).
TEST(Spawn, ATimeoutKillsTheProgramsProcessGroup) {
    for (bool capture : {false, true}) {
        SCOPED_TRACE(capture ? "output captured" : "output not captured");
        TempDir dir;
        std::string output;
        SpawnRequest request{{"/bin/sh", "-c",
                              "/bin/sleep 30 & echo $! > '" + dir / "grandchild" +
                                  "'; echo $$ > '" + dir / "pid" + "'; /bin/sleep 30"},
                             {},
                             capture ? &output : nullptr};
        request.timeout = 200ms;
        auto start = std::chrono::steady_clock::now();
        auto status = run_program(request);
        EXPECT_LT(seconds_since(start), 2.0);
        ASSERT_FALSE(status);
        EXPECT_EQ(status.error().code, ETIMEDOUT);
        EXPECT_TRUE(reaped(pid_in(dir / "pid")));
        pid_t grandchild = pid_in(dir / "grandchild");
        ASSERT_GT(grandchild, 0);
        EXPECT_TRUE(dies(grandchild));
    }
}

// A program that closes its output and runs on is still timed.
TEST(Spawn, ATimeoutHoldsAfterTheOutputIsClosed) {
    std::string output;
    SpawnRequest request{
        {"/bin/sh", "-c", "echo early; exec >&- 2>&-; exec /bin/sleep 30"}, {}, &output};
    request.timeout = 200ms;
    auto start = std::chrono::steady_clock::now();
    auto status = run_program(request);
    EXPECT_LT(seconds_since(start), 2.0);
    ASSERT_FALSE(status);
    EXPECT_EQ(status.error().code, ETIMEDOUT);
    EXPECT_EQ(output, "early\n");
}

TEST(Process, AnOrdinaryStartIsNotRefused) {
    EXPECT_TRUE(refuse_elevated_start("test"));
}

// A variable the caller sets again replaces the inherited one: the daemon's
// GPU_LIMIT_OOM_* reach its OOM script even when its own environment has
// them (getenv would find the inherited one first).
TEST(Spawn, ExtraEnvironmentReplacesTheInheritedVariable) {
    ASSERT_EQ(::setenv("GPUINIT_SPAWN_TEST", "inherited", 1), 0);
    std::string output;
    SpawnRequest request;
    request.argv = {"/usr/bin/printenv", "GPUINIT_SPAWN_TEST"};
    request.extra_env = {"GPUINIT_SPAWN_TEST=given"};
    request.output = &output;
    auto ran = run_program(request);
    ::unsetenv("GPUINIT_SPAWN_TEST");
    ASSERT_TRUE(ran) << ran.error().message;
    EXPECT_EQ(*ran, 0);
    EXPECT_EQ(output, "given\n");
}

} // namespace gpuinit
