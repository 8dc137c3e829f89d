// gpuinit status's library: the pure assembly, the child's record, and the
// deadline around a probe.
#include "gpuinit/status/probes.hpp"
#include "gpuinit/status/report.hpp"

#include <chrono>
#include <cstdlib>
#include <gtest/gtest.h>
#include <thread>

namespace gpuinit::status {

namespace {

HeldGpu gpu(unsigned minor, HoldState state, std::string error = {}) {
    HeldGpu held;
    held.id = {minor, "0000:17:00.0", "GPU-0000"};
    held.id.bdf[6] = static_cast<char>('0' + minor);
    held.state = state;
    held.error = std::move(error);
    return held;
}

MigInstance instance(unsigned gpu_minor, unsigned gi) {
    MigInstance made;
    made.gpu_minor = gpu_minor;
    made.gpu_uuid = "GPU-11111111-2222-3333-4444-55555555555" + std::to_string(gpu_minor);
    made.gi = gi;
    made.ci = 0;
    return made;
}

} // namespace

TEST(StatusCodec, ASectionSurvivesThePipeWithEveryByteItCarries) {
    Section section;
    section.probe = "mig";
    section.verdict = Verdict::Differs;
    section.reason = "tab\there, newline\nthere, backslash\\ and \\t literally";
    section.seconds = 0.125;
    section.items.push_back({"gpu1/gi7/ci0", "leased", "held by alice pid 42\t", true});
    section.items.push_back({"", "", "", false});
    section.metrics.push_back({"gpuinit_mig_instance_leased", {{"instance", "a\"b"}}, 1});
    section.metrics.push_back({"gpuinit_mig_instances", {}, 2.5e10});
    auto decoded = decode_section(encode_section(section));
    ASSERT_TRUE(decoded) << decoded.error().text();
    EXPECT_EQ(*decoded, section);
}

TEST(StatusCodec, ARecordCutShortOrMalformedIsRefusedWhole) {
    Section section;
    section.probe = "nodes";
    section.items.push_back({"/dev/nvidia0", "differs", "mode", true});
    std::string record = encode_section(section);
    EXPECT_FALSE(decode_section(record.substr(0, record.size() - 2)));
    EXPECT_FALSE(decode_section(""));
    EXPECT_FALSE(decode_section("S\tnodes\tno-such-verdict\t\t0\nE\n"));
    EXPECT_FALSE(decode_section("I\tx\ty\tz\t1\nE\n")); // no section line first
    EXPECT_FALSE(decode_section(record + "E\n"));       // something after the end
    EXPECT_FALSE(decode_section("S\tnodes\tok\tbad\\qescape\t0\nE\n"));
}

TEST(StatusAssembly, APersistGpuThatFailedIsADifferenceNamingIt) {
    PersistFacts facts;
    facts.configured = true;
    facts.reply = ControlReply{};
    facts.reply->gpus = {gpu(0, HoldState::Held),
                         gpu(1, HoldState::Failed, "open failed: Input/output error"),
                         gpu(2, HoldState::Lost)};
    Section section = assemble_persist(facts);
    EXPECT_EQ(section.verdict, Verdict::Differs);
    EXPECT_NE(section.reason.find("GPU 1"), std::string::npos) << section.reason;
    EXPECT_NE(section.reason.find("Input/output error"), std::string::npos) << section.reason;
    ASSERT_EQ(section.items.size(), 3u);
    EXPECT_FALSE(section.items[0].problem);
    EXPECT_TRUE(section.items[1].problem);
    EXPECT_TRUE(section.items[2].problem);
}

TEST(StatusAssembly, ADisabledOrOpeningGpuIsNoProblem) {
    PersistFacts facts;
    facts.reply = ControlReply{};
    HeldGpu disabled = gpu(0, HoldState::Disabled);
    disabled.wanted = false;
    facts.reply->gpus = {disabled, gpu(1, HoldState::Opening)};
    EXPECT_EQ(assemble_persist(facts).verdict, Verdict::Ok);
}

TEST(StatusAssembly, NoPersistDaemonIsAFailureOnlyWhereItIsConfigured) {
    PersistFacts facts;
    facts.error = error("cannot connect", ECONNREFUSED);
    EXPECT_EQ(assemble_persist(facts).verdict, Verdict::NotConfigured);
    facts.configured = true;
    facts.configured_by = "/etc/systemd/system/multi-user.target.wants/gpu-persist.service";
    Section section = assemble_persist(facts);
    EXPECT_EQ(section.verdict, Verdict::Failed);
    EXPECT_NE(section.reason.find(facts.configured_by), std::string::npos) << section.reason;
    facts.error = error("cannot connect: permission denied", EACCES);
    EXPECT_EQ(assemble_persist(facts).verdict, Verdict::NotPermitted);
}

TEST(StatusAssembly, AnInstanceTheNamesFileLacksIsADifference) {
    MigFacts facts;
    facts.uses = InstanceUses{};
    for (unsigned gi : {7u, 8u}) {
        InstanceUse use;
        use.instance = instance(1, gi);
        use.leased = gi == 7;
        facts.uses->uses.push_back(use);
    }
    MigNames names("test");
    const MigInstance& first = facts.uses->uses[0].instance;
    ASSERT_TRUE(names.add_profile(first.gpu_uuid, first.gi, first.ci, "1g.10gb"));
    ASSERT_TRUE(names.add_uuid(first.gpu_uuid, first.gi, first.ci,
                               "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"));
    facts.names_file = names;
    Section section = assemble_mig(facts);
    EXPECT_EQ(section.verdict, Verdict::Differs);
    EXPECT_NE(section.reason.find("gpu1/gi8/ci0"), std::string::npos) << section.reason;
    EXPECT_FALSE(section.items[0].problem);
    EXPECT_TRUE(section.items[1].problem);

    const MigInstance& second = facts.uses->uses[1].instance;
    ASSERT_TRUE(facts.names_file->add_profile(second.gpu_uuid, second.gi, second.ci, "1g.10gb"));
    ASSERT_TRUE(facts.names_file->add_uuid(second.gpu_uuid, second.gi, second.ci,
                                           "MIG-aaaaaaaa-bbbb-cccc-dddd-ffffffffffff"));
    EXPECT_EQ(assemble_mig(facts).verdict, Verdict::Ok) << assemble_mig(facts).reason;
    // An ok row sums up; it once showed the first instance's profile and UUID.
    EXPECT_EQ(assemble_mig(facts).reason, "2 MIG instances, all named; 1 leased");

    facts.names_file.reset();
    EXPECT_EQ(assemble_mig(facts).verdict, Verdict::Differs);
}

TEST(StatusAssembly, NoInstancesIsNotConfigured) {
    MigFacts facts;
    facts.uses = InstanceUses{};
    EXPECT_EQ(assemble_mig(facts).verdict, Verdict::NotConfigured);
}

TEST(StatusAssembly, TheFirstProblemDecides) {
    Report report;
    report.sections = {failed_section("driver", Verdict::Ok, ""),
                       failed_section("nodes", Verdict::NotConfigured, ""),
                       failed_section("persist", Verdict::Differs, "a"),
                       failed_section("mig", Verdict::TimedOut, "b")};
    ASSERT_TRUE(report.first_problem());
    EXPECT_EQ(*report.first_problem(), 2u);
    report.sections.resize(2);
    EXPECT_FALSE(report.first_problem());
}

TEST(StatusMetrics, EveryProbeHasItsSuccessAndTheRunItsTimestamp) {
    Report report;
    report.timestamp = 1700000000;
    report.sections = {failed_section("driver", Verdict::Ok, ""),
                       failed_section("mig", Verdict::TimedOut, "killed")};
    auto samples = report_metrics(report, 3);
    auto value_of = [&](const std::string& name,
                        const std::string& probe) -> std::optional<double> {
        for (const Metric& sample : samples) {
            if (sample.name == name &&
                (probe.empty() ? sample.labels.empty()
                               : sample.labels == decltype(sample.labels){{"probe", probe}})) {
                return sample.value;
            }
        }
        return std::nullopt;
    };
    EXPECT_EQ(value_of("gpuinit_probe_success", "driver"), 1.0);
    EXPECT_EQ(value_of("gpuinit_probe_success", "mig"), 0.0);
    EXPECT_EQ(value_of("gpuinit_last_run_timestamp_seconds", ""), 1700000000.0);
    EXPECT_EQ(value_of("gpuinit_status_exit_code", ""), 3.0);
    for (const Metric& sample : samples) {
        bool known = false;
        for (const MetricFamily& family : kMetricFamilies) {
            known = known || sample.name == family.name;
        }
        EXPECT_TRUE(known) << sample.name;
    }
}

TEST(StatusDeadline, AProbeThatHangsIsKilledAtItsDeadline) {
    auto start = std::chrono::steady_clock::now();
    Section section = run_with_deadline(
        "mig",
        [] {
            ::sleep(30);
            return Section{};
        },
        std::chrono::milliseconds(300));
    auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(section.verdict, Verdict::TimedOut);
    EXPECT_EQ(section.probe, "mig");
    EXPECT_NE(section.reason.find("did not finish within 0.3 s"), std::string::npos)
        << section.reason;
    EXPECT_LT(took, std::chrono::seconds(5));
    EXPECT_GE(section.seconds, 0.3);
}

TEST(StatusDeadline, AProbesSectionComesBackWhole) {
    Section section = run_with_deadline(
        "nodes",
        [] {
            Section made;
            made.verdict = Verdict::Differs;
            made.reason = "one\nline";
            made.items.push_back({"/dev/nvidia0", "differs", "mode 0666", true});
            return made;
        },
        std::chrono::seconds(10));
    EXPECT_EQ(section.verdict, Verdict::Differs);
    EXPECT_EQ(section.probe, "nodes");
    EXPECT_EQ(section.reason, "one\nline");
    ASSERT_EQ(section.items.size(), 1u);
    EXPECT_EQ(section.items[0].detail, "mode 0666");
}

TEST(StatusDeadline, AProbeThatDiesIsAFailure) {
    Section section = run_with_deadline(
        "persist", []() -> Section { std::abort(); }, std::chrono::seconds(10));
    EXPECT_EQ(section.verdict, Verdict::Failed);
    EXPECT_NE(section.reason.find("signal"), std::string::npos) << section.reason;
}

} // namespace gpuinit::status
