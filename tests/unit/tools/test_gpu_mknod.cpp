// gpu-mknod as a process on fixture roots: exit codes. Dry runs only, so
// any user can run these.
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

using testing::run_process;
using testing::TempDir;
using testing::workstation;
using testing::write_fixture;

namespace {

size_t count_of(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
        ++n;
    }
    return n;
}

} // namespace

// --device for a GPU that is not there was "error: no NVIDIA GPU 9", then
// "nothing to do", and exit 2: now the error alone, and exit 3.
TEST(GpuMknodTool, AnUnknownDeviceIsOneErrorAndExitThree) {
    TempDir dir;
    ASSERT_TRUE(write_fixture(workstation(2), dir.path()));
    std::string output;
    EXPECT_EQ(
        run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--device", "9", "--dry-run"}, &output),
        3)
        << output;
    EXPECT_EQ(count_of(output, "no NVIDIA GPU 9"), 1u) << output;
    EXPECT_EQ(count_of(output, "error"), 1u) << output;
    EXPECT_EQ(output.find("nothing to do"), std::string::npos) << output;
    // A GPU that is there still works.
    output.clear();
    EXPECT_EQ(
        run_process({GPU_MKNOD_BIN, "--root", dir.path(), "--device", "1", "--dry-run"}, &output),
        0)
        << output;
}

TEST(GpuMknodTool, HelpListsTheExitCodesOfTheTable) {
    std::string output;
    EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--help"}, &output), 0);
    std::string last = output.substr(output.rfind('\n', output.size() - 2) + 1);
    EXPECT_EQ(last, "Exit status: 0 ok, 1 usage, 2 partial, 3 nothing could be done, 4 --check "
                    "found differences, 5 not permitted, 6 busy (gpuinit(8)).\n");
}

} // namespace gpuinit
