#include "gpuinit/host/policy.hpp"
#include "temp_dir.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace gpuinit {

TEST(Policy, ClassicDefaults) {
    Policy policy = Policy::classic();
    AccessRule gpu = policy.rule_for_gpu({2, "0000:37:00.0", ""});
    EXPECT_EQ(gpu.group, "nvidia2");
    EXPECT_EQ(gpu.owner, "root");
    EXPECT_EQ(gpu.mode, 0660u);
    AccessRule ctl = policy.rule_for_control("nvidiactl");
    EXPECT_EQ(ctl.group, "root");
    EXPECT_EQ(ctl.mode, 0666u);
}

TEST(Policy, SelectorsAndPrecedence) {
    auto policy = Policy::parse("# lab policy\n"
                                "gpu=*            group=gpu{minor}   mode=0660\n"
                                "gpu=1            group=vision\n"
                                "gpu=37:00.0      group=ml mode=0640 owner=svc\n"
                                "gpu=GPU-AAAA     group=special   # by UUID\n"
                                "control=nvidia-uvm group=cuda mode=0660\n",
                                "/etc/gpu-restriction.conf");
    ASSERT_TRUE(policy) << policy.error().message;
    EXPECT_EQ(policy->rule_for_gpu({0, "0000:17:00.0", ""}).group, "gpu0");
    EXPECT_EQ(policy->rule_for_gpu({1, "0000:27:00.0", ""}).group, "vision");
    AccessRule by_bdf = policy->rule_for_gpu({1, "0000:37:00.0", ""});
    EXPECT_EQ(by_bdf.group, "ml"); // the PCI address beats the minor
    EXPECT_EQ(by_bdf.owner, "svc");
    EXPECT_EQ(by_bdf.mode, 0640u);
    EXPECT_EQ(by_bdf.origin, "/etc/gpu-restriction.conf:4");
    EXPECT_EQ(policy->rule_for_gpu({1, "0000:37:00.0", "GPU-aaaa"}).group, "special");
    EXPECT_EQ(policy->rule_for_control("nvidia-uvm").group, "cuda");
    EXPECT_EQ(policy->rule_for_control("nvidiactl").group, "root");
}

TEST(Policy, BadLinesNameFileAndLine) {
    struct Case {
        const char* text;
        const char* expected;
    } cases[] = {
        {"gpu=0 grp=nvidia0\n", "conf:1: unknown key 'grp'"},
        {"\n\ngpu=0 group=nvidia0 mode=777\n", "conf:3: mode=777 is not an octal mode"},
        {"gpu=0 group=nvidia0 mode=01777\n", "conf:1: mode=01777"},
        {"gpu=zero group=nvidia0\n", "conf:1: gpu=zero is not a minor"},
        {"gpu=254 group=nvidia0\n", "conf:1: gpu=254"},
        {"group=nvidia0\n", "conf:1: rule names no gpu= or control="},
        {"gpu=0\n", "conf:1: rule has no group="},
        {"gpu=0 group=a:b\n", "conf:1: group=a:b is not a valid group name"},
        {"gpu=0 group=a\ngpu=0 group=b\n", "conf:2: same selector as line 1"},
        // UUIDs match case-insensitively, so these two would both match one GPU.
        {"gpu=GPU-AAAA group=a\n\ngpu=GPU-aaaa group=b\n", "conf:3: same selector as line 1"},
        {"gpu=GPU- group=a\n", "conf:1: gpu=GPU- is not a minor"},
        {"control=nvidia-foo group=root\n", "conf:1: control=nvidia-foo"},
        {"control=nvidiactl group=x{minor}\n", "conf:1: {minor} is only meaningful"},
        {"gpu=0 control=nvidiactl group=x\n", "conf:1: a rule names one"},
        // {minor} once: nvidia{minor}{minor} would name a group per pair of digits.
        {"gpu=* group=nvidia{minor}{minor}\n", "conf:1: group=nvidia{minor}{minor}: {minor} may"},
        {"gpu=0 group=a group=b\n", "conf:1: group= given twice"},
        {"gpu=0 group=0123\n", "conf:1: group=0123 is not a valid group name or gid"},
        {"gpu=0 group=4294967295\n", "conf:1: group=4294967295 is not a valid group name or gid"},
        {"gpu=0 group=a owner=01\n", "conf:1: owner=01 is not a valid user name or uid"},
        {"gpu=* group={minor}\n", "conf:1: group={minor} is not a valid group name"},
    };
    for (const Case& c : cases) {
        auto policy = Policy::parse(c.text, "conf");
        ASSERT_FALSE(policy) << c.text;
        EXPECT_EQ(policy.error().text().rfind(c.expected, 0), 0u)
            << "got: " << policy.error().text() << "\nwanted: " << c.expected;
    }
}

TEST(Policy, UnknownGpuIsReported) {
    auto policy = Policy::parse("gpu=0 group=a\ngpu=7 group=b\ngpu=GPU-dead group=c\n", "conf");
    ASSERT_TRUE(policy);
    Diagnostics unmatched;
    policy->report_unmatched({{0, "0000:17:00.0", "GPU-beef"}}, unmatched);
    ASSERT_EQ(unmatched.items().size(), 2u);
    EXPECT_EQ(unmatched.items()[0].severity, Severity::Warning);
    EXPECT_EQ(unmatched.items()[0].text(),
              "conf:2: gpu=7 matches no GPU the driver has; check the rule");
    EXPECT_NE(unmatched.items()[1].text().find("conf:3: gpu=GPU-dead"), std::string::npos);
}

} // namespace gpuinit

namespace gpuinit {

// MIG rules: gpu= plus gi= (and ci=) name a GPU instance's cap nodes, never
// /dev/nvidiaN; the most specific GPU wins, then ci= over gi-only.
TEST(Policy, MigRulesNameInstancesNotGpus) {
    auto policy = Policy::parse("gpu=1 gi=7 group=vision\n"
                                "gpu=1 gi=7 ci=1 group=nlp mode=0400\n"
                                "gpu=* gi=8 group=mig{minor}\n"
                                "gpu=0000:27:00.0 gi=8 group=bypci\n",
                                "/etc/gpu-restriction.conf");
    ASSERT_TRUE(policy) << policy.error().text();
    GpuIdentity gpu1{1, "0000:27:00.0", ""};
    EXPECT_EQ(policy->rule_for_gpu(gpu1).group, "nvidia1"); // MIG rules leave /dev/nvidia1 alone
    auto gi = policy->rule_for_mig(gpu1, 7, std::nullopt);
    ASSERT_TRUE(gi);
    EXPECT_EQ(gi->group, "vision");
    EXPECT_EQ(gi->mode, 0440u); // a MIG rule's default: caps are opened read-only
    EXPECT_EQ(policy->rule_for_mig(gpu1, 7, 0)->group, "vision");
    EXPECT_EQ(policy->rule_for_mig(gpu1, 7, 1)->group, "nlp");
    EXPECT_EQ(policy->rule_for_mig(gpu1, 7, 1)->mode, 0400u);
    EXPECT_EQ(policy->rule_for_mig(gpu1, 8, 0)->group, "bypci");
    EXPECT_EQ(policy->rule_for_mig({2, "0000:37:00.0", ""}, 8, 0)->group, "mig2");
    EXPECT_FALSE(policy->rule_for_mig(gpu1, 9, 0)); // the driver's mode then
}

TEST(Policy, BadMigRulesNameTheLine) {
    struct Case {
        const char* text;
        const char* expected;
    } cases[] = {
        {"gpu=1 ci=0 group=x\n", ":1: ci= needs the gi= of its GPU instance"},
        {"control=nvidiactl gi=1 group=x\n", ":1: gi= and ci= belong to gpu= rules"},
        {"gpu=1 gi=15 group=x\n", ":1: gi=15 is not a GPU-instance id 0-14"},
        {"gpu=1 gi=1 ci=8 group=x\n", ":1: ci=8 is not a compute-instance id 0-7"},
        {"gpu=1 gi=07 group=x\n", "is not a GPU-instance id"},
        {"gpu=1 gi=7 group=x\ngpu=1 gi=7 group=y\n", ":2: same selector as line 1"},
    };
    for (const Case& c : cases) {
        auto policy = Policy::parse(c.text, "/etc/gpu-restriction.conf");
        ASSERT_FALSE(policy) << c.text;
        EXPECT_NE(policy.error().text().find(c.expected), std::string::npos)
            << policy.error().text();
    }
    // gpu=1 and gpu=1 gi=7 are different subjects.
    EXPECT_TRUE(Policy::parse("gpu=1 group=a\ngpu=1 gi=7 group=b\n", "p"));
}

} // namespace gpuinit

namespace gpuinit {

// mig-leases-per-user: a line of its own, 1 to 4096, once; the default is
// one instance per user.
TEST(Policy, MigLeasesPerUserHasADefaultOfOne) {
    EXPECT_EQ(Policy::classic().mig_leases_per_user(), 1u);
    EXPECT_EQ(Policy::classic().mig_leases_origin(), "the default");
    auto parsed = Policy::parse("gpu=* group=video\nmig-leases-per-user=3\n", "/etc/p.conf");
    ASSERT_TRUE(parsed) << parsed.error().text();
    EXPECT_EQ(parsed->mig_leases_per_user(), 3u);
    EXPECT_EQ(parsed->mig_leases_origin(), "/etc/p.conf:2");
    for (const char* bad : {"mig-leases-per-user=0\n", "mig-leases-per-user=4097\n",
                            "mig-leases-per-user=two\n", "mig-leases-per-user=2 group=video\n",
                            "mig-leases-per-user=2\nmig-leases-per-user=3\n"}) {
        auto refused = Policy::parse(bad, "/etc/p.conf");
        ASSERT_FALSE(refused) << bad;
        EXPECT_NE(refused.error().text().find("/etc/p.conf:"), std::string::npos)
            << refused.error().text();
    }
}

// A directory service's group the files do not hold: named by number.
TEST(Policy, GroupsAndOwnersMayBeNumbers) {
    auto policy = Policy::parse("gpu=0 group=4242 owner=1500 mode=0660\n"
                                "control=nvidiactl group=0\n",
                                "conf");
    ASSERT_TRUE(policy) << policy.error().text();
    AccessRule rule = policy->rule_for_gpu({0, "0000:17:00.0", ""});
    EXPECT_EQ(rule.group, "4242");
    EXPECT_EQ(rule.owner, "1500");
    EXPECT_EQ(policy->rule_for_control("nvidiactl").group, "0");
}

// A MIG rule whose GPU has no instance (MIG off, or none made yet) gives no
// node anything: a warning, not an error, so the policy still loads.
TEST(Policy, MigRuleForAGpuWithoutInstancesWarns) {
    auto policy = Policy::parse("gpu=0 gi=7 group=a\n"
                                "gpu=1 gi=7 group=b\n"
                                "gpu=* gi=9 group=c\n"
                                "gpu=0 group=d\n",
                                "conf");
    ASSERT_TRUE(policy) << policy.error().text();
    std::vector<GpuIdentity> present = {{0, "0000:17:00.0", ""}, {1, "0000:27:00.0", ""}};
    Diagnostics with_one;
    policy->report_mig_without_instances(present, {1}, with_one);
    ASSERT_EQ(with_one.items().size(), 1u);
    EXPECT_EQ(with_one.items()[0].severity, Severity::Warning);
    EXPECT_EQ(
        with_one.items()[0].text().rfind("conf:1: MIG rule: no MIG instance on GPU 0 (MIG", 0), 0u)
        << with_one.items()[0].text();
    Diagnostics with_none;
    policy->report_mig_without_instances(present, {}, with_none);
    ASSERT_EQ(with_none.items().size(), 3u);
    EXPECT_NE(with_none.items()[2].text().find("conf:3: MIG rule: no MIG instance on GPU 0, 1 ("),
              std::string::npos)
        << with_none.items()[2].text();
}

} // namespace gpuinit

namespace gpuinit {

// `gpu-mknod --policy FILE` reads FILE as root, and FILE may be a user's
// symlink to a device whose open() alone acts (/dev/watchdog arms a reboot, a
// tape rewinds). Only a regular file may be opened for reading. A FIFO shows
// it: a writer blocked in open() is let through by any reader's open.
TEST(Policy, LoadFileNeverOpensWhatIsNotARegularFile) {
    testing::TempDir dir;
    std::string fifo = dir / "candidate.conf";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::string link = dir / "link.conf";
    ASSERT_EQ(::symlink(fifo.c_str(), link.c_str()), 0);
    std::atomic<bool> writer_opened{false};
    std::thread writer([&] {
        int fd = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
        writer_opened = true;
        if (fd >= 0) {
            ::close(fd);
        }
    });
    for (const std::string& path : {fifo, link}) {
        auto loaded = Policy::load_file(path);
        EXPECT_FALSE(loaded) << path;
        if (!loaded) {
            EXPECT_NE(loaded.error().message.find("not a regular file"), std::string::npos)
                << loaded.error().message;
        }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(writer_opened) << "the policy's FIFO was opened for reading";
    // Lets the writer go.
    int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    writer.join();
    if (reader >= 0) {
        ::close(reader);
    }
}

// A regular file through a symlink is still read: the admin may point at it.
TEST(Policy, LoadFileReadsARegularFileThroughASymlink) {
    testing::TempDir dir;
    std::string file = dir / "candidate.conf";
    {
        int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ASSERT_GE(fd, 0);
        std::string text = "gpu=* group=video mode=0660\n";
        ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
        ::close(fd);
    }
    std::string link = dir / "link.conf";
    ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
    auto loaded = Policy::load_file(link);
    ASSERT_TRUE(loaded) << loaded.error().message;
    EXPECT_EQ(loaded->rule_for_gpu({0, "0000:17:00.0", ""}).group, "video");
}

} // namespace gpuinit
