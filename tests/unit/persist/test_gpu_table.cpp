#include "gpuinit/persist/gpu_table.hpp"

#include <cerrno>
#include <gtest/gtest.h>

namespace gpuinit {

namespace {

using Kind = PersistAction::Kind;

GpuIdentity gpu(unsigned minor) {
    return {minor, "0000:1" + std::to_string(minor) + ":00.0",
            "GPU-0000000" + std::to_string(minor) + "-aaaa"};
}

PersistAction open_of(unsigned minor) {
    return {Kind::Open, gpu(minor).bdf, minor};
}
PersistAction close_of(unsigned minor) {
    return {Kind::Close, gpu(minor).bdf, minor};
}
const PersistAction kSave{Kind::SaveChoices, {}, 0};

std::optional<GpuSelector> select(const char* text) {
    return *GpuSelector::parse(text);
}

} // namespace

TEST(GpuTable, FoundGpusAreOpenedAndHeldOnceTheirInitFinishes) {
    GpuTable table;
    EXPECT_EQ(table.gpu_present(gpu(1)), GpuTable::Actions{open_of(1)});
    EXPECT_EQ(table.gpu_present(gpu(0)), GpuTable::Actions{open_of(0)});
    EXPECT_TRUE(table.gpu_present(gpu(0)).empty()) << "a rescan changes nothing";
    ASSERT_EQ(table.gpus().size(), 2u);
    EXPECT_EQ(table.gpus()[0].id.minor, 0u) << "sorted by minor";
    EXPECT_FALSE(table.settled());
    EXPECT_TRUE(table.open_succeeded(gpu(0).bdf).empty());
    EXPECT_FALSE(table.settled());
    EXPECT_TRUE(table.open_failed(gpu(1).bdf, EIO, "init failed").empty());
    EXPECT_TRUE(table.settled()) << "held or failed: READY";
    EXPECT_EQ(table.find(gpu(0).bdf)->state, HoldState::Held);
    EXPECT_EQ(table.find(gpu(1).bdf)->state, HoldState::Failed);
    EXPECT_EQ(table.find(gpu(1).bdf)->error_code, EIO);
}

TEST(GpuTable, AFailedGpuIsRetriedOnlyOnEnable) {
    GpuTable table;
    (void)table.gpu_present(gpu(0));
    (void)table.open_failed(gpu(0).bdf, EIO, "init failed");
    EXPECT_TRUE(table.gpu_present(gpu(0)).empty());
    EXPECT_TRUE(table.nodes_changed().empty());
    auto retried = table.enable(select("0"));
    ASSERT_TRUE(retried);
    EXPECT_EQ(*retried, GpuTable::Actions{open_of(0)}) << "no choice changed: nothing to save";
}

TEST(GpuTable, DisableReleasesAndIsSavedEnableHoldsAgain) {
    GpuTable table;
    (void)table.gpu_present(gpu(0));
    (void)table.open_succeeded(gpu(0).bdf);
    auto disabled = table.disable(select("0"));
    ASSERT_TRUE(disabled);
    EXPECT_EQ(*disabled, (GpuTable::Actions{close_of(0), kSave}));
    EXPECT_EQ(table.find(gpu(0).bdf)->state, HoldState::Disabled);
    ASSERT_EQ(table.choices().size(), 1u);
    EXPECT_EQ(table.choices()[0].uuid, gpu(0).uuid);
    auto again = table.disable(select("0"));
    ASSERT_TRUE(again);
    EXPECT_TRUE(again->empty()) << "idempotent: nothing to close or save";
    auto enabled = table.enable(select(gpu(0).uuid.c_str()));
    ASSERT_TRUE(enabled);
    EXPECT_EQ(*enabled, (GpuTable::Actions{open_of(0), kSave}));
    EXPECT_TRUE(table.choices().empty());
}

TEST(GpuTable, DisabledWhileInitializingIsClosedWhenTheInitFinishes) {
    GpuTable table;
    (void)table.gpu_present(gpu(0));
    auto disabled = table.disable(std::nullopt);
    ASSERT_TRUE(disabled);
    EXPECT_EQ(*disabled, GpuTable::Actions{kSave}) << "the fd is busy: no close yet";
    EXPECT_EQ(table.open_succeeded(gpu(0).bdf), GpuTable::Actions{close_of(0)});
    EXPECT_EQ(table.find(gpu(0).bdf)->state, HoldState::Disabled);
}

TEST(GpuTable, SavedChoicesApplyToGpusFoundLater) {
    GpuTable table;
    table.load_choices({{gpu(1).uuid, "0000:99:00.0"}}); // the board moved slots
    EXPECT_TRUE(table.gpu_present(gpu(1)).empty());
    EXPECT_EQ(table.find(gpu(1).bdf)->state, HoldState::Disabled);
    table.load_choices({{"", gpu(0).bdf}}); // no UUID: by address
    EXPECT_TRUE(table.gpu_present(gpu(0)).empty());
    auto enabled = table.enable(std::nullopt);
    ASSERT_TRUE(enabled);
    EXPECT_EQ(*enabled, (GpuTable::Actions{open_of(0), open_of(1), kSave}));
}

TEST(GpuTable, EnableOfAnAbsentGpuClearsItsRememberedChoice) {
    GpuTable table;
    table.load_choices({{gpu(3).uuid, gpu(3).bdf}});
    auto enabled = table.enable(select(gpu(3).bdf.c_str()));
    ASSERT_TRUE(enabled);
    EXPECT_EQ(*enabled, GpuTable::Actions{kSave});
    EXPECT_TRUE(table.choices().empty());
    auto unknown = table.disable(select("7"));
    ASSERT_FALSE(unknown);
    EXPECT_EQ(unknown.error().code, ENODEV);
}

TEST(GpuTable, HangupReleasesAndMarksLost) {
    GpuTable table;
    (void)table.gpu_present(gpu(2));
    (void)table.open_succeeded(gpu(2).bdf);
    EXPECT_EQ(table.hangup(gpu(2).bdf), GpuTable::Actions{close_of(2)});
    EXPECT_EQ(table.find(gpu(2).bdf)->state, HoldState::Lost);
    EXPECT_TRUE(table.hangup(gpu(2).bdf).empty()) << "released once";
    EXPECT_TRUE(table.release_all().empty()) << "nothing left to close at stop";
}

TEST(GpuTable, OnlyAHeldGpuIsReleasedAsLost) {
    GpuTable table;
    (void)table.gpu_present(gpu(0));
    // Its open is in progress (the driver polls that POLLERR): not lost.
    EXPECT_TRUE(table.hangup(gpu(0).bdf).empty());
    EXPECT_EQ(table.find(gpu(0).bdf)->state, HoldState::Opening);
    (void)table.open_failed(gpu(0).bdf, ENODEV, "lost before its init");
    EXPECT_TRUE(table.hangup(gpu(0).bdf).empty());
    EXPECT_EQ(table.find(gpu(0).bdf)->state, HoldState::Failed);
    EXPECT_TRUE(table.hangup("0000:99:00.0").empty()) << "an unknown GPU";
}

TEST(GpuTable, ChecksRunOnlyWhileAGpuIsHeld) {
    GpuTable table;
    EXPECT_FALSE(table.needs_checks()) << "no GPU";
    (void)table.gpu_present(gpu(0));
    (void)table.gpu_present(gpu(1));
    EXPECT_FALSE(table.needs_checks()) << "initializing: nothing to poll yet";
    (void)table.open_succeeded(gpu(0).bdf);
    EXPECT_TRUE(table.needs_checks());
    (void)table.open_failed(gpu(1).bdf, EIO, "x");
    EXPECT_TRUE(table.needs_checks());
    (void)table.hangup(gpu(0).bdf);
    EXPECT_FALSE(table.needs_checks()) << "lost and failed GPUs are not polled";
    ASSERT_TRUE(table.enable(select("0")));
    (void)table.open_succeeded(gpu(0).bdf);
    EXPECT_TRUE(table.needs_checks());
    ASSERT_TRUE(table.disable(std::nullopt));
    EXPECT_FALSE(table.needs_checks()) << "everything disabled: an idle daemon sleeps";
}

TEST(GpuTable, TheCheckIntervalMeetsItsBounds) {
    // A lost GPU or a waiting removal is noticed within 30 s, and an idle
    // daemon wakes at most twice a minute.
    EXPECT_LE(kHeldCheckInterval.count(), 30);
    EXPECT_LE(60 / kHeldCheckInterval.count(), 2);
    EXPECT_EQ(60 % kHeldCheckInterval.count(), 0) << "a whole number of wakeups a minute";
}

TEST(GpuTable, AWaitingUnbindReleasesAHeldGpu) {
    GpuTable table;
    (void)table.gpu_present(gpu(3));
    EXPECT_TRUE(table.unbinding(gpu(3).bdf).empty()) << "not held yet";
    (void)table.open_succeeded(gpu(3).bdf);
    EXPECT_EQ(table.unbinding(gpu(3).bdf), GpuTable::Actions{close_of(3)});
    const HeldGpu* unbinding = table.find(gpu(3).bdf);
    EXPECT_EQ(unbinding->state, HoldState::Unbinding);
    EXPECT_TRUE(unbinding->wanted) << "not the admin's choice: nothing to remember";
    EXPECT_NE(unbinding->error.find("gpu-persist disable"), std::string::npos);
    EXPECT_TRUE(table.unbinding(gpu(3).bdf).empty()) << "released once";
    EXPECT_TRUE(table.hangup(gpu(3).bdf).empty());
    EXPECT_FALSE(table.needs_checks());
    EXPECT_TRUE(table.release_all().empty()) << "nothing left to close at stop";
    // Its remove uevent forgets it, with nothing more to close.
    EXPECT_TRUE(table.gpu_gone(gpu(3).bdf).empty());
    EXPECT_EQ(table.find(gpu(3).bdf), nullptr);
}

TEST(GpuTable, AnUnbindingGpuCanBeEnabledOrDisabled) {
    GpuTable table;
    (void)table.gpu_present(gpu(0));
    (void)table.open_succeeded(gpu(0).bdf);
    (void)table.unbinding(gpu(0).bdf);
    // Still listed (no uevent yet): enable tries again (the driver answers).
    auto enabled = table.enable(select("0"));
    ASSERT_TRUE(enabled);
    EXPECT_EQ(*enabled, GpuTable::Actions{open_of(0)});
    (void)table.open_failed(gpu(0).bdf, ENODEV, "being removed");
    auto disabled = table.disable(select("0"));
    ASSERT_TRUE(disabled);
    EXPECT_EQ(*disabled, GpuTable::Actions{kSave});
    EXPECT_EQ(table.find(gpu(0).bdf)->state, HoldState::Disabled);
}

TEST(GpuTable, GoneGpusAreReleasedAndForgotten) {
    GpuTable table;
    (void)table.gpu_present(gpu(0));
    (void)table.open_succeeded(gpu(0).bdf);
    EXPECT_EQ(table.gpu_gone(gpu(0).bdf), GpuTable::Actions{close_of(0)});
    EXPECT_EQ(table.find(gpu(0).bdf), nullptr);
    EXPECT_TRUE(table.open_succeeded(gpu(0).bdf).empty()) << "a late completion is ignored";
    // Rebound under another minor: released, then opened at the new one.
    (void)table.gpu_present(gpu(0));
    (void)table.open_succeeded(gpu(0).bdf);
    GpuIdentity moved = gpu(0);
    moved.minor = 5;
    EXPECT_EQ(table.gpu_present(moved),
              (GpuTable::Actions{close_of(0), {Kind::Open, moved.bdf, 5}}));
}

TEST(GpuTable, AMissingNodeWaitsAndIsOpenedWhenDevChanges) {
    GpuTable table;
    (void)table.gpu_present(gpu(0));
    (void)table.open_failed(gpu(0).bdf, ENOENT, "no node yet");
    EXPECT_TRUE(table.any_waiting_for_node());
    EXPECT_TRUE(table.settled());
    EXPECT_EQ(table.nodes_changed(), GpuTable::Actions{open_of(0)});
    EXPECT_FALSE(table.any_waiting_for_node());
}

TEST(GpuTable, StopClosesEveryHeldAndInitializingGpu) {
    GpuTable table;
    for (unsigned minor : {0u, 1u, 2u}) {
        (void)table.gpu_present(gpu(minor));
    }
    (void)table.open_succeeded(gpu(0).bdf);
    (void)table.open_failed(gpu(2).bdf, EIO, "x");
    EXPECT_EQ(table.release_all(), (GpuTable::Actions{close_of(0), close_of(1)}));
}

TEST(GpuTableChoices, StateFileRoundTripAndHostileLines) {
    std::vector<DisabledGpu> choices{{gpu(0).uuid, gpu(0).bdf}, {"", "0000:99:00.0"}};
    Diagnostics diagnostics;
    EXPECT_EQ(parse_choices(format_choices(choices), "state", diagnostics), choices);
    EXPECT_TRUE(diagnostics.empty());
    std::string hostile = "disabled\n"
                          "disabled GPU-1 0000:17:00.0 extra\n"
                          "enabled - 0000:17:00.0\n"
                          "disabled GPU-zz 0000:17:00.0\n"
                          "disabled - 5\n"
                          "disabled - 17:00.0\n"
                          "disabled - 17:00.0\n"
                          "\x01\x02\n";
    auto parsed = parse_choices(hostile, "state", diagnostics);
    ASSERT_EQ(parsed.size(), 1u) << "only the valid line, once";
    EXPECT_EQ(parsed[0].bdf, "0000:17:00.0");
    EXPECT_EQ(diagnostics.count(Severity::Warning), 6u);
    EXPECT_EQ(diagnostics.items()[0].where.line, 1u);
}

// What `gpu-persist status` calls not held: wanted, and failed, lost,
// unbinding or waiting for its node; not disabled, nor initializing.
TEST(GpuTable, CountsTheGpusItShouldHoldButDoesNot) {
    auto gpu = [](HoldState state, bool wanted) {
        HeldGpu held;
        held.state = state;
        held.wanted = wanted;
        return held;
    };
    EXPECT_EQ(count_not_held({gpu(HoldState::Held, true), gpu(HoldState::Opening, true),
                              gpu(HoldState::Disabled, false)}),
              0u);
    EXPECT_EQ(count_not_held({gpu(HoldState::Failed, true), gpu(HoldState::Lost, true),
                              gpu(HoldState::Unbinding, true), gpu(HoldState::WaitingForNode, true),
                              gpu(HoldState::Failed, false), gpu(HoldState::Held, true)}),
              4u);
}

} // namespace gpuinit
