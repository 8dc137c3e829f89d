// MIG profile names and UUIDs: the model, its join with the instances from
// /proc, and nvidia-smi's output (parsed, joined, loaded from a directory,
// run). Joins go by GPU UUID, never by nvidia-smi's index.
#include "gpuinit/mig/names.hpp"
#include "machine_fixture.hpp"
#include "nvidia_smi_text.hpp"
#include "temp_dir.hpp"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit {

using testing::a100_mig_box;
using testing::fake_mig_uuid;
using testing::fake_uuid;
using testing::SmiFakeGpu;
using testing::SmiFakeInstance;
using testing::TempDir;

namespace {

std::vector<MigInstance> instances_of(const testing::FakeMachine& fake) {
    Diagnostics diagnostics;
    TempDir dir;
    EXPECT_TRUE(write_fixture(fake, dir.path()));
    auto root = Sysroot::open(dir.path());
    auto machine = discover_machine(*root, diagnostics);
    auto topology = read_mig_topology(*root, diagnostics);
    EXPECT_TRUE(machine && topology);
    EXPECT_TRUE(diagnostics.empty());
    return join_mig_instances(*machine, *topology, diagnostics);
}

std::vector<SmiFakeGpu> a100_smi() {
    return testing::smi_a100_box([](unsigned minor) { return fake_uuid(minor); });
}

NvidiaSmiTexts all_texts(const std::vector<SmiFakeGpu>& gpus) {
    NvidiaSmiTexts texts;
    texts.list = testing::smi_list(gpus);
    texts.lgi = testing::smi_lgi(gpus);
    texts.lci = testing::smi_lci(gpus);
    texts.query_xml = testing::smi_query_xml(gpus);
    return texts;
}

// A machine with MIG on minor 1 only, and its nvidia-smi view.
struct Layout {
    testing::FakeMachine machine;
    std::vector<SmiFakeGpu> smi;
};

Layout layout(const std::string& name, std::vector<SmiFakeInstance> instances) {
    Layout out;
    out.machine = testing::workstation(2);
    out.machine.mig_caps = true;
    for (const SmiFakeInstance& instance : instances) {
        bool found = false;
        for (testing::FakeMigInstance& gi : out.machine.mig) {
            if (gi.gi == instance.gi) {
                gi.cis.push_back(instance.ci);
                found = true;
            }
        }
        if (!found) {
            out.machine.mig.push_back({1, instance.gi, {instance.ci}});
        }
    }
    out.smi = testing::smi_a100_box([](unsigned minor) { return fake_uuid(minor); });
    out.smi.resize(2);
    out.smi[1].name = name;
    out.smi[1].instances = std::move(instances);
    return out;
}

bool mentions(const Diagnostic& diagnostic, std::string_view text) {
    return diagnostic.text().find(text) != std::string::npos;
}

void write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
}

} // namespace

TEST(MigNames, ValidatesUuidsAndProfiles) {
    EXPECT_TRUE(valid_mig_uuid("MIG-3c4c5a27-1007-5001-a000-0007e5494657"));
    EXPECT_FALSE(valid_mig_uuid("MIG-GPU-558ce121-5b8b-16a1-87d4-ce157bba0001/7/0"));
    EXPECT_TRUE(old_mig_uuid_form("MIG-GPU-558ce121-5b8b-16a1-87d4-ce157bba0001/7/0"));
    EXPECT_FALSE(valid_mig_uuid("MIG-3c4c5a27-1007-5001-a000-0007e549465"));
    EXPECT_FALSE(valid_mig_uuid("GPU-3c4c5a27-1007-5001-a000-0007e5494657"));
    // GPU-instance profiles with every suffix nvml.h has a profile for
    // (_REV1 +me, _ALL_ME +me.all, _GFX +gfx, _NO_ME -me), compute-instance
    // profiles ("1c." in a bigger GI), and the longest real names.
    for (const char* good :
         {"1g.10gb", "1c.3g.40gb", "7g.80gb", "1g.24gb+me", "1g.10gb+me.all", "4g.94gb+gfx",
          "2c.7g.80gb", "1g.24gb-me", "2g.48gb-me", "1g.24gb+me.all", "2g.48gb+gfx", "1c.2g.10gb",
          "7g.269gb", "1g.24gb+gfx-me", "1g.10gb+me.all.all.all.all.all.a"}) {
        EXPECT_TRUE(valid_mig_profile(good)) << good;
    }
    for (const char* bad : {"",
                            "MIG",
                            "1g",
                            "g.10gb",
                            "1g.gb",
                            "1g.10",
                            "1g.10gb+",
                            "1x.1g.5gb",
                            "1g.10gb me",
                            "1g.10gb\n",
                            "1g.10gb+m\x1b",
                            "1g.10gb-",
                            "1g.10gb+-me",
                            "1g.10gb+me,gfx",
                            "1g.10gb+me..all",
                            "1g.10gb+.me",
                            "1g.10gb+me.",
                            "1g.10gb+2me",
                            "1g.10gb+me_all",
                            "1g.10gb--me",
                            "1g.10gb+m\xc3\xa9",
                            "1c.1c.1g.10gb",
                            "1g.10gb+me.all.all.all.all.all.ab"}) {
        EXPECT_FALSE(valid_mig_profile(bad)) << bad;
    }
}

TEST(MigNames, TheModelRefusesConflictsAndTheOldUuidForm) {
    MigNames names("test");
    std::string gpu = fake_uuid(1);
    EXPECT_TRUE(names.add_profile(gpu, 7, 0, "1g.10gb"));
    EXPECT_TRUE(names.add_profile(gpu, 7, 0, "1g.10gb"));
    EXPECT_FALSE(names.add_profile(gpu, 7, 0, "2g.20gb"));
    EXPECT_TRUE(names.add_uuid(gpu, 7, 0, fake_mig_uuid(1, 7, 0)));
    EXPECT_FALSE(names.add_uuid(gpu, 8, 0, fake_mig_uuid(1, 7, 0))); // one UUID, one instance
    auto old = names.add_uuid(gpu, 8, 0, "MIG-" + gpu + "/8/0");
    ASSERT_FALSE(old);
    EXPECT_NE(old.error().message.find("R470"), std::string::npos) << old.error().message;
    EXPECT_FALSE(names.add_profile("GPU-0", 7, 0, "1g.10gb"));
    // Lookups ignore the case of the GPU UUID.
    std::string upper = gpu;
    for (char& c : upper) {
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    const MigName* found = names.find(upper.replace(0, 4, "GPU-"), 7, 0);
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(found->profile, "1g.10gb");
}

TEST(MigNames, A100BoxGetsEveryProfileAndUuidFromNvidiaSmi) {
    std::vector<MigInstance> instances = instances_of(a100_mig_box());
    ASSERT_EQ(instances.size(), 21u);
    Diagnostics diagnostics;
    auto names = mig_names_from_nvidia_smi(all_texts(a100_smi()), diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    EXPECT_TRUE(diagnostics.empty());
    apply_mig_names(instances, *names, diagnostics);
    EXPECT_TRUE(diagnostics.empty()) << diagnostics.items()[0].text();
    for (const MigInstance& instance : instances) {
        EXPECT_EQ(instance.profile, "1g.10gb") << instance.key();
        EXPECT_EQ(instance.uuid, fake_mig_uuid(instance.gpu_minor, instance.gi, 0))
            << instance.key();
    }
    ASSERT_NE(names->gpu(fake_uuid(2)), nullptr);
    EXPECT_EQ(names->gpu(fake_uuid(2))->index, 2u);
    EXPECT_EQ(names->gpu(fake_uuid(2))->minor, 2u);
    EXPECT_EQ(names->gpu(fake_uuid(2))->name, "NVIDIA A100 80GB PCIe");
    EXPECT_EQ(names->gi_profile(fake_uuid(3), 14), "1g.10gb");
}

TEST(MigNames, WithoutTheXmlUuidsStayUnknownAndAreReportedOnce) {
    std::vector<MigInstance> instances = instances_of(a100_mig_box());
    NvidiaSmiTexts texts = all_texts(a100_smi());
    texts.query_xml.reset();
    Diagnostics diagnostics;
    auto names = mig_names_from_nvidia_smi(texts, diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    apply_mig_names(instances, *names, diagnostics);
    for (const MigInstance& instance : instances) {
        EXPECT_EQ(instance.profile, "1g.10gb"); // from mig -lci
        EXPECT_TRUE(instance.uuid.empty());     // never guessed
    }
    ASSERT_EQ(diagnostics.items().size(), 1u);
    const Diagnostic& warning = diagnostics.items()[0];
    EXPECT_EQ(warning.severity, Severity::Warning);
    EXPECT_TRUE(mentions(warning, "21 MIG instances have no MIG UUID (gpu1/gi7/ci0, ...)"))
        << warning.text();
    EXPECT_TRUE(mentions(warning, "q.xml (nvidia-smi -q -x")) << warning.text();
    EXPECT_LE(warning.text().size(), 200u) << warning.text();
}

// A process name that spans lines makes -q -x unreadable; a user chooses
// it, so the names are still made, without the UUIDs -q -x would give,
// and the warning says which line.
TEST(MigNames, AProcessNameOverLinesLeavesOutTheXmlNotTheNames) {
    std::vector<MigInstance> instances = instances_of(a100_mig_box());
    NvidiaSmiTexts texts = all_texts(a100_smi());
    std::string& xml = *texts.query_xml;
    xml.replace(xml.find("<process_name>python3</process_name>"), 36,
                "<process_name>a\n</process_info>\n</processes>\n<process_name>b</process_name>");
    Diagnostics diagnostics;
    auto names = mig_names_from_nvidia_smi(texts, diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    apply_mig_names(instances, *names, diagnostics);
    for (const MigInstance& instance : instances) {
        EXPECT_EQ(instance.profile, "1g.10gb");
        EXPECT_TRUE(instance.uuid.empty());
    }
    ASSERT_FALSE(diagnostics.items().empty());
    EXPECT_TRUE(mentions(diagnostics.items()[0], "process name over more than one line"))
        << diagnostics.items()[0].text();
}

TEST(MigNames, NoNamesAtAllSaysWhatIsUnknownAndHowToGiveIt) {
    std::vector<MigInstance> instances = instances_of(a100_mig_box());
    Diagnostics diagnostics;
    apply_mig_names(instances, MigNames(), diagnostics);
    ASSERT_EQ(diagnostics.items().size(), 1u);
    const Diagnostic& warning = diagnostics.items()[0];
    EXPECT_TRUE(mentions(warning, "21 MIG instances have no profile name or MIG UUID"))
        << warning.text();
    EXPECT_TRUE(mentions(warning, "--nvidia-smi-output DIR")) << warning.text();
    // One short line (it was 600 characters, repeated by every command).
    EXPECT_LE(warning.text().size(), 160u) << warning.text();
}

TEST(MigNames, MixedProfilesAndAGiWithTwoCis) {
    Layout mixed = layout("NVIDIA A100-SXM4-80GB", {{1, 0, "3g.40gb", "2c.3g.40gb", 9, 1, 4, 4},
                                                    {1, 1, "3g.40gb", "1c.3g.40gb", 9, 0, 4, 4},
                                                    {5, 0, "2g.20gb", "2g.20gb", 14, 1, 2, 2},
                                                    {13, 0, "1g.10gb", "1g.10gb", 19, 0, 1, 1}});
    std::vector<MigInstance> instances = instances_of(mixed.machine);
    ASSERT_EQ(instances.size(), 4u);
    Diagnostics diagnostics;
    auto names = mig_names_from_nvidia_smi(all_texts(mixed.smi), diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    apply_mig_names(instances, *names, diagnostics);
    EXPECT_TRUE(diagnostics.empty());
    EXPECT_EQ(instances[0].key(), "gpu1/gi1/ci0");
    EXPECT_EQ(instances[0].profile, "2c.3g.40gb");
    EXPECT_EQ(instances[1].key(), "gpu1/gi1/ci1");
    EXPECT_EQ(instances[1].profile, "1c.3g.40gb");
    EXPECT_EQ(instances[1].uuid, fake_mig_uuid(1, 1, 1));
    EXPECT_EQ(instances[2].profile, "2g.20gb");
    EXPECT_EQ(instances[3].profile, "1g.10gb");
    EXPECT_EQ(names->gi_profile(fake_uuid(1), 1), "3g.40gb");
}

TEST(MigNames, H100Layout) {
    Layout h100 =
        layout("NVIDIA H100 80GB HBM3", {{2, 0, "3g.40gb", "3g.40gb", 9, 2, 4, 4},
                                         {3, 0, "2g.20gb", "2g.20gb", 14, 1, 2, 2},
                                         {9, 0, "1g.20gb", "1g.20gb", 15, 0, 6, 1},
                                         {13, 0, "1g.10gb+me", "1g.10gb+me", 20, 0, 1, 1}});
    std::vector<MigInstance> instances = instances_of(h100.machine);
    Diagnostics diagnostics;
    auto names = mig_names_from_nvidia_smi(all_texts(h100.smi), diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    apply_mig_names(instances, *names, diagnostics);
    EXPECT_TRUE(diagnostics.empty());
    ASSERT_EQ(instances.size(), 4u);
    EXPECT_EQ(instances[3].key(), "gpu1/gi13/ci0");
    EXPECT_EQ(instances[3].profile, "1g.10gb+me");
    EXPECT_EQ(instances[3].uuid, fake_mig_uuid(1, 13, 0));
    EXPECT_EQ(names->gpu(fake_uuid(1))->name, "NVIDIA H100 80GB HBM3");
}

// Blackwell's profiles (RTX PRO 6000: nvidia-smi mig -lgip in
// tests/fixture/captures/rtx-pro-6000-blackwell-610.43.02) in every text:
// one such instance used to fail the whole output.
TEST(MigNames, BlackwellProfilesInEveryText) {
    Layout rtx = layout("NVIDIA RTX PRO 6000 Blackwell Server Edition",
                        {{3, 0, "1g.24gb-me", "1g.24gb-me", 67, 0, 0, 3},
                         {4, 0, "1g.24gb+me.all", "1g.24gb+me.all", 65, 0, 3, 3},
                         {1, 0, "2g.48gb+gfx", "2g.48gb+gfx", 35, 1, 6, 6}});
    std::vector<MigInstance> instances = instances_of(rtx.machine);
    ASSERT_EQ(instances.size(), 3u);
    for (const std::string& text :
         {testing::smi_list(rtx.smi), testing::smi_lgi(rtx.smi), testing::smi_lci(rtx.smi)}) {
        EXPECT_NE(text.find("MIG 1g.24gb-me"), std::string::npos) << text;
    }
    auto lgi = parse_nvidia_smi_lgi(testing::smi_lgi(rtx.smi), "lgi");
    ASSERT_TRUE(lgi) << lgi.error().text();
    ASSERT_EQ(lgi->size(), 3u);
    EXPECT_EQ((*lgi)[0].profile, "1g.24gb-me");
    EXPECT_EQ((*lgi)[0].profile_id, 67u);
    Diagnostics diagnostics;
    auto names = mig_names_from_nvidia_smi(all_texts(rtx.smi), diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    apply_mig_names(instances, *names, diagnostics);
    EXPECT_TRUE(diagnostics.empty()) << diagnostics.items()[0].text();
    EXPECT_EQ(instances[0].key(), "gpu1/gi1/ci0");
    EXPECT_EQ(instances[0].profile, "2g.48gb+gfx");
    EXPECT_EQ(instances[1].profile, "1g.24gb-me");
    EXPECT_EQ(instances[1].uuid, fake_mig_uuid(1, 3, 0));
    EXPECT_EQ(instances[2].profile, "1g.24gb+me.all");
    EXPECT_EQ(names->gi_profile(fake_uuid(1), 3), "1g.24gb-me");
}

// -L names a MIG device as NVML does, and that name is what Slurm's
// AutoDetect=nvml types are made of; -lci names the compute instance's own
// profile, which nvidia-smi spells without the GI's +me ("created compute
// instance ... using profile MIG 1g.10gb (ID 0)" in a 1g.10gb+me GI). With
// -q -x to join -L, -L's name is the instance's; without it, -lci's.
TEST(MigNames, TheListNameWinsOverTheComputeInstanceProfile) {
    Layout h100 = layout("NVIDIA H100 80GB HBM3", {{13, 0, "1g.10gb+me", "1g.10gb+me", 20, 0, 1, 1},
                                                   {9, 0, "1g.20gb", "1g.20gb", 15, 0, 6, 1}});
    std::vector<MigInstance> instances = instances_of(h100.machine);
    NvidiaSmiTexts texts = all_texts(h100.smi);
    std::string& lci = *texts.lci;
    size_t at = lci.find("MIG 1g.10gb+me");
    ASSERT_NE(at, std::string::npos);
    lci.replace(at, 14, "MIG 1g.10gb   ");
    Diagnostics diagnostics;
    auto names = mig_names_from_nvidia_smi(texts, diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    EXPECT_TRUE(diagnostics.empty());
    EXPECT_EQ(names->find(fake_uuid(1), 13, 0)->profile, "1g.10gb+me");
    EXPECT_EQ(names->find(fake_uuid(1), 9, 0)->profile, "1g.20gb");
    texts.query_xml.reset();
    auto unjoined = mig_names_from_nvidia_smi(texts, diagnostics);
    ASSERT_TRUE(unjoined) << unjoined.error().text();
    EXPECT_EQ(unjoined->find(fake_uuid(1), 13, 0)->profile, "1g.10gb");
    EXPECT_EQ(unjoined->gi_profile(fake_uuid(1), 13), "1g.10gb+me");
    apply_mig_names(instances, *names, diagnostics);
    EXPECT_TRUE(diagnostics.empty());
    EXPECT_EQ(instances[1].key(), "gpu1/gi13/ci0");
    EXPECT_EQ(instances[1].profile, "1g.10gb+me");
}

// nvidia-smi numbers GPUs its own way (here: 0 -> minor 2, 1 -> minor 0,
// 2 -> minor 3, 3 -> minor 1); the MIG device order differs too. Names
// still land on the right minor, because they are joined by UUID.
TEST(MigNames, AnIndexThatIsNotTheMinorIsJoinedByUuid) {
    std::vector<SmiFakeGpu> gpus = a100_smi();
    const unsigned smi_index[] = {1, 3, 0, 2}; // by minor
    for (SmiFakeGpu& gpu : gpus) {
        gpu.index = smi_index[gpu.minor];
        std::reverse(gpu.instances.begin(), gpu.instances.end());
    }
    std::sort(gpus.begin(), gpus.end(),
              [](const SmiFakeGpu& a, const SmiFakeGpu& b) { return a.index < b.index; });
    std::vector<MigInstance> instances = instances_of(a100_mig_box());
    Diagnostics diagnostics;
    auto names = mig_names_from_nvidia_smi(all_texts(gpus), diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    apply_mig_names(instances, *names, diagnostics);
    EXPECT_TRUE(diagnostics.empty());
    for (const MigInstance& instance : instances) {
        EXPECT_EQ(instance.uuid, fake_mig_uuid(instance.gpu_minor, instance.gi, 0))
            << instance.key();
    }
    EXPECT_EQ(names->gpu(fake_uuid(1))->index, 3u);
    EXPECT_EQ(names->gpu(fake_uuid(1))->minor, 1u);
}

TEST(MigNames, NamesOfInstancesTheDriverDoesNotListAreReportedNotUsed) {
    std::vector<SmiFakeGpu> gpus = a100_smi();
    gpus[2].instances.push_back({12, 0});
    std::vector<MigInstance> instances = instances_of(a100_mig_box());
    Diagnostics diagnostics;
    auto names = mig_names_from_nvidia_smi(all_texts(gpus), diagnostics);
    ASSERT_TRUE(names);
    apply_mig_names(instances, *names, diagnostics);
    ASSERT_EQ(diagnostics.items().size(), 1u);
    EXPECT_TRUE(mentions(diagnostics.items()[0], "1 MIG instances named by nvidia-smi output are "
                                                 "not in the driver's capability files"))
        << diagnostics.items()[0].text();
    EXPECT_TRUE(mentions(diagnostics.items()[0], "GI 12 CI 0"));
}

TEST(NvidiaSmi, ParsesListLgiLciAndXml) {
    std::vector<SmiFakeGpu> gpus = a100_smi();
    auto list = parse_nvidia_smi_list(testing::smi_list(gpus), "L.txt");
    ASSERT_TRUE(list) << list.error().text();
    ASSERT_EQ(list->size(), 4u);
    EXPECT_EQ((*list)[1].uuid, fake_uuid(1));
    EXPECT_EQ((*list)[1].name, "NVIDIA A100 80GB PCIe");
    ASSERT_EQ((*list)[1].migs.size(), 7u);
    EXPECT_EQ((*list)[1].migs[6].device, 6u);
    EXPECT_EQ((*list)[1].migs[6].line, 9u); // GPU 0, GPU 1, then its devices
    auto lgi = parse_nvidia_smi_lgi(testing::smi_lgi(gpus), "lgi");
    ASSERT_TRUE(lgi) << lgi.error().text();
    EXPECT_EQ(lgi->size(), 21u);
    EXPECT_EQ(lgi->back().gi, 14u);
    EXPECT_EQ(lgi->back().profile_id, 19u);
    auto lci = parse_nvidia_smi_lci(testing::smi_lci(gpus), "lci");
    ASSERT_TRUE(lci) << lci.error().text();
    EXPECT_EQ(lci->size(), 21u);
    auto xml = parse_nvidia_smi_query_xml(testing::smi_query_xml(gpus), "q.xml");
    ASSERT_TRUE(xml) << xml.error().text();
    ASSERT_EQ(xml->size(), 4u);
    EXPECT_TRUE((*xml)[0].migs.empty());
    ASSERT_EQ((*xml)[3].migs.size(), 7u); // the process's GI/CI ids are not MIG devices
    EXPECT_EQ((*xml)[3].migs[5].gi, 13u);
    EXPECT_EQ((*xml)[3].minor, 3u);
    // The empty forms nvidia-smi prints.
    EXPECT_TRUE(parse_nvidia_smi_lgi("No GPU instances found: Not Found\n", "x"));
    EXPECT_TRUE(parse_nvidia_smi_lci("No compute instances found: Not Found\n", "x"));
    EXPECT_TRUE(parse_nvidia_smi_list("No devices found.\n", "x"));
    // No GPU has MIG on (captures/h100-580.159.04).
    for (auto parse : {+[](std::string_view t) { return parse_nvidia_smi_lgi(t, "x").ok(); },
                       +[](std::string_view t) { return parse_nvidia_smi_lci(t, "x").ok(); }}) {
        EXPECT_TRUE(parse("No MIG-enabled devices found.\n"));
        EXPECT_FALSE(parse("No MIG-enabled devices found. Really\n"));
    }
}

TEST(NvidiaSmi, HostileInputIsRefusedWithFileAndLine) {
    std::string good = testing::smi_list(a100_smi());
    struct Case {
        std::string text;
        size_t line;
        std::string says;
    };
    std::string gpu0 = "GPU 0: NVIDIA A100 80GB PCIe (UUID: " + fake_uuid(0) + ")\n";
    for (const Case& c : std::vector<Case>{
             {gpu0 + "  MIG 1g.10gb Device  0: (UUID: MIG-" + fake_uuid(0) + "/7/0)\n", 2,
              "old MIG-GPU-<uuid>/<gi>/<ci> form"},
             {gpu0 + gpu0, 2, "listed twice"},
             {"  MIG 1g.10gb Device  0: (UUID: MIG-3c4c5a27-1007-5001-a000-0007e5494657)\n", 1,
              "before any GPU"},
             {gpu0 + "  MIG 1g.10gb\x1b[2J Device 0: (UUID: x)\n", 2, "\\x1b"},
             {gpu0 + "  MIG 9g Device 0: (UUID: MIG-3c4c5a27-1007-5001-a000-0007e5494657)\n", 2,
              "not a MIG profile name"},
             {"GPU 99999999999999999999: x (UUID: " + fake_uuid(0) + ")\n", 1, "not a number"},
             {"GPU 0: x (UUID: GPU-zz)\n", 1, "not a GPU UUID"},
             {"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", 1,
              "load the driver"},
             {gpu0 + "hello\n", 2, "not a line of nvidia-smi -L"},
         }) {
        auto parsed = parse_nvidia_smi_list(c.text, "L.txt");
        ASSERT_FALSE(parsed) << c.text;
        EXPECT_EQ(parsed.error().where.file, "L.txt");
        EXPECT_EQ(parsed.error().where.line, c.line) << parsed.error().text();
        EXPECT_NE(parsed.error().text().find(c.says), std::string::npos) << parsed.error().text();
    }
    auto lci = parse_nvidia_smi_lci("Insufficient Permissions\n", "lci");
    ASSERT_FALSE(lci);
    EXPECT_NE(lci.error().message.find("root"), std::string::npos);
    auto bad_gi =
        parse_nvidia_smi_lci("|   1     15       MIG 1g.10gb     0     0     0:1   |\n", "lci");
    ASSERT_FALSE(bad_gi);
    EXPECT_EQ(bad_gi.error().text().substr(0, 6), "lci:1:");
    EXPECT_FALSE(parse_nvidia_smi_lgi("|   1  MIG 1g.10gb  19  7  0:1 |\n"
                                      "|   1  MIG 1g.10gb  19  7  1:1 |\n",
                                      "lgi"));
    EXPECT_FALSE(parse_nvidia_smi_lgi("|   1  MIG 1g.10gb  19  7  0:1 extra |\n", "lgi"));

    std::string xml = testing::smi_query_xml(a100_smi());
    auto cut =
        parse_nvidia_smi_query_xml(xml.substr(0, xml.find('\n', xml.size() / 2) + 1), "q.xml");
    ASSERT_FALSE(cut);
    EXPECT_NE(cut.error().message.find("cut short"), std::string::npos);
    std::string no_ci = xml;
    no_ci.erase(no_ci.find("\t\t\t\t<compute_instance_id>"),
                no_ci.find('\n', no_ci.find("<compute_instance_id>")) + 1 -
                    no_ci.find("\t\t\t\t<compute_instance_id>"));
    auto missing = parse_nvidia_smi_query_xml(no_ci, "q.xml");
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().message.find("without <index>"), std::string::npos);
    EXPECT_GT(missing.error().where.line, 1u);
    EXPECT_FALSE(
        parse_nvidia_smi_query_xml("<nvidia_smi_log><gpu>\n</gpu></nvidia_smi_log>\n", "x"));
    EXPECT_FALSE(parse_nvidia_smi_query_xml("<other>\n</other>\n", "x"));
    EXPECT_FALSE(parse_nvidia_smi_query_xml("", "x"));

    // A bad text fails the whole join, naming its file and line.
    NvidiaSmiTexts texts = all_texts(a100_smi());
    texts.lci =
        "|   1      7       MIG 1g.10gb   0   0   0:1 |\n|   1   7  MIG 1g.10gb  0  0  0:1 |\n";
    Diagnostics diagnostics;
    auto names = mig_names_from_nvidia_smi(texts, diagnostics);
    ASSERT_FALSE(names);
    EXPECT_EQ(names.error().where.line, 2u);
    texts = all_texts(a100_smi());
    texts.list.reset();
    EXPECT_FALSE(mig_names_from_nvidia_smi(texts, diagnostics));
}

TEST(NvidiaSmi, LoadsTheSavedOutputDirectory) {
    TempDir dir;
    std::vector<SmiFakeGpu> gpus = a100_smi();
    Diagnostics diagnostics;
    auto none = load_nvidia_smi_output(dir.path(), diagnostics);
    ASSERT_FALSE(none);
    EXPECT_NE(none.error().message.find("L.txt: missing"), std::string::npos);
    write(dir / "L.txt", testing::smi_list(gpus));
    write(dir / "q.xml", testing::smi_query_xml(gpus));
    auto names = load_nvidia_smi_output(dir.path(), diagnostics);
    ASSERT_TRUE(names) << names.error().text();
    EXPECT_EQ(names->source(), "nvidia-smi output in " + dir.path());
    EXPECT_EQ(names->find(fake_uuid(3), 14, 0)->uuid, fake_mig_uuid(3, 14, 0));
    write(dir / "mig-lci.txt", "Insufficient Permissions\n");
    auto refused = load_nvidia_smi_output(dir.path(), diagnostics);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().where.file, dir / "mig-lci.txt");
    EXPECT_EQ(refused.error().where.line, 1u);
}

TEST(NvidiaSmi, RunsNvidiaSmiFromPathOrSaysItIsNotThere) {
    TempDir dir;
    const char* old_path = std::getenv("PATH");
    std::string saved = old_path != nullptr ? old_path : "";
    ::setenv("PATH", ("relative:" + dir.path()).c_str(), 1);
    auto missing = find_nvidia_smi();
    Diagnostics diagnostics;
    auto not_run = run_nvidia_smi(diagnostics);
    // A stand-in nvidia-smi that prints the fixture's output; mig -lci
    // fails as it does for a user.
    std::vector<SmiFakeGpu> gpus = a100_smi();
    write(dir / "L.txt", testing::smi_list(gpus));
    write(dir / "q.xml", testing::smi_query_xml(gpus));
    std::string script = dir / "nvidia-smi";
    write(script, "#!/bin/sh\ncase \"$*\" in\n"
                  "  -L) /bin/cat '" +
                      dir / "L.txt" +
                      "' ;;\n"
                      "  '-q -x') /bin/cat '" +
                      dir / "q.xml" +
                      "' ;;\n"
                      "  *) echo 'Insufficient Permissions'; exit 4 ;;\nesac\n");
    ::chmod(script.c_str(), 0755);
    auto found = find_nvidia_smi();
    auto names = run_nvidia_smi(diagnostics);
    ::setenv("PATH", saved.c_str(), 1);

    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().message.find("not on PATH"), std::string::npos);
    EXPECT_FALSE(not_run);
    ASSERT_TRUE(found) << found.error().text();
    EXPECT_EQ(*found, script);
    ASSERT_TRUE(names) << names.error().text();
    EXPECT_EQ(names->find(fake_uuid(1), 7, 0)->uuid, fake_mig_uuid(1, 7, 0));
    EXPECT_EQ(names->find(fake_uuid(1), 7, 0)->profile, "1g.10gb");
    ASSERT_EQ(diagnostics.count(Severity::Warning), 2u); // mig -lgi and -lci
    EXPECT_TRUE(mentions(diagnostics.items()[0], "exited with status 4"))
        << diagnostics.items()[0].text();
}

// Root runs the nvidia-smi it finds on PATH: one that another user could
// have written (group- or world-writable, or not root's; or its directory)
// is passed over, and the message says why.
TEST(NvidiaSmi, RootPassesOverOneOthersCouldHaveWritten) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "SKIPPED LOUDLY: needs root (the check is root's)";
    }
    TempDir planted;
    TempDir real;
    for (const TempDir* dir : {&planted, &real}) {
        std::string script = *dir / "nvidia-smi";
        write(script, "#!/bin/sh\nexit 0\n");
        ::chmod(script.c_str(), 0755);
    }
    ::chmod((planted / "nvidia-smi").c_str(), 0777);
    const char* old_path = std::getenv("PATH");
    std::string saved = old_path != nullptr ? old_path : "";
    ::setenv("PATH", (planted.path() + ":" + real.path()).c_str(), 1);
    auto found = find_nvidia_smi();
    ::chmod(planted.path().c_str(), 0777);
    ::chmod((planted / "nvidia-smi").c_str(), 0755);
    ::setenv("PATH", planted.path().c_str(), 1);
    auto in_open_dir = find_nvidia_smi();
    ::setenv("PATH", saved.c_str(), 1);
    ::chmod(planted.path().c_str(), 0700);

    ASSERT_TRUE(found) << found.error().text();
    EXPECT_EQ(*found, real / "nvidia-smi");
    ASSERT_FALSE(in_open_dir) << *in_open_dir;
    EXPECT_EQ(in_open_dir.error().code, EPERM);
    EXPECT_NE(in_open_dir.error().message.find(planted / "nvidia-smi"), std::string::npos)
        << in_open_dir.error().text();
}

namespace {

// A stand-in nvidia-smi in `dir` that serves the A100 box's texts and runs
// `misbehave` (a shell command: a hang, a flood) for the command `which`
// ("-L", "-q -x", ...) instead.
std::string fake_smi(const TempDir& dir, const std::string& which, const std::string& misbehave) {
    std::vector<SmiFakeGpu> gpus = a100_smi();
    write(dir / "L.txt", testing::smi_list(gpus));
    write(dir / "q.xml", testing::smi_query_xml(gpus));
    write(dir / "lgi.txt", testing::smi_lgi(gpus));
    write(dir / "lci.txt", testing::smi_lci(gpus));
    std::string script = dir / "nvidia-smi";
    write(script, "#!/bin/sh\nif [ \"$*\" = '" + which + "' ]; then\n  " + misbehave +
                      "\n  exit 0\nfi\ncase \"$*\" in\n"
                      "  -L) exec /bin/cat '" +
                      dir / "L.txt" + "' ;;\n  '-q -x') exec /bin/cat '" + dir / "q.xml" +
                      "' ;;\n  'mig -lgi') exec /bin/cat '" + dir / "lgi.txt" +
                      "' ;;\n  'mig -lci') exec /bin/cat '" + dir / "lci.txt" +
                      "' ;;\n  *) exit 9 ;;\nesac\n");
    ::chmod(script.c_str(), 0755);
    return script;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace

// A hung -q -x (a wedged driver) is killed: its names are left out with a
// warning, and the rest still come.
TEST(NvidiaSmi, AHungQueryIsKilledAndTheOtherNamesStillCome) {
    TempDir dir;
    std::string smi = fake_smi(dir, "-q -x", "/bin/sleep 30");
    Diagnostics diagnostics;
    auto start = std::chrono::steady_clock::now();
    auto names = run_nvidia_smi(diagnostics, smi, std::chrono::milliseconds(300));
    EXPECT_LT(seconds_since(start), 5.0);
    ASSERT_TRUE(names) << names.error().text();
    ASSERT_NE(names->gpu(fake_uuid(1)), nullptr);
    ASSERT_NE(names->find(fake_uuid(1), 7, 0), nullptr);
    EXPECT_EQ(names->find(fake_uuid(1), 7, 0)->profile, "1g.10gb");
    EXPECT_EQ(names->find(fake_uuid(1), 7, 0)->uuid, ""); // only -q -x joins the MIG UUIDs
    ASSERT_GE(diagnostics.count(Severity::Warning), 1u);
    const Diagnostic& warning = diagnostics.items()[0];
    EXPECT_EQ(warning.severity, Severity::Warning);
    EXPECT_TRUE(mentions(warning, smi + " -q -x: ")) << warning.text();
    EXPECT_TRUE(mentions(warning, "did not finish within 300 ms")) << warning.text();
    EXPECT_FALSE(diagnostics.has_errors());
}

TEST(NvidiaSmi, AHungOrFloodingListFails) {
    TempDir hung_dir;
    std::string hung_smi = fake_smi(hung_dir, "-L", "/bin/sleep 30");
    Diagnostics diagnostics;
    auto start = std::chrono::steady_clock::now();
    auto hung = run_nvidia_smi(diagnostics, hung_smi, std::chrono::milliseconds(300));
    EXPECT_LT(seconds_since(start), 5.0);
    ASSERT_FALSE(hung);
    EXPECT_EQ(hung.error().code, ETIMEDOUT);
    EXPECT_TRUE(mentions(hung.error(), hung_smi + " -L: ")) << hung.error().text();
    EXPECT_TRUE(mentions(hung.error(), "did not finish within 300 ms")) << hung.error().text();

    TempDir flood_dir;
    std::string flood_smi = fake_smi(flood_dir, "-L", "exec /usr/bin/yes");
    start = std::chrono::steady_clock::now();
    auto flood = run_nvidia_smi(diagnostics, flood_smi);
    EXPECT_LT(seconds_since(start), 10.0);
    ASSERT_FALSE(flood);
    EXPECT_EQ(flood.error().code, EFBIG);
    EXPECT_TRUE(mentions(flood.error(), flood_smi + " -L: ")) << flood.error().text();
    EXPECT_TRUE(mentions(flood.error(), std::to_string(kSmiOutputLimit) + " bytes"))
        << flood.error().text();
    EXPECT_TRUE(diagnostics.empty());
}

} // namespace gpuinit
