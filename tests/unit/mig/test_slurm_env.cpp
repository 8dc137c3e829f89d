// gpu-mig env's mapping: Slurm's device indices (positions of the node's
// Name=gpu records in gres.conf) to the CUDA ids of the devices, and the
// host lists of NodeName=.
#include "gpuinit/base/text.hpp"
#include "gpuinit/mig/gres.hpp"
#include "gpuinit/mig/slurm_env.hpp"
#include "machine_fixture.hpp"
#include "mig_box.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

using testing::fake_uuid;
using testing::oracle_ci_minor;
using testing::oracle_gi_minor;

namespace {

using Box = testing::MigBox;

std::string mig_uuid(unsigned gpu, unsigned gi, unsigned ci) {
    return format("MIG-%08x-0000-4000-8000-%012x", gpu, gi * 100 + ci);
}

// The 4xA100 box; every instance gets a MIG UUID made from its key.
void load(Box& box) {
    testing::load_mig_box(box);
    for (MigInstance& instance : box.instances) {
        instance.profile = "1g.10gb";
        instance.uuid = mig_uuid(instance.gpu_minor, instance.gi, instance.ci);
    }
}

std::string mig_line(unsigned gpu, unsigned gi, unsigned ci) {
    return format("Name=gpu Type=a100_1g MultipleFiles=/dev/nvidia%u,/dev/nvidia-caps/"
                  "nvidia-cap%u,/dev/nvidia-caps/nvidia-cap%u\n",
                  gpu, oracle_gi_minor(gpu, gi), oracle_ci_minor(gpu, gi, ci));
}

Result<std::vector<std::string>> ids_for(const Box& box, const std::string& conf,
                                         const std::string& indices,
                                         const std::string& node = "gpu07") {
    auto records = parse_gres_conf(conf, "gres.conf", node);
    if (!records) {
        return records.error();
    }
    return cuda_ids_for_slurm({"SLURM_STEP_GPUS", indices}, *records, "gres.conf", box.machine,
                              box.instances);
}

} // namespace

TEST(SlurmEnv, HostListsAsSlurmWritesThem) {
    EXPECT_TRUE(*host_list_includes("gpu07", "gpu07"));
    EXPECT_FALSE(*host_list_includes("gpu07", "gpu7"));
    EXPECT_TRUE(*host_list_includes("gpu[01-10]", "gpu07"));
    EXPECT_FALSE(*host_list_includes("gpu[01-10]", "gpu7")); // the width is fixed
    EXPECT_FALSE(*host_list_includes("gpu[01-10]", "gpu11"));
    EXPECT_TRUE(*host_list_includes("gpu[1-10]", "gpu7"));
    EXPECT_FALSE(*host_list_includes("gpu[1-10]", "gpu07"));
    EXPECT_TRUE(*host_list_includes("login1,gpu[01-04,07]-ib", "gpu07-ib"));
    EXPECT_FALSE(*host_list_includes("login1,gpu[01-04,07]-ib", "gpu05-ib"));
    EXPECT_TRUE(*host_list_includes("a,b,c", "c"));
    EXPECT_FALSE(host_list_includes("gpu[1-2]x[1-2]", "gpu1x1"));
    EXPECT_FALSE(host_list_includes("gpu[4-2]", "gpu3"));
}

// Slurm's index: one per File= path (brackets expanded), one per
// MultipleFiles= line, counting only this node's Name=gpu lines.
TEST(SlurmEnv, IndicesCountTheNodesDevicesInFileOrder) {
    Box box;
    load(box);
    std::string conf = "# hand-written\n"
                       "AutoDetect=off\n"
                       "NodeName=login1 Name=gpu File=/dev/nvidia[0-3]\n" // not this node
                       "Name=mps Count=100\n" +
                       mig_line(1, 9, 0) + "NodeName=gpu[01-08] Name=gpu File=/dev/nvidia0\n" +
                       mig_line(2, 7, 0) + mig_line(3, 14, 0);
    auto ids = ids_for(box, conf, "0,1,2,3");
    ASSERT_TRUE(ids) << ids.error().message;
    EXPECT_EQ(*ids, (std::vector<std::string>{mig_uuid(1, 9, 0), fake_uuid(0), mig_uuid(2, 7, 0),
                                              mig_uuid(3, 14, 0)}));
    // Slurm's order is kept, also when it is not the index order.
    ids = ids_for(box, conf, "3,0");
    ASSERT_TRUE(ids);
    EXPECT_EQ(*ids, (std::vector<std::string>{mig_uuid(3, 14, 0), mig_uuid(1, 9, 0)}));
    // On login1 the bracket line is four devices, before the rest.
    ids = ids_for(box, conf, "3,4", "login1");
    ASSERT_TRUE(ids) << ids.error().message;
    EXPECT_EQ(*ids, (std::vector<std::string>{fake_uuid(3), mig_uuid(1, 9, 0)}));
}

TEST(SlurmEnv, WhatCannotBeNamedFailsWithTheLineAndTheFix) {
    Box box;
    load(box);
    std::string conf = mig_line(1, 7, 0) + "Name=gpu File=/dev/nvidia7\n" + mig_line(2, 12, 0);
    auto ids = ids_for(box, conf, "3");
    ASSERT_FALSE(ids);
    EXPECT_NE(ids.error().message.find("names device 3, but gres.conf has 3"), std::string::npos)
        << ids.error().message;
    // nvidia-smi's index written as a minor the driver does not have.
    ids = ids_for(box, conf, "1");
    ASSERT_FALSE(ids);
    EXPECT_NE(ids.error().message.find("gres.conf:2 (SLURM_STEP_GPUS device 1): /dev/nvidia7 is "
                                       "no GPU the driver lists"),
              std::string::npos)
        << ids.error().message;
    // GI 12 is the gap in the box's GI ids: a destroyed instance.
    ids = ids_for(box, conf, "2");
    ASSERT_FALSE(ids);
    EXPECT_NE(ids.error().message.find("no MIG instance has these GI and CI cap nodes"),
              std::string::npos);
    // A known instance whose UUID is not known: never a made-up id.
    box.instances[0].uuid.clear();
    ids = ids_for(box, conf, "0");
    ASSERT_FALSE(ids);
    EXPECT_NE(ids.error().message.find("MIG gpu1/gi7/ci0 has no known MIG UUID"), std::string::npos)
        << ids.error().message;
    EXPECT_FALSE(ids_for(box, conf, "0-1"));
    EXPECT_FALSE(ids_for(box, conf, ""));
}

} // namespace gpuinit
