// The names file gpu-mig sync writes for job users: its text round-trips,
// a hostile one is refused whole, and only a file as sync makes it is read.
#include "gpuinit/mig/leases.hpp"
#include "gpuinit/mig/names_file.hpp"
#include "temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit {

using testing::TempDir;

namespace {

constexpr const char* kGpu = "GPU-558ce121-3d5b-5f1b-8ee7-6b1a2d6f5a01";
constexpr const char* kMig = "MIG-3c4c5a27-1007-5001-a000-007e5494657a";

std::vector<MigInstance> two_instances() {
    MigInstance known;
    known.gpu_minor = 1;
    known.gpu_uuid = kGpu;
    known.gi = 7;
    known.ci = 0;
    known.profile = "1g.10gb";
    known.uuid = kMig;
    MigInstance unknown = known;
    unknown.gi = 8;
    unknown.profile.clear();
    unknown.uuid.clear();
    return {known, unknown};
}

} // namespace

TEST(MigNamesFile, RoundTripsWhatIsKnownAndOnlyThat) {
    std::string text = render_mig_names_file(two_instances(), "nvidia-smi");
    EXPECT_NE(text.find(std::string(kGpu) + " 7 0 1g.10gb " + kMig + "\n"), std::string::npos);
    EXPECT_NE(text.find(std::string(kGpu) + " 8 0 - -\n"), std::string::npos);
    auto names = parse_mig_names_file(text, "names");
    ASSERT_TRUE(names) << names.error().message;
    const MigName* name = names->find(kGpu, 7, 0);
    ASSERT_NE(name, nullptr);
    EXPECT_EQ(name->profile, "1g.10gb");
    EXPECT_EQ(name->uuid, kMig);
    EXPECT_EQ(names->find(kGpu, 8, 0), nullptr);
    auto instances = two_instances();
    EXPECT_FALSE(mig_names_cover(*names, instances));
    instances.pop_back();
    EXPECT_TRUE(mig_names_cover(*names, instances));
}

// Every profile form, a "-me" one too (not the "-" of an unknown field).
TEST(MigNamesFile, RoundTripsEveryProfileForm) {
    std::vector<MigInstance> instances;
    unsigned gi = 1;
    for (const char* profile :
         {"1g.24gb-me", "1g.24gb+me.all", "4g.96gb+gfx", "1g.10gb+me", "1c.3g.40gb"}) {
        MigInstance instance = two_instances()[0];
        instance.gi = gi++;
        instance.profile = profile;
        instance.uuid.clear();
        instances.push_back(instance);
    }
    auto names = parse_mig_names_file(render_mig_names_file(instances, "NVML"), "names");
    ASSERT_TRUE(names) << names.error().message;
    for (const MigInstance& instance : instances) {
        const MigName* name = names->find(kGpu, instance.gi, 0);
        ASSERT_NE(name, nullptr) << instance.profile;
        EXPECT_EQ(name->profile, instance.profile);
        EXPECT_TRUE(name->uuid.empty());
    }
}

TEST(MigNamesFile, AMalformedLineFailsWithItsNumber) {
    for (const std::string& bad : {
             std::string(kGpu) + " 7 0 1g.10gb\n",                          // a field short
             std::string(kGpu) + " x 0 1g.10gb " + kMig + "\n",             // GI not a number
             std::string(kGpu) + " 7 0 1g.10gb MIG-GPU-" + kGpu + "/7/0\n", // the old form
             std::string(kGpu) + " 7 0 $(reboot) " + kMig + "\n",           // not a profile
             std::string("GPU-nothex 7 0 1g.10gb ") + kMig + "\n",
         }) {
        auto names = parse_mig_names_file("# ok\n" + bad, "names");
        ASSERT_FALSE(names) << bad;
        EXPECT_NE(names.error().text().find("names:2: "), std::string::npos)
            << names.error().text();
    }
    // One MIG UUID for two instances is a lie somewhere.
    auto names = parse_mig_names_file(std::string(kGpu) + " 7 0 1g.10gb " + kMig + "\n" + kGpu +
                                          " 8 0 1g.10gb " + kMig + "\n",
                                      "names");
    EXPECT_FALSE(names);
}

TEST(MigNamesFile, ReadOnlyWhatSyncWrote) {
    TempDir dir;
    auto root = Sysroot::open(dir.path());
    ASSERT_TRUE(root);
    // No lease directory: sync has not run; that is not an error.
    auto read = read_mig_names_file(*root);
    ASSERT_TRUE(read);
    EXPECT_FALSE(read->has_value());
    Diagnostics diagnostics;
    ASSERT_TRUE(sync_leases(*root, two_instances(), {}, true, diagnostics));
    ASSERT_TRUE(write_mig_names_file(*root, render_mig_names_file(two_instances(), "NVML")));
    std::string path = dir.path() + "/run/gpu-mig/names";
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0444u);
    read = read_mig_names_file(*root);
    ASSERT_TRUE(read) << read.error().message;
    ASSERT_TRUE(read->has_value());
    EXPECT_NE((*read)->find(kGpu, 7, 0), nullptr);
    // A second sync keeps the names file (it is not a stale lease).
    ASSERT_TRUE(sync_leases(*root, two_instances(), {}, true, diagnostics));
    EXPECT_TRUE(diagnostics.empty());
    ASSERT_EQ(::access(path.c_str(), F_OK), 0);
    // One others may write is refused: anyone could have written it.
    ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
    read = read_mig_names_file(*root);
    ASSERT_FALSE(read);
    EXPECT_NE(read.error().message.find("not as gpu-mig sync writes it"), std::string::npos);
    // A symlink in its place is not followed.
    ASSERT_EQ(::unlink(path.c_str()), 0);
    std::ofstream(dir.path() + "/elsewhere") << std::string(kGpu) + " 7 0 1g.10gb " + kMig + "\n";
    ASSERT_EQ(::symlink((dir.path() + "/elsewhere").c_str(), path.c_str()), 0);
    EXPECT_FALSE(read_mig_names_file(*root));
}

} // namespace gpuinit
