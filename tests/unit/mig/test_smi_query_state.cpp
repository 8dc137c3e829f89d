// nvidia-smi -q -x as gpu-mig apply reads it: each GPU's MIG mode, now and
// after the next reset, and the processes on it; from real captures and
// from the stand-in nvidia-smi's text.
#include "gpuinit/mig/names.hpp"
#include "machine_fixture.hpp"
#include "nvidia_smi_text.hpp"

#include <fstream>
#include <gtest/gtest.h>
#include <sstream>

namespace gpuinit {

namespace {

std::string capture(const std::string& path) {
    std::ifstream in(std::string(GPUINIT_TESTS_DIR) + "/fixture/captures/" + path);
    EXPECT_TRUE(in.good()) << path;
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

} // namespace

TEST(SmiQueryState, ReadsTheMigModeOfRealGpus) {
    auto h100 = parse_nvidia_smi_query_xml(capture("h100-580.159.04/q.xml"), "q.xml");
    ASSERT_TRUE(h100) << h100.error().text();
    ASSERT_EQ(h100->size(), 1u);
    EXPECT_EQ((*h100)[0].mig_current, false);
    EXPECT_EQ((*h100)[0].mig_pending, false);
    EXPECT_TRUE((*h100)[0].pids.empty());

    auto a100 = parse_nvidia_smi_query_xml(capture("a100-sxm4-80gb-535.54.03/q.xml"), "q.xml");
    ASSERT_TRUE(a100) << a100.error().text();
    ASSERT_EQ(a100->size(), 1u);
    EXPECT_EQ((*a100)[0].mig_current, true);
    EXPECT_EQ((*a100)[0].mig_pending, true);
}

TEST(SmiQueryState, ReadsTheProcessesOnEachGpu) {
    auto gpus = parse_nvidia_smi_query_xml(
        testing::smi_query_xml(testing::smi_a100_box(testing::fake_uuid)), "q.xml");
    ASSERT_TRUE(gpus) << gpus.error().text();
    ASSERT_EQ(gpus->size(), 4u);
    EXPECT_EQ((*gpus)[0].mig_current, false);
    EXPECT_TRUE((*gpus)[0].pids.empty());
    EXPECT_EQ((*gpus)[1].mig_current, true);
    EXPECT_EQ((*gpus)[1].pids, (std::vector<unsigned>{4242}));
    // On its first instance, GI 7 CI 0; off MIG the ids are N/A.
    EXPECT_EQ((*gpus)[1].process_instances, (std::vector<std::pair<unsigned, unsigned>>{{7, 0}}));
    EXPECT_TRUE((*gpus)[0].process_instances.empty());
}

TEST(SmiQueryState, RefusesAModeOrPidItCannotRead) {
    std::string text = testing::smi_query_xml(testing::smi_a100_box(testing::fake_uuid));
    std::string odd = text;
    odd.replace(odd.find("<pending_mig>Enabled"), 20, "<pending_mig>Maybe");
    auto mode = parse_nvidia_smi_query_xml(odd, "q.xml");
    ASSERT_FALSE(mode);
    EXPECT_NE(mode.error().text().find("q.xml:"), std::string::npos);
    EXPECT_NE(mode.error().text().find("not one MIG mode"), std::string::npos);

    std::string zero = text;
    zero.replace(zero.find("<pid>4242"), 9, "<pid>0");
    auto pid = parse_nvidia_smi_query_xml(zero, "q.xml");
    ASSERT_FALSE(pid);
    EXPECT_NE(pid.error().text().find("not a process id"), std::string::npos);
}

// <pci><pci_bus_id> as the canonical address ("00000000:00:06.0" on the
// H100); <gpu id="..."> outside <pci> is not it. N/A marks a GPU without MIG.
TEST(SmiQueryState, ReadsThePciAddressAndAGpuWithoutMig) {
    std::string text = capture("h100-580.159.04/q.xml");
    auto h100 = parse_nvidia_smi_query_xml(text, "q.xml");
    ASSERT_TRUE(h100) << h100.error().text();
    EXPECT_EQ((*h100)[0].bdf, "0000:00:06.0");
    EXPECT_FALSE((*h100)[0].mig_not_supported);

    std::string moved = text;
    moved.replace(moved.find("<pci_bus_id>00000000:00:06.0"), 28, "<pci_bus_id>00000000:A1:00.0");
    auto upper = parse_nvidia_smi_query_xml(moved, "q.xml");
    ASSERT_TRUE(upper) << upper.error().text();
    EXPECT_EQ((*upper)[0].bdf, "0000:a1:00.0");

    std::string bad = text;
    bad.replace(bad.find("<pci_bus_id>00000000:00:06.0"), 28, "<pci_bus_id>00000000:00:06.9");
    auto refused = parse_nvidia_smi_query_xml(bad, "q.xml");
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().text().find("not one PCI address"), std::string::npos);

    std::string none = text;
    none.replace(none.find("<current_mig>Disabled"), 21, "<current_mig>N/A");
    none.replace(none.find("<pending_mig>Disabled"), 21, "<pending_mig>N/A");
    auto without = parse_nvidia_smi_query_xml(none, "q.xml");
    ASSERT_TRUE(without) << without.error().text();
    EXPECT_TRUE((*without)[0].mig_not_supported);
    EXPECT_EQ((*without)[0].mig_current, std::nullopt);
}

// A process's name is text its user chooses, printed by nvidia-smi as it
// is. On one line, whatever it holds ('<', '&', an element's text) is a
// name and not elements; across lines it cannot be told from the rest,
// and the output is refused.
TEST(SmiQueryState, AProcessNameIsOnlyAName) {
    std::string text = testing::smi_query_xml(testing::smi_a100_box(testing::fake_uuid));
    std::string odd = text;
    odd.replace(odd.find("<process_name>python3</process_name>"), 36,
                "<process_name>a<b & </pid><pid>77</pid>c</process_name>");
    auto gpus = parse_nvidia_smi_query_xml(odd, "q.xml");
    ASSERT_TRUE(gpus) << gpus.error().text();
    EXPECT_EQ((*gpus)[1].pids, (std::vector<unsigned>{4242}));

    std::string lines = text;
    lines.replace(lines.find("<process_name>python3</process_name>"), 36,
                  "<process_name>a\n</process_info>\n<process_info>\n<pid>77</pid>\n"
                  "<process_name>b</process_name>");
    auto refused = parse_nvidia_smi_query_xml(lines, "q.xml");
    ASSERT_FALSE(refused) << (*refused)[1].pids.size() << " pids";
    EXPECT_NE(refused.error().text().find("process name"), std::string::npos)
        << refused.error().text();
}

// Each GPU once, each of its identities once: a second <gpu> with a UUID,
// PCI address or minor seen before, or a second <product_name>, <uuid> in
// one <gpu>, is not nvidia-smi's. <attached_gpus> is read before the
// first <gpu> only.
TEST(SmiQueryState, EachGpuOnceAndTheCountBeforeThem) {
    std::string text = testing::smi_query_xml(testing::smi_a100_box(testing::fake_uuid));
    std::optional<unsigned> attached;
    auto gpus = parse_nvidia_smi_query_xml(text, "q.xml", &attached);
    ASSERT_TRUE(gpus) << gpus.error().text();
    EXPECT_EQ(attached, 4u);

    std::string twice = text;
    twice.replace(twice.find(testing::fake_uuid(1)), 40, testing::fake_uuid(0));
    auto same = parse_nvidia_smi_query_xml(twice, "q.xml");
    ASSERT_FALSE(same);
    EXPECT_NE(same.error().text().find("listed twice"), std::string::npos) << same.error().text();

    std::string minors = text;
    minors.replace(minors.find("<minor_number>1<"), 16, "<minor_number>0<");
    EXPECT_FALSE(parse_nvidia_smi_query_xml(minors, "q.xml"));

    std::string named = text;
    size_t gpu = named.find("<product_name>");
    named.insert(named.find('\n', gpu) + 1, "\t\t<product_name>Other</product_name>\n");
    EXPECT_FALSE(parse_nvidia_smi_query_xml(named, "q.xml"));

    std::string late = text;
    late.insert(late.find("</nvidia_smi_log>"), "\t<attached_gpus>5</attached_gpus>\n");
    EXPECT_FALSE(parse_nvidia_smi_query_xml(late, "q.xml", &attached));
}

// "No GPU instances found: Not Found" is none; with a permission failure
// after it, it is a failure, not an empty list.
TEST(SmiQueryState, NoInstancesForWantOfPermissionIsAFailure) {
    auto none = parse_nvidia_smi_lgi("No GPU instances found: Not Found\n", "lgi");
    ASSERT_TRUE(none) << none.error().text();
    EXPECT_TRUE(none->empty());
    auto denied = parse_nvidia_smi_lgi("No GPU instances found: Insufficient Permissions\n", "lgi");
    ASSERT_FALSE(denied);
    EXPECT_NE(denied.error().text().find("only for root"), std::string::npos);
    EXPECT_FALSE(
        parse_nvidia_smi_lci("No compute instances found: Insufficient Permissions\n", "lci"));
}

} // namespace gpuinit
