// pick on fixture roots: which instances a job may use, and picking under
// leases. The fixture's proc has no processes, so nothing is busy here
// (tests/root/test_mig_pick.cpp has the real /proc).
#include "gpuinit/mig/leases.hpp"
#include "gpuinit/mig/pick.hpp"
#include "machine_fixture.hpp"
#include "temp_dir.hpp"

#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace gpuinit {

using testing::a100_mig_box;
using testing::fake_uuid;
using testing::TempDir;
using testing::write_fixture;

namespace {

struct PickBox {
    TempDir dir;
    std::optional<Sysroot> root;
    Machine machine;
    std::vector<MigInstance> instances;

    PickBox() {
        EXPECT_TRUE(write_fixture(a100_mig_box(), dir.path()));
        auto opened = Sysroot::open(dir.path());
        root.emplace(std::move(*opened));
        Diagnostics diagnostics;
        auto discovered = discover_machine(*root, diagnostics);
        auto topology = read_mig_topology(*root, diagnostics);
        EXPECT_TRUE(discovered && topology);
        machine = std::move(*discovered);
        instances = join_mig_instances(machine, *topology, diagnostics);
        EXPECT_TRUE(sync_leases(*root, instances, {}, true, diagnostics));
        EXPECT_TRUE(diagnostics.empty());
    }

    std::vector<std::string> visible(const PickRequest& request, Diagnostic* failure = nullptr) {
        auto result = visible_instances(*root, machine, instances, request);
        if (!result) {
            if (failure != nullptr) {
                *failure = result.error();
            }
            return {"error: " + result.error().message};
        }
        std::vector<std::string> keys;
        for (const MigInstance& instance : *result) {
            keys.push_back(instance.key());
        }
        return keys;
    }

    Result<Pick> pick(const PickRequest& request) {
        Diagnostics diagnostics;
        return pick_instances(*root, machine, instances, request, diagnostics);
    }
};

PickRequest by_key(unsigned count = 1) {
    PickRequest request;
    request.need_uuid = false;
    request.count = count;
    return request;
}

PickRequest cuda(const std::string& value) {
    PickRequest request = by_key();
    request.cuda_visible_devices = value;
    return request;
}

} // namespace

TEST(MigPickVisibility, UnsetMeansEveryInstance) {
    PickBox box;
    EXPECT_EQ(box.visible(by_key()).size(), 21u);
    PickRequest all = by_key();
    all.nvidia_visible_devices = "all";
    EXPECT_EQ(box.visible(all).size(), 21u);
    PickRequest none = by_key();
    none.nvidia_visible_devices = "none";
    EXPECT_TRUE(box.visible(none).empty());
    EXPECT_TRUE(box.visible(cuda("")).empty());
}

TEST(MigPickVisibility, GpuUuidsSelectTheirInstances) {
    PickBox box;
    std::vector<std::string> keys = box.visible(cuda(fake_uuid(3) + "," + fake_uuid(0)));
    ASSERT_EQ(keys.size(), 7u);
    EXPECT_EQ(keys.front(), "gpu3/gi7/ci0");
    // CUDA_VISIBLE_DEVICES wins over NVIDIA_VISIBLE_DEVICES.
    PickRequest both = cuda(fake_uuid(2));
    both.nvidia_visible_devices = fake_uuid(3);
    EXPECT_EQ(box.visible(both).front(), "gpu2/gi7/ci0");
}

// Index i: the i-th GPU, in PCI order, among those whose /dev/nvidiaN the
// caller may open; not the driver's minor, not nvidia-smi's index.
TEST(MigPickVisibility, IndicesCountTheGpusTheJobMayOpen) {
    PickBox box;
    ::mkdir((box.dir / "dev").c_str(), 0755); // the fixture may have one
    for (unsigned minor : {0u, 2u, 3u}) {
        std::string node = box.dir / ("dev/nvidia" + std::to_string(minor));
        std::ofstream(node) << "";
        ASSERT_EQ(::chmod(node.c_str(), 0666), 0);
    }
    EXPECT_EQ(box.visible(cuda("1")).front(), "gpu2/gi7/ci0");
    EXPECT_EQ(box.visible(cuda("2")).front(), "gpu3/gi7/ci0");
    EXPECT_TRUE(box.visible(cuda("0")).empty()); // GPU 0 has no MIG instances
    Diagnostic failure;
    box.visible(cuda("3"), &failure);
    EXPECT_EQ(failure.reason, static_cast<int>(PickFailure::Unusable));
    EXPECT_NE(failure.message.find("may open only 3 GPUs"), std::string::npos) << failure.text();
}

TEST(MigPickVisibility, UnknownNamesAreErrorsThatSayWhatToGive) {
    PickBox box;
    Diagnostic failure;
    box.visible(cuda("MIG-7a1b2c3d-0000-0000-0000-000000000000"), &failure);
    EXPECT_EQ(failure.reason, static_cast<int>(PickFailure::Unusable));
    EXPECT_NE(failure.message.find("MIG UUIDs of this machine are unknown"), std::string::npos);
    box.visible(cuda("GPU-nope"), &failure);
    EXPECT_NE(failure.message.find("no GPU of this machine"), std::string::npos);
    box.visible(cuda("first"), &failure);
    EXPECT_NE(failure.message.find("no index, GPU-UUID or MIG-UUID"), std::string::npos);

    PickRequest profile = by_key();
    profile.profile = "1g.10gb";
    auto picked = box.pick(profile);
    ASSERT_FALSE(picked);
    EXPECT_EQ(picked.error().reason, static_cast<int>(PickFailure::Unusable));
    EXPECT_NE(picked.error().message.find("profile of gpu1/gi7/ci0 is unknown"), std::string::npos);

    PickRequest uuids = by_key();
    uuids.need_uuid = true;
    picked = box.pick(uuids);
    ASSERT_FALSE(picked);
    EXPECT_EQ(picked.error().reason, static_cast<int>(PickFailure::Unusable));
    EXPECT_NE(picked.error().message.find("use --format key"), std::string::npos);
}

TEST(MigPick, TakesLeasesInOrderAndSkipsHeldOnes) {
    PickBox box;
    auto first = box.pick(by_key(2));
    ASSERT_TRUE(first) << first.error().text();
    ASSERT_EQ(first->instances.size(), 2u);
    EXPECT_EQ(first->instances[0].key(), "gpu1/gi7/ci0");
    EXPECT_EQ(first->instances[1].key(), "gpu1/gi8/ci0");
    auto second = box.pick(by_key());
    ASSERT_TRUE(second);
    EXPECT_EQ(second->instances[0].key(), "gpu1/gi9/ci0");
    first->leases.clear(); // both let go
    auto third = box.pick(by_key());
    ASSERT_TRUE(third);
    EXPECT_EQ(third->instances[0].key(), "gpu1/gi7/ci0");
}

TEST(MigPick, NoneFreeSaysWhyAndLetsGoOfAPartialPick) {
    PickBox box;
    PickRequest six = cuda(fake_uuid(1));
    six.count = 6;
    auto held = box.pick(six);
    ASSERT_TRUE(held);
    // One free on GPU 1; two wanted: none taken.
    PickRequest two = cuda(fake_uuid(1));
    two.count = 2;
    auto failed = box.pick(two);
    ASSERT_FALSE(failed);
    EXPECT_EQ(failed.error().reason, static_cast<int>(PickFailure::NoneFree));
    EXPECT_NE(failed.error().message.find("no 2 free MIG instances among the 7 visible to this "
                                          "job: 6 leased by other jobs"),
              std::string::npos)
        << failed.error().text();
    EXPECT_TRUE(box.pick(cuda(fake_uuid(1)))); // the seventh was let go
    PickRequest too_many = by_key(22);
    auto impossible = box.pick(too_many);
    ASSERT_FALSE(impossible);
    EXPECT_EQ(impossible.error().reason, static_cast<int>(PickFailure::Unusable));
}

TEST(MigPick, WaitsForALeaseToEnd) {
    PickBox box;
    auto held = box.pick(cuda(fake_uuid(3)));
    ASSERT_TRUE(held);
    PickRequest seven = cuda(fake_uuid(3));
    seven.count = 6;
    auto rest = box.pick(seven);
    ASSERT_TRUE(rest);
    PickRequest waiting = cuda(fake_uuid(3));
    waiting.wait = std::chrono::seconds(5);
    std::thread release([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        held->leases.clear();
    });
    auto start = std::chrono::steady_clock::now();
    auto picked = box.pick(waiting);
    release.join();
    ASSERT_TRUE(picked) << picked.error().text();
    EXPECT_EQ(picked->instances[0].key(), "gpu3/gi7/ci0");
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(MigPick, WithoutLeasesItCannotPick) {
    PickBox box;
    ASSERT_EQ(::rename((box.dir / "run/gpu-mig").c_str(), (box.dir / "run/old").c_str()), 0);
    auto picked = box.pick(by_key());
    ASSERT_FALSE(picked);
    EXPECT_EQ(picked.error().reason, static_cast<int>(PickFailure::Unusable));
    EXPECT_NE(picked.error().message.find("run 'gpu-mig sync' as root"), std::string::npos);
}

} // namespace gpuinit
