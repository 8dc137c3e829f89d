// nvidia-smi's output from real machines (tests/fixture/captures, README.md
// there says where each file comes from): every file parses to the GPUs,
// instances, profiles and UUIDs it shows, and what it does not show stays
// unknown. Each directory is laid out as --nvidia-smi-output wants it.
#include "gpuinit/mig/gres.hpp"
#include "gpuinit/mig/names.hpp"

#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <utility>

namespace gpuinit {

namespace {

std::string capture_dir(const std::string& machine) {
    return std::string(GPUINIT_TESTS_DIR) + "/fixture/captures/" + machine;
}

std::string capture(const std::string& machine, const std::string& file) {
    std::ifstream in(capture_dir(machine) + "/" + file);
    EXPECT_TRUE(in.good()) << machine << "/" << file;
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// The profiles of `nvidia-smi mig -lgip` (name, profile id), read the way a
// person reads the table: the rows whose second word is "MIG".
std::vector<std::pair<std::string, unsigned>> lgip_profiles(const std::string& text) {
    std::vector<std::pair<std::string, unsigned>> out;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream words(line);
        std::string bar;
        std::string gpu;
        std::string mig;
        std::string name;
        unsigned id = 0;
        if (words >> bar >> gpu >> mig >> name >> id && bar == "|" && mig == "MIG") {
            out.emplace_back(name, id);
        }
    }
    return out;
}

using Profiles = std::vector<std::pair<std::string, unsigned>>;

void expect_valid_profiles(const Profiles& profiles) {
    for (const auto& [name, id] : profiles) {
        EXPECT_TRUE(valid_mig_profile(name)) << name << " (profile id " << id << ")";
    }
}

} // namespace

// H100 SXM5 80GB, driver 580.159.04, MIG off: no instances, and mig -lgi
// and -lci say "No MIG-enabled devices found." (an empty list, not an error).
TEST(Captures, H100Driver580WithMigOff) {
    const std::string machine = "h100-580.159.04";
    const std::string gpu = "GPU-f74deb4d-58ba-953e-b767-c696562f25c0";
    auto list = parse_nvidia_smi_list(capture(machine, "L.txt"), "L.txt");
    ASSERT_TRUE(list) << list.error().text();
    ASSERT_EQ(list->size(), 1u);
    EXPECT_EQ((*list)[0].index, 0u);
    EXPECT_EQ((*list)[0].name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ((*list)[0].uuid, gpu);
    EXPECT_TRUE((*list)[0].migs.empty());
    auto xml = parse_nvidia_smi_query_xml(capture(machine, "q.xml"), "q.xml");
    ASSERT_TRUE(xml) << xml.error().text();
    ASSERT_EQ(xml->size(), 1u);
    EXPECT_EQ((*xml)[0].uuid, gpu);
    EXPECT_EQ((*xml)[0].minor, 0u);
    EXPECT_EQ((*xml)[0].name, "NVIDIA H100 80GB HBM3");
    EXPECT_TRUE((*xml)[0].migs.empty());
    auto lgi = parse_nvidia_smi_lgi(capture(machine, "mig-lgi.txt"), "mig-lgi.txt");
    ASSERT_TRUE(lgi) << lgi.error().text();
    EXPECT_TRUE(lgi->empty());
    auto lci = parse_nvidia_smi_lci(capture(machine, "mig-lci.txt"), "mig-lci.txt");
    ASSERT_TRUE(lci) << lci.error().text();
    EXPECT_TRUE(lci->empty());

    Diagnostics diagnostics;
    auto names = load_nvidia_smi_output(capture_dir(machine), diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    EXPECT_TRUE(diagnostics.empty()) << diagnostics.items()[0].text();
    EXPECT_TRUE(names->empty());
    ASSERT_NE(names->gpu(gpu), nullptr);
    EXPECT_EQ(names->gpu(gpu)->index, 0u);
    EXPECT_EQ(names->gpu(gpu)->minor, 0u);

    // The profiles it could make, 1g.10gb+me (profile id 20) among them.
    Profiles profiles = lgip_profiles(capture(machine, "mig-lgip.txt"));
    EXPECT_EQ(profiles, (Profiles{{"1g.10gb", 19},
                                  {"1g.10gb+me", 20},
                                  {"1g.20gb", 15},
                                  {"2g.20gb", 14},
                                  {"3g.40gb", 9},
                                  {"4g.40gb", 5},
                                  {"7g.80gb", 0}}));
    expect_valid_profiles(profiles);
}

// DGX A100 (8x A100-SXM4-40GB), driver 470.82.01: -L alone. MIG UUIDs in
// the MIG-<uuid> form under four of the GPUs; without -q -x none of them
// can be placed on a GI and CI, so none is.
TEST(Captures, DgxA100Driver470List) {
    const std::string machine = "a100-sxm4-40gb-470.82.01";
    auto list = parse_nvidia_smi_list(capture(machine, "L.txt"), "L.txt");
    ASSERT_TRUE(list) << list.error().text();
    ASSERT_EQ(list->size(), 8u);
    for (const SmiListGpu& gpu : *list) {
        EXPECT_EQ(gpu.name, "NVIDIA A100-SXM4-40GB");
        EXPECT_EQ(gpu.migs.empty(), gpu.index < 4) << gpu.index;
    }
    EXPECT_EQ((*list)[0].uuid, "GPU-4dd97325-7fe6-abf1-d6a9-ba746fe0fdab");
    const SmiListGpu& seven_small = (*list)[4];
    EXPECT_EQ(seven_small.uuid, "GPU-c9297a60-5079-9a56-b935-51e08dc0f65e");
    ASSERT_EQ(seven_small.migs.size(), 7u);
    for (const SmiListMig& mig : seven_small.migs) {
        EXPECT_EQ(mig.profile, "1g.5gb");
    }
    EXPECT_EQ(seven_small.migs[0].uuid, "MIG-1c5876e6-d3b9-524a-9eb4-664fcfbd4de2");
    EXPECT_EQ(seven_small.migs[6].device, 6u);
    EXPECT_EQ(seven_small.migs[6].uuid, "MIG-42b3ba88-8dc5-5e51-9c89-76885370b661");
    ASSERT_EQ((*list)[5].migs.size(), 3u);
    EXPECT_EQ((*list)[5].migs[2].profile, "2g.10gb");
    ASSERT_EQ((*list)[6].migs.size(), 2u);
    EXPECT_EQ((*list)[6].migs[1].uuid, "MIG-4c7db5d8-f005-5927-803e-9ee984a56e15");
    const SmiListGpu& mixed = (*list)[7];
    ASSERT_EQ(mixed.migs.size(), 4u);
    EXPECT_EQ(mixed.migs[0].profile, "3g.20gb");
    EXPECT_EQ(mixed.migs[1].profile, "2g.10gb");
    EXPECT_EQ(mixed.migs[3].profile, "1g.5gb");
    EXPECT_EQ(mixed.migs[3].uuid, "MIG-2bcdbd01-44e6-5f68-ae6f-77448d2529f9");

    Diagnostics diagnostics;
    auto names = load_nvidia_smi_output(capture_dir(machine), diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    EXPECT_TRUE(diagnostics.empty());
    EXPECT_EQ(names->gpus().size(), 8u);
    EXPECT_TRUE(names->instances().empty()); // MIG device indices are not GI/CI ids
}

// A100 PCIe 40GB, driver 510.47.03 (VMware ESXi host): GIs 11, 12, 6, 1 and
// a CI in each, two of them smaller than their GI (1c.2g.10gb, 1c.3g.20gb).
// -L was taken when only GI 11 had its CI; there is no -q -x.
TEST(Captures, A100PcieDriver510ComputeInstanceProfiles) {
    const std::string machine = "a100-pcie-40gb-510.47.03";
    const std::string gpu = "GPU-14ac2834-0d81-0508-69eb-e25264c08d21";
    auto lgi = parse_nvidia_smi_lgi(capture(machine, "mig-lgi.txt"), "mig-lgi.txt");
    ASSERT_TRUE(lgi) << lgi.error().text();
    ASSERT_EQ(lgi->size(), 4u);
    const std::vector<std::tuple<unsigned, std::string, unsigned>> gis = {
        {11, "1g.5gb", 19}, {12, "1g.5gb", 19}, {6, "2g.10gb", 14}, {1, "3g.20gb", 9}};
    for (size_t i = 0; i < gis.size(); ++i) {
        EXPECT_EQ((*lgi)[i].gpu_index, 0u);
        EXPECT_EQ((*lgi)[i].gi, std::get<0>(gis[i]));
        EXPECT_EQ((*lgi)[i].profile, std::get<1>(gis[i]));
        EXPECT_EQ((*lgi)[i].profile_id, std::get<2>(gis[i]));
    }
    auto lci = parse_nvidia_smi_lci(capture(machine, "mig-lci.txt"), "mig-lci.txt");
    ASSERT_TRUE(lci) << lci.error().text();
    ASSERT_EQ(lci->size(), 4u);
    const std::vector<std::pair<unsigned, std::string>> cis = {
        {11, "1g.5gb"}, {12, "1g.5gb"}, {6, "1c.2g.10gb"}, {1, "1c.3g.20gb"}};
    for (size_t i = 0; i < cis.size(); ++i) {
        EXPECT_EQ((*lci)[i].gi, cis[i].first);
        EXPECT_EQ((*lci)[i].ci, 0u);
        EXPECT_EQ((*lci)[i].profile, cis[i].second);
        EXPECT_EQ((*lci)[i].profile_id, 0u);
    }
    auto list = parse_nvidia_smi_list(capture(machine, "L.txt"), "L.txt");
    ASSERT_TRUE(list) << list.error().text();
    ASSERT_EQ(list->size(), 1u);
    EXPECT_EQ((*list)[0].name, "NVIDIA A100-PCIE-40GB");
    ASSERT_EQ((*list)[0].migs.size(), 1u);
    EXPECT_EQ((*list)[0].migs[0].profile, "1g.5gb");
    EXPECT_EQ((*list)[0].migs[0].uuid, "MIG-b6cd45f2-9655-5269-9b96-65446729d5dc");

    Diagnostics diagnostics;
    auto names = load_nvidia_smi_output(capture_dir(machine), diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    EXPECT_TRUE(diagnostics.empty());
    ASSERT_EQ(names->instances().size(), 4u);
    EXPECT_EQ(names->find(gpu, 6, 0)->profile, "1c.2g.10gb");
    EXPECT_EQ(names->find(gpu, 1, 0)->profile, "1c.3g.20gb");
    EXPECT_EQ(names->find(gpu, 11, 0)->profile, "1g.5gb");
    for (const auto& [key, name] : names->instances()) {
        EXPECT_TRUE(name.uuid.empty()) << key.gi; // no -q -x: never guessed from -L
    }
    EXPECT_EQ(names->gi_profile(gpu, 6), "2g.10gb");
    EXPECT_EQ(names->gi_profile(gpu, 1), "3g.20gb");

    Profiles profiles = lgip_profiles(capture(machine, "mig-lgip.txt"));
    EXPECT_EQ(profiles, (Profiles{{"1g.5gb", 19},
                                  {"1g.5gb+me", 20},
                                  {"2g.10gb", 14},
                                  {"3g.20gb", 9},
                                  {"4g.20gb", 5},
                                  {"7g.40gb", 0}}));
    expect_valid_profiles(profiles);
}

// A100-SXM4-80GB, driver 535.54.03, -q -x only (telegraf's test data): four
// MIG devices, GIs 3-6, CI 0 each.
TEST(Captures, A100Sxm4Driver535QueryXml) {
    auto xml = parse_nvidia_smi_query_xml(capture("a100-sxm4-80gb-535.54.03", "q.xml"), "q.xml");
    ASSERT_TRUE(xml) << xml.error().text();
    ASSERT_EQ(xml->size(), 1u);
    const SmiQueryGpu& gpu = (*xml)[0];
    EXPECT_EQ(gpu.uuid, "GPU-513536b6-7d19-9063-b049-1e69664bb298");
    EXPECT_EQ(gpu.minor, 1u);
    EXPECT_EQ(gpu.name, "NVIDIA A100-SXM4-80GB");
    ASSERT_EQ(gpu.migs.size(), 4u);
    for (unsigned i = 0; i < 4; ++i) {
        EXPECT_EQ(gpu.migs[i].index, i);
        EXPECT_EQ(gpu.migs[i].gi, 3 + i);
        EXPECT_EQ(gpu.migs[i].ci, 0u);
    }
}

// 8x RTX PRO 6000 Blackwell Server Edition, driver 610.43.02: every profile
// kind Blackwell has (+me, +gfx, +me.all, -me), four 1g.24gb instances on
// each GPU (-lgi and -lci of GPU 0 only), and a mixed layout's -lgi.
TEST(Captures, RtxPro6000BlackwellDriver610) {
    const std::string machine = "rtx-pro-6000-blackwell-610.43.02";
    const std::string gpu0 = "GPU-8b89b58e-b427-108d-ac50-06138d78fe78";
    Profiles profiles = lgip_profiles(capture(machine, "mig-lgip.txt"));
    EXPECT_EQ(profiles, (Profiles{{"1g.24gb", 14},
                                  {"1g.24gb+me", 21},
                                  {"1g.24gb+gfx", 47},
                                  {"1g.24gb+me.all", 65},
                                  {"1g.24gb-me", 67},
                                  {"2g.48gb", 5},
                                  {"2g.48gb+gfx", 35},
                                  {"2g.48gb+me.all", 64},
                                  {"2g.48gb-me", 66},
                                  {"4g.96gb", 0},
                                  {"4g.96gb+gfx", 32}}));
    expect_valid_profiles(profiles);
    for (const auto& [name, id] : profiles) {
        EXPECT_EQ(autodetect_gres_type("NVIDIA RTX PRO 6000 Blackwell Server Edition", name),
                  "nvidia_rtx_pro_6000_blackwell_server_edition_" + name);
    }

    auto list = parse_nvidia_smi_list(capture(machine, "L.txt"), "L.txt");
    ASSERT_TRUE(list) << list.error().text();
    ASSERT_EQ(list->size(), 8u);
    for (const SmiListGpu& gpu : *list) {
        EXPECT_EQ(gpu.name, "NVIDIA RTX PRO 6000 Blackwell Server Edition");
        ASSERT_EQ(gpu.migs.size(), 4u);
        for (const SmiListMig& mig : gpu.migs) {
            EXPECT_EQ(mig.profile, "1g.24gb");
        }
    }
    EXPECT_EQ((*list)[0].uuid, gpu0);
    EXPECT_EQ((*list)[0].line, 2u); // after the empty line the post has first
    EXPECT_EQ((*list)[0].migs[0].uuid, "MIG-445da789-865d-5fd1-b2b6-32a48bf66c39");
    EXPECT_EQ((*list)[7].uuid, "GPU-f4c61521-240a-da09-2787-e576034e197e");
    EXPECT_EQ((*list)[7].migs[3].uuid, "MIG-0f8a469f-1116-5095-9e94-65e7809b554d");

    auto lgi = parse_nvidia_smi_lgi(capture(machine, "mig-lgi.txt"), "mig-lgi.txt");
    ASSERT_TRUE(lgi) << lgi.error().text();
    ASSERT_EQ(lgi->size(), 4u);
    for (unsigned i = 0; i < 4; ++i) {
        EXPECT_EQ((*lgi)[i].gi, 3 + i);
        EXPECT_EQ((*lgi)[i].profile, "1g.24gb");
        EXPECT_EQ((*lgi)[i].profile_id, 14u);
    }
    auto mixed = parse_nvidia_smi_lgi(capture(machine, "mig-lgi-mixed.txt"), "mig-lgi-mixed.txt");
    ASSERT_TRUE(mixed) << mixed.error().text();
    ASSERT_EQ(mixed->size(), 3u);
    EXPECT_EQ((*mixed)[2].gi, 1u);
    EXPECT_EQ((*mixed)[2].profile, "2g.48gb");
    EXPECT_EQ((*mixed)[2].profile_id, 5u);
    auto lci = parse_nvidia_smi_lci(capture(machine, "mig-lci.txt"), "mig-lci.txt");
    ASSERT_TRUE(lci) << lci.error().text();
    ASSERT_EQ(lci->size(), 4u);
    EXPECT_EQ((*lci)[3].gi, 6u);
    EXPECT_EQ((*lci)[3].ci, 0u);
    EXPECT_EQ((*lci)[3].profile, "1g.24gb");

    Diagnostics diagnostics;
    auto names = load_nvidia_smi_output(capture_dir(machine), diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    EXPECT_TRUE(diagnostics.empty());
    ASSERT_EQ(names->instances().size(), 4u); // GPU 0's, from -lci
    for (unsigned gi = 3; gi <= 6; ++gi) {
        ASSERT_NE(names->find(gpu0, gi, 0), nullptr) << gi;
        EXPECT_EQ(names->find(gpu0, gi, 0)->profile, "1g.24gb");
        EXPECT_EQ(names->find(gpu0, gi, 0)->uuid, ""); // no -q -x to join -L
        EXPECT_EQ(names->gi_profile(gpu0, gi), "1g.24gb");
    }
    EXPECT_EQ(names->gpu("GPU-f4c61521-240a-da09-2787-e576034e197e")->index, 7u);
}

// Every GPU-instance profile NVIDIA's own MIG configurations name
// (NVIDIA/mig-parted deployments/systemd/config-default.yaml at bd7160f4,
// A30 to RTX PRO 6000 Blackwell, B200, GB200 and GH200) is accepted.
TEST(Captures, EveryProfileInNvidiasMigConfigurations) {
    for (const char* profile :
         {"1g.10gb",     "1g.10gb+me",  "1g.12gb",        "1g.12gb+me",     "1g.18gb",
          "1g.18gb+me",  "1g.20gb",     "1g.23gb",        "1g.23gb+me",     "1g.24gb",
          "1g.24gb+gfx", "1g.24gb+me",  "1g.24gb+me.all", "1g.24gb-me",     "1g.34gb",
          "1g.34gb+me",  "1g.35gb",     "1g.35gb+me",     "1g.36gb",        "1g.45gb",
          "1g.47gb",     "1g.5gb",      "1g.5gb+me",      "1g.67gb",        "1g.6gb",
          "1g.6gb+me",   "1g.70gb",     "2g.10gb",        "2g.12gb",        "2g.12gb+me",
          "2g.20gb",     "2g.24gb",     "2g.35gb",        "2g.36gb",        "2g.45gb",
          "2g.47gb",     "2g.48gb",     "2g.48gb+gfx",    "2g.48gb+me.all", "2g.48gb-me",
          "2g.67gb",     "2g.70gb",     "3g.135gb",       "3g.139gb",       "3g.20gb",
          "3g.40gb",     "3g.47gb",     "3g.48gb",        "3g.71gb",        "3g.72gb",
          "3g.90gb",     "3g.93gb",     "3g.95gb",        "4g.135gb",       "4g.139gb",
          "4g.20gb",     "4g.24gb",     "4g.40gb",        "4g.47gb",        "4g.48gb",
          "4g.71gb",     "4g.72gb",     "4g.90gb",        "4g.93gb",        "4g.95gb",
          "4g.96gb",     "4g.96gb+gfx", "7g.141gb",       "7g.144gb",       "7g.180gb",
          "7g.186gb",    "7g.189gb",    "7g.269gb",       "7g.278gb",       "7g.40gb",
          "7g.80gb",     "7g.94gb",     "7g.96gb"}) {
        EXPECT_TRUE(valid_mig_profile(profile)) << profile;
    }
}

} // namespace gpuinit
