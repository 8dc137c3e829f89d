#include "gpuinit/base/process.hpp"
#include "gpuinit/base/spawn.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

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

TEST(Process, AnOrdinaryStartIsNotRefused) {
    EXPECT_TRUE(refuse_elevated_start("test"));
}

} // namespace gpuinit
