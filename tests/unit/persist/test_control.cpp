#include "gpuinit/persist/control.hpp"
#include "gpuinit/persist/uevent.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

TEST(ControlRequest, ParsesTheThreeRequests) {
    auto status = parse_control_request("status");
    ASSERT_TRUE(status);
    EXPECT_FALSE(status->changes());
    auto enable = parse_control_request("enable 0000:17:00.0\r");
    ASSERT_TRUE(enable);
    EXPECT_EQ(enable->kind, ControlRequest::Kind::Enable);
    ASSERT_TRUE(enable->gpu);
    EXPECT_EQ(enable->gpu->text(), "0000:17:00.0");
    auto all = parse_control_request("disable all");
    ASSERT_TRUE(all);
    EXPECT_EQ(all->kind, ControlRequest::Kind::Disable);
    EXPECT_FALSE(all->gpu);
    EXPECT_EQ(format_control_request(*all), "disable all\n");
    EXPECT_EQ(format_control_request(*enable), "enable 0000:17:00.0\n");
}

TEST(ControlRequest, RefusesMalformedAndOversized) {
    for (const char* bad : {"", "statuss", "status now", "enable", "enable 0 1", "disable 254",
                            "reboot", "enable GPU-", "\x01\x02", "enable all\x1b[2J"}) {
        EXPECT_FALSE(parse_control_request(bad)) << bad;
    }
    auto huge = parse_control_request(std::string(kMaxControlRequest + 1, 'a'));
    ASSERT_FALSE(huge);
    EXPECT_EQ(huge.error().code, EMSGSIZE);
}

TEST(ControlPeer, OnlyRootOrTheAdminGroupMayChange) {
    PeerCredentials root{1, 0, 0, {}};
    PeerCredentials alice{2, 2000, 2000, {100, 44}};
    EXPECT_TRUE(peer_may_change(root, std::nullopt));
    EXPECT_FALSE(peer_may_change(alice, std::nullopt));
    EXPECT_FALSE(peer_may_change(alice, 45u));
    EXPECT_TRUE(peer_may_change(alice, 44u)) << "a supplementary group (SO_PEERGROUPS)";
    EXPECT_TRUE(peer_may_change(alice, 2000u)) << "the primary group";
    PeerCredentials unknown{0, static_cast<uid_t>(-1), static_cast<gid_t>(-1), {}};
    EXPECT_FALSE(peer_may_change(unknown, 0u));
}

TEST(ControlReplyCodec, RoundTripsAndSanitizesFields) {
    ControlReply reply;
    reply.code = EPERM;
    reply.message = "permission\tdenied\nnext";
    reply.daemon = {42, 998, false, "off (nvidia-persistenced runs as pid 7)", "udev"};
    HeldGpu held;
    held.id = {0, "0000:17:00.0", "GPU-1"};
    held.state = HoldState::Held;
    HeldGpu failed;
    failed.id = {3, "10000:00:03.0", ""};
    failed.state = HoldState::Failed;
    failed.wanted = false;
    failed.error_code = EIO;
    failed.error = "init failed";
    reply.gpus = {held, failed};
    std::string text = format_control_reply(reply);
    auto parsed = parse_control_reply(text);
    ASSERT_TRUE(parsed) << parsed.error().message;
    EXPECT_EQ(parsed->code, EPERM);
    EXPECT_EQ(parsed->message, "permission denied next");
    EXPECT_EQ(parsed->daemon.pid, 42);
    EXPECT_EQ(parsed->daemon.uid, 998u);
    EXPECT_FALSE(parsed->daemon.runs_as_root);
    EXPECT_EQ(parsed->daemon.compat, reply.daemon.compat);
    ASSERT_EQ(parsed->gpus.size(), 2u);
    EXPECT_EQ(parsed->gpus[1].id.bdf, "10000:00:03.0");
    EXPECT_EQ(parsed->gpus[1].id.uuid, "");
    EXPECT_EQ(parsed->gpus[1].state, HoldState::Failed);
    EXPECT_FALSE(parsed->gpus[1].wanted);
    EXPECT_EQ(parsed->gpus[1].error, "init failed");
}

TEST(ControlReplyCodec, EveryHoldStateRoundTrips) {
    for (HoldState state :
         {HoldState::Opening, HoldState::Held, HoldState::Failed, HoldState::WaitingForNode,
          HoldState::Disabled, HoldState::Lost, HoldState::Unbinding}) {
        ControlReply reply;
        HeldGpu gpu;
        gpu.id = {1, "0001:00:00.0", "GPU-1"};
        gpu.state = state;
        reply.gpus = {gpu};
        auto parsed = parse_control_reply(format_control_reply(reply));
        ASSERT_TRUE(parsed) << hold_state_name(state) << ": " << parsed.error().message;
        EXPECT_EQ(parsed->gpus.at(0).state, state) << hold_state_name(state);
    }
}

TEST(ControlReplyCodec, RefusesTruncatedAndForeignReplies) {
    ControlReply reply;
    std::string text = format_control_reply(reply);
    for (size_t cut = 0; cut + 1 < text.size(); ++cut) {
        EXPECT_FALSE(parse_control_reply(text.substr(0, cut))) << cut;
    }
    EXPECT_FALSE(parse_control_reply("HTTP/1.1 200 OK\n"));
    std::string bad_state = "gpu-persist-reply 1\nresult\t0\t-\ndaemon\t1\t0\tyes\ton\tudev\n"
                            "gpu\t0\tb\tu\tsleeping\tyes\t0\t-\nend\n";
    EXPECT_FALSE(parse_control_reply(bad_state));
    EXPECT_FALSE(parse_control_reply(std::string(kMaxControlReply + 1, 'x')));
}

// Which events make the daemon look again: the parsing is libudev's, the
// choice ours.
TEST(Uevent, ConcernsGpusOnlyForNvidiaBindsAndPciUnbindsAndRemoves) {
    auto event = [](const char* action, const char* driver, const char* subsystem = "pci") {
        return Uevent{action, subsystem, driver, "10000:00:01.0"};
    };
    EXPECT_TRUE(uevent_concerns_gpus(event("bind", "nvidia")));
    EXPECT_FALSE(uevent_concerns_gpus(event("bind", "xhci_hcd")));
    EXPECT_TRUE(uevent_concerns_gpus(event("unbind", "")));
    EXPECT_TRUE(uevent_concerns_gpus(event("remove", "")));
    EXPECT_FALSE(uevent_concerns_gpus(event("add", "")));
    EXPECT_FALSE(uevent_concerns_gpus(event("change", "nvidia")));
    EXPECT_FALSE(uevent_concerns_gpus(event("bind", "nvidia", "usb")));
}

} // namespace gpuinit
