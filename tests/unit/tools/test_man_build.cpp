// The man pages are part of the build: configuring man/ without scdoc must
// stop with the fix, not skip the pages with a warning nobody reads.
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>

namespace gpuinit {

using testing::run_process;
using testing::TempDir;

namespace {

// Configures a one-line project around man/ with `path` as PATH and the
// system search paths off, so PATH alone decides whether scdoc is found.
int configure_man(const TempDir& dir, const std::string& path, std::string* log) {
    std::ofstream(dir / "CMakeLists.txt")
        << "cmake_minimum_required(VERSION 3.20)\n"
           "project(mancheck NONE)\n"
           "set(CMAKE_INSTALL_MANDIR share/man)\n"
           "add_subdirectory(\"" GPUINIT_TESTS_DIR "/../man\" man)\n";
    std::string script = "cmake=$(command -v cmake) && ninja=$(command -v ninja) || exit 99; "
                         "PATH='" +
                         path +
                         "' exec \"$cmake\" -G Ninja -DCMAKE_MAKE_PROGRAM=\"$ninja\" "
                         "-DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF -S '" +
                         dir.path() + "' -B '" + dir / "build" + "'";
    return run_process({"/bin/sh", "-c", script}, log);
}

} // namespace

TEST(ManBuild, MissingScdocStopsTheConfigureWithTheFix) {
    TempDir dir;
    TempDir empty_path;
    std::string log;
    int rc = configure_man(dir, empty_path.path(), &log);
    ASSERT_NE(rc, 99) << "cmake or ninja is not in PATH; run scripts/install-build-deps";
    EXPECT_NE(rc, 0) << log;
    EXPECT_NE(log.find("scdoc not found"), std::string::npos) << log;
    EXPECT_NE(log.find("apt-get install scdoc"), std::string::npos) << log;
    EXPECT_NE(log.find("CMake Error"), std::string::npos) << log;
}

TEST(ManBuild, WithScdocTheConfigureSucceeds) {
    TempDir dir;
    std::string log;
    const char* path = std::getenv("PATH");
    int rc = configure_man(dir, path != nullptr ? path : "/usr/bin:/bin", &log);
    EXPECT_EQ(rc, 0) << log;
}

} // namespace gpuinit
