// Groups that only a directory service serves: a private mount namespace
// whose /etc/nsswitch.conf adds libnss-extrausers, with a group and a user
// in /var/lib/extrausers that /etc/group and /etc/passwd do not hold. The
// test's own process and the machine keep their files.
#include "gpuinit/host/accounts.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>

namespace gpuinit {

using testing::run_in_child;
using testing::run_process;
using testing::TempDir;

namespace {

constexpr const char* kGroup = "gpuinitdirgpu";
constexpr unsigned kGid = 47011;
constexpr const char* kBigGroup = "gpuinitdirbig";
constexpr unsigned kBigGid = 47013;
constexpr int kBigGroupMembers = 5000;

bool extrausers_installed() {
    for (const char* path :
         {"/usr/lib/libnss_extrausers.so.2", "/lib/x86_64-linux-gnu/libnss_extrausers.so.2",
          "/usr/lib/x86_64-linux-gnu/libnss_extrausers.so.2"}) {
        if (std::filesystem::exists(path)) {
            return true;
        }
    }
    return false;
}

// In the child: the directory service, for this mount namespace only.
// Returns 0, or the step that failed (10-19).
int serve_through_nss(const TempDir& dir) {
    std::ofstream(dir / "nsswitch.conf") << "passwd: files extrausers\ngroup: files extrausers\n";
    std::filesystem::create_directories(dir / "extrausers");
    {
        std::ofstream group(dir / "extrausers/group");
        group << kGroup << ":x:" << kGid << ":\n";
        // A directory service's big group: its entry is far over 16 KiB.
        group << kBigGroup << ":x:" << kBigGid << ":";
        for (int i = 0; i < kBigGroupMembers; ++i) {
            group << (i > 0 ? "," : "") << "gpuinitmember" << i;
        }
        group << "\n";
    }
    std::ofstream(dir / "extrausers/passwd")
        << "gpuinitdiruser:x:47012:" << kGid << "::/nonexistent:/usr/sbin/nologin\n";
    if (::unshare(CLONE_NEWNS) != 0) {
        return 10;
    }
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        return 11;
    }
    if (::mount((dir / "nsswitch.conf").c_str(), "/etc/nsswitch.conf", nullptr, MS_BIND, nullptr) !=
        0) {
        return 12;
    }
    if (!std::filesystem::is_directory("/var/lib/extrausers") ||
        ::mount((dir / "extrausers").c_str(), "/var/lib/extrausers", nullptr, MS_BIND, nullptr) !=
            0) {
        return 13;
    }
    return 0;
}

} // namespace

// The static build's way (it has no NSS): getent, run only when root's
// alone, one line, bounded.
TEST(RootNss, GetentResolvesAGroupOnlyNssServes) {
    GPUINIT_REQUIRE_ROOT();
    if (!extrausers_installed()) {
        GTEST_SKIP() << "SKIPPED LOUDLY: libnss-extrausers is not installed "
                        "(scripts/install-test-deps)";
    }
    ASSERT_TRUE(std::filesystem::exists(kGetentPath));
    TempDir dir;
    int code = run_in_child([&] {
        if (int failed = serve_through_nss(dir); failed != 0) {
            return failed;
        }
        std::string getent(kGetentPath);
        if (getent_id(getent, "group", kGroup, kGetentTimeout) != kGid) {
            return 20;
        }
        if (getent_id(getent, "passwd", "gpuinitdiruser", kGetentTimeout) != 47012u) {
            return 21;
        }
        if (getent_id(getent, "group", "gpuinitnosuchgroup", kGetentTimeout)) {
            return 22;
        }
        // A prefix of the name is not the name.
        if (getent_id(getent, "group", "gpuinitdir", kGetentTimeout)) {
            return 23;
        }
        return 0;
    });
    EXPECT_EQ(code, 0) << "step " << code << " failed (10-13: namespace setup)";
}

// The tools' account table on the running system finds it; under another
// root it does not: NSS speaks for this machine only.
TEST(RootNss, AccountsAskNssOnlyOnTheRunningSystem) {
    GPUINIT_REQUIRE_ROOT();
    if (!extrausers_installed()) {
        GTEST_SKIP() << "SKIPPED LOUDLY: libnss-extrausers is not installed "
                        "(scripts/install-test-deps)";
    }
    TempDir dir;
    TempDir copy;
    std::filesystem::create_directories(copy / "etc");
    std::ofstream(copy / "etc/group") << "root:x:0:\n";
    int code = run_in_child([&] {
        if (int failed = serve_through_nss(dir); failed != 0) {
            return failed;
        }
        Diagnostics diagnostics;
        auto host = Sysroot::open("/");
        auto other = Sysroot::open(copy.path());
        if (!host || !other) {
            return 30;
        }
        auto on_host = AccountDb::load(*host, diagnostics);
        auto on_copy = AccountDb::load(*other, diagnostics);
        if (!on_host || !on_copy) {
            return 31;
        }
        if (on_host->group(kGroup) != kGid) {
            return 32;
        }
        if (on_copy->group(kGroup)) {
            return 33;
        }
        return 0;
    });
    EXPECT_EQ(code, 0) << "step " << code << " failed (10-13: namespace setup)";
}

// gpu-mknod on the running system: a candidate policy naming that group for
// nvidiactl is explained with the directory service's gid. --explain only
// reads, and no NVIDIA GPU is needed for the control nodes; /proc/devices is
// the driver's, for this namespace only.
TEST(RootNss, GpuMknodExplainsAPolicyWithAGroupOnlyNssServes) {
    GPUINIT_REQUIRE_ROOT();
    if (!extrausers_installed()) {
        GTEST_SKIP() << "SKIPPED LOUDLY: libnss-extrausers is not installed "
                        "(scripts/install-test-deps)";
    }
    TempDir dir;
    std::ofstream(dir / "devices") << "Character devices:\n  1 mem\n195 nvidia\n"
                                      "\nBlock devices:\n  8 sd\n";
    std::ofstream(dir / "policy.conf") << "control=nvidiactl group=" << kGroup << " mode=0660\n";
    std::string output;
    int code = run_in_child(
        [&] {
            if (int failed = serve_through_nss(dir); failed != 0) {
                return failed;
            }
            if (::mount((dir / "devices").c_str(), "/proc/devices", nullptr, MS_BIND, nullptr) !=
                0) {
                return 14;
            }
            std::string report;
            int status = run_process(
                {GPU_MKNOD_BIN, "--explain", "--json", "--policy", dir / "policy.conf"}, &report);
            std::fwrite(report.data(), 1, report.size(), stdout);
            return status == 0 ? 0 : 40;
        },
        &output);
    EXPECT_EQ(code, 0) << "step " << code << "\n" << output;
    EXPECT_NE(output.find("\"path\":\"/dev/nvidiactl\""), std::string::npos) << output;
    EXPECT_NE(
        output.find(std::string("\"group\":\"") + kGroup + "\",\"gid\":" + std::to_string(kGid)),
        std::string::npos)
        << output;
}

// A group with thousands of members (common in LDAP and AD) resolves in
// either build: getgrnam_r's ERANGE means a bigger buffer, not "no such
// group" (which would leave every GPU node root-only).
TEST(RootNss, AGroupWithManyMembersResolves) {
    GPUINIT_REQUIRE_ROOT();
    if (!extrausers_installed()) {
        GTEST_SKIP() << "SKIPPED LOUDLY: libnss-extrausers is not installed "
                        "(scripts/install-test-deps)";
    }
    TempDir dir;
    int code = run_in_child([&] {
        if (int failed = serve_through_nss(dir); failed != 0) {
            return failed;
        }
        if (getent_id(std::string(kGetentPath), "group", kBigGroup, kGetentTimeout) != kBigGid) {
            return 40;
        }
        Diagnostics diagnostics;
        auto host = Sysroot::open("/");
        if (!host) {
            return 41;
        }
        auto accounts = AccountDb::load(*host, diagnostics);
        if (!accounts) {
            return 42;
        }
        if (accounts->group(kBigGroup) != kBigGid) {
            return 43;
        }
        return 0;
    });
    EXPECT_EQ(code, 0) << "step " << code << " failed (10-13: namespace setup)";
}

} // namespace gpuinit
