#include "gpuinit/host/privileges.hpp"
#include "root_helpers.hpp"

#include <cstdio>
#include <cstring>
#include <gtest/gtest.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuinit {

namespace {

// The "CapXxx:" line of /proc/self/status.
std::string status_line(const char* key) {
    FILE* status = std::fopen("/proc/self/status", "r");
    char line[256];
    std::string found;
    while (status != nullptr && std::fgets(line, sizeof line, status) != nullptr) {
        if (std::strncmp(line, key, std::strlen(key)) == 0) {
            found = line;
        }
    }
    if (status != nullptr) {
        std::fclose(status);
    }
    return found;
}

} // namespace

TEST(Privileges, DropsIdsGroupsAndEveryCapability) {
    GPUINIT_REQUIRE_ROOT();
    // Exit codes name the first check that failed.
    int code = testing::run_in_child([] {
        if (!drop_privileges(65534, 65534, {65534, 1000})) {
            return 1;
        }
        gid_t groups[8];
        int count = ::getgroups(8, groups);
        // The kernel keeps them sorted.
        if (count != 2 || groups[0] != 1000 || groups[1] != 65534) {
            return 2;
        }
        if (::getuid() != 65534 || ::geteuid() != 65534 || ::getegid() != 65534) {
            return 3;
        }
        if (status_line("CapEff:") != "CapEff:\t0000000000000000\n" ||
            status_line("CapPrm:") != "CapPrm:\t0000000000000000\n" ||
            status_line("CapBnd:") != "CapBnd:\t0000000000000000\n") {
            return 4;
        }
        if (status_line("NoNewPrivs:") != "NoNewPrivs:\t1\n") {
            return 5;
        }
        if (::setuid(0) == 0) {
            return 6;
        }
        return 0;
    });
    EXPECT_EQ(code, 0);
}

} // namespace gpuinit
