#include "gpuinit/limit/egpu.hpp"

#include <cstring>
#include <gtest/gtest.h>
#include <map>
#include <string>

namespace gpuinit::limit {
namespace {

using Env = std::map<std::string, std::string>;

const char* lookup_in(const char* name, void* context) {
    const auto& env = *static_cast<const Env*>(context);
    auto found = env.find(name);
    return found == env.end() ? nullptr : found->second.c_str();
}

struct Parsed {
    bool ok = false;
    Settings settings;
    Problem problem;
};

Parsed parse(Env env) {
    Parsed parsed;
    parsed.ok = parse_settings(lookup_in, &env, parsed.settings, parsed.problem);
    return parsed;
}

Env enabled(Env more = {}) {
    more.emplace("AMP_VGPU_ENABLE", "1");
    return more;
}

uint64_t cap_of(const Env& env, uint64_t total) {
    Parsed parsed = parse(env);
    EXPECT_TRUE(parsed.ok) << parsed.problem.text;
    uint64_t cap = 0;
    Problem problem;
    EXPECT_TRUE(device_cap(parsed.settings, total, cap, problem)) << problem.text;
    return cap;
}

constexpr uint64_t kV100Total = 16160 * kMiB; // a "16 GB" V100 as the driver reports it
constexpr uint64_t kH100Total = 81559 * kMiB;

// A refusal names the variable and its value, says how to fix it, and is
// one line.
void expect_refused(const Env& env, const char* variable, const char* value) {
    Parsed parsed = parse(env);
    EXPECT_FALSE(parsed.ok) << variable;
    std::string text = parsed.problem.text;
    EXPECT_NE(text.find(variable), std::string::npos) << text;
    if (value != nullptr) {
        EXPECT_NE(text.find(value), std::string::npos) << text;
    }
    EXPECT_NE(text.find(';'), std::string::npos) << "no fix in: " << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
}

TEST(Egpu, OffUnlessExactlyOneAndThenReadsNothingElse) {
    for (const char* value : {"0", "", "true", "yes", " 1", "1 ", "01", "2"}) {
        Parsed parsed = parse({{"AMP_VGPU_ENABLE", value}, {"GPU_MEM_PER_DEVICE", "garbage"}});
        EXPECT_TRUE(parsed.ok) << value;
        EXPECT_FALSE(parsed.settings.enabled) << value;
        EXPECT_FALSE(parsed.problem.set());
    }
    Parsed unset = parse({{"GPU_MEM_PER_DEVICE", "garbage"}, {"GPU_LIMIT_GROUP", "/"}});
    EXPECT_TRUE(unset.ok);
    EXPECT_FALSE(unset.settings.enabled);
}

TEST(Egpu, DefaultsWhenOnlyEnabled) {
    Parsed parsed = parse(enabled());
    ASSERT_TRUE(parsed.ok) << parsed.problem.text;
    const Settings& settings = parsed.settings;
    EXPECT_TRUE(settings.enabled);
    EXPECT_EQ(settings.rule, MemoryRule::None);
    EXPECT_EQ(settings.reserved_bytes, 10u * 1048576u); // MB is 2^20
    EXPECT_EQ(settings.visible.kind, VisibleDevices::Kind::All);
    EXPECT_EQ(settings.oom_policy, OomPolicy::Return);
    EXPECT_STREQ(settings.oom_script, "");
    EXPECT_EQ(settings.oom_script_timeout_ms, 10000u);
    EXPECT_STREQ(settings.group, "default");
    EXPECT_STREQ(settings.state_dir, "");
    EXPECT_EQ(cap_of(enabled(), kV100Total), kV100Total); // counted, not capped
}

TEST(Egpu, PerDeviceIsBytesMinusReserved) {
    EXPECT_EQ(cap_of(enabled({{"GPU_MEM_PER_DEVICE", "4294967296"}}), kH100Total),
              4294967296u - 10485760u);
    EXPECT_EQ(cap_of(enabled({{"GPU_MEM_PER_DEVICE", "4294967296"},
                              {"ALIYUN_COM_GPU_MEM_RESERVED", "0"}}),
                     kH100Total),
              4294967296u);
    EXPECT_EQ(cap_of(enabled({{"GPU_MEM_PER_DEVICE", "1000000000"},
                              {"ALIYUN_COM_GPU_MEM_RESERVED", "100"}}),
                     kH100Total),
              1000000000u - 100u * 1048576u);
    // One byte above the reserve leaves one byte.
    EXPECT_EQ(cap_of(enabled({{"GPU_MEM_PER_DEVICE", "10485761"}}), kH100Total), 1u);
}

TEST(Egpu, CapNeverAbovePhysical) {
    EXPECT_EQ(cap_of(enabled({{"GPU_MEM_PER_DEVICE", "18446744073709551615"}}), kV100Total),
              kV100Total);
    EXPECT_EQ(cap_of(enabled({{"GPU_MEM_PER_DEVICE", "18446744073709551615"},
                              {"ALIYUN_COM_GPU_MEM_RESERVED", "0"}}),
                     kV100Total),
              kV100Total);
    // CONTAINER alone, more GiB than the card has: the card, not more.
    EXPECT_EQ(cap_of(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "64"}}), kV100Total), kV100Total);
}

TEST(Egpu, RatioIsExactIn128Bits) {
    // 16160 MiB * 1 / 4 - 10 MiB = 4040 MiB - 10 MiB.
    EXPECT_EQ(
        cap_of(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "1"}, {"ALIYUN_COM_GPU_MEM_DEV", "4"}}),
               kV100Total),
        4030u * kMiB);
    // Rounds down: 81559 MiB * 1 / 3 = 28506632874.666... bytes.
    EXPECT_EQ(
        cap_of(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "1"}, {"ALIYUN_COM_GPU_MEM_DEV", "3"}}),
               kH100Total),
        (kH100Total / 3) - 10 * kMiB);
    // total * CONTAINER overflows 64 bits: 2^40 * (2^40 - 1) / 2^40.
    uint64_t total = uint64_t{1} << 40;
    EXPECT_EQ(cap_of(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "1099511627775"},
                              {"ALIYUN_COM_GPU_MEM_DEV", "1099511627776"},
                              {"ALIYUN_COM_GPU_MEM_RESERVED", "0"}}),
                     total),
              total - 1);
    uint64_t huge = 18446744073709551557u; // a prime just below 2^64
    EXPECT_EQ(cap_of(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "18446744073709551556"},
                              {"ALIYUN_COM_GPU_MEM_DEV", "18446744073709551557"},
                              {"ALIYUN_COM_GPU_MEM_RESERVED", "0"}}),
                     huge),
              huge - 1);
    // CONTAINER == DEV: the whole card less the reserve.
    EXPECT_EQ(
        cap_of(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "7"}, {"ALIYUN_COM_GPU_MEM_DEV", "7"}}),
               kV100Total),
        kV100Total - 10 * kMiB);
}

TEST(Egpu, ContainerAloneIsGibOfTheCardRoundedUp) {
    // V100 with 16160 MiB: DEV = ceil(16160 / 1024) = 16.
    Parsed parsed = parse(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "4"}}));
    ASSERT_TRUE(parsed.ok);
    EXPECT_EQ(parsed.settings.rule, MemoryRule::ContainerGiB);
    EXPECT_EQ(cap_of(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "4"}}), kV100Total),
              kV100Total * 4 / 16 - 10 * kMiB);
    EXPECT_EQ(kV100Total * 4 / 16 - 10 * kMiB, 4030u * kMiB);
    // Exactly 16 GiB: DEV = 16, 4 GiB share.
    EXPECT_EQ(cap_of(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "4"},
                              {"ALIYUN_COM_GPU_MEM_RESERVED", "0"}}),
                     16 * kGiB),
              4 * kGiB);
    // One byte more than 16 GiB: DEV = 17.
    EXPECT_EQ(cap_of(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "4"},
                              {"ALIYUN_COM_GPU_MEM_RESERVED", "0"}}),
                     16 * kGiB + 1),
              (16 * kGiB + 1) * 4 / 17);
    // H100 81559 MiB: DEV = 80.
    EXPECT_EQ(cap_of(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "2"}}), kH100Total),
              kH100Total * 2 / 80 - 10 * kMiB);
    // A card below 1 GiB: DEV = 1.
    EXPECT_EQ(cap_of(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "1"}}), 512 * kMiB), 502 * kMiB);
}

TEST(Egpu, ShareNotAboveReservedIsAnError) {
    // GPU_MEM_PER_DEVICE is refused while parsing: no device is needed.
    expect_refused(enabled({{"GPU_MEM_PER_DEVICE", "10485760"}}), "GPU_MEM_PER_DEVICE", "10485760");
    expect_refused(
        enabled({{"GPU_MEM_PER_DEVICE", "1048576"}, {"ALIYUN_COM_GPU_MEM_RESERVED", "1"}}),
        "ALIYUN_COM_GPU_MEM_RESERVED", nullptr);
    Parsed ratio = parse(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "1"},
                                  {"ALIYUN_COM_GPU_MEM_DEV", "1000"},
                                  {"ALIYUN_COM_GPU_MEM_RESERVED", "20"}}));
    ASSERT_TRUE(ratio.ok);
    uint64_t cap = 123;
    Problem problem;
    EXPECT_FALSE(device_cap(ratio.settings, kV100Total, cap, problem)); // 16.16 MiB share
    EXPECT_NE(std::string(problem.text).find("ALIYUN_COM_GPU_MEM_RESERVED"), std::string::npos);
    EXPECT_TRUE(device_cap(ratio.settings, 40 * kGiB, cap, problem)); // 40.96 MiB share
    EXPECT_EQ(cap, 40 * kGiB / 1000 - 20 * kMiB);
    // Exactly equal to the reserve is refused too.
    Parsed equal = parse(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "1"},
                                  {"ALIYUN_COM_GPU_MEM_DEV", "2"},
                                  {"ALIYUN_COM_GPU_MEM_RESERVED", "10"}}));
    ASSERT_TRUE(equal.ok);
    EXPECT_FALSE(device_cap(equal.settings, 20 * kMiB, cap, problem));
    EXPECT_TRUE(device_cap(equal.settings, 20 * kMiB + 2, cap, problem));
    EXPECT_EQ(cap, 1u);
}

TEST(Egpu, ZeroPhysicalTotalIsAnError) {
    Parsed parsed = parse(enabled());
    uint64_t cap = 0;
    Problem problem;
    EXPECT_FALSE(device_cap(parsed.settings, 0, cap, problem));
    EXPECT_TRUE(problem.set());
}

TEST(Egpu, ReservedIsMibAndZeroIsAllowed) {
    EXPECT_EQ(parse(enabled({{"ALIYUN_COM_GPU_MEM_RESERVED", "0"}})).settings.reserved_bytes, 0u);
    EXPECT_EQ(parse(enabled({{"ALIYUN_COM_GPU_MEM_RESERVED", "1"}})).settings.reserved_bytes,
              1048576u);
    EXPECT_EQ(
        parse(enabled({{"ALIYUN_COM_GPU_MEM_RESERVED", "17592186044415"}})).settings.reserved_bytes,
        17592186044415u * 1048576u); // the largest that fits 64 bits
    expect_refused(enabled({{"ALIYUN_COM_GPU_MEM_RESERVED", "17592186044416"}}),
                   "ALIYUN_COM_GPU_MEM_RESERVED", "17592186044416");
}

TEST(Egpu, EachMalformedNumberIsRefusedWithVariableValueAndFix) {
    const char* bad[] = {"",
                         "abc",
                         "12a",
                         "-1",
                         "+1",
                         " 1",
                         "1 ",
                         "0x10",
                         "1e9",
                         "1.5",
                         "2G",
                         "18446744073709551616",
                         "99999999999999999999999"};
    for (const char* name :
         {"GPU_MEM_PER_DEVICE", "ALIYUN_COM_GPU_MEM_CONTAINER", "ALIYUN_COM_GPU_MEM_RESERVED"}) {
        for (const char* value : bad) {
            SCOPED_TRACE(std::string(name) + "=" + value);
            expect_refused(enabled({{name, value}}), name, value);
        }
    }
    for (const char* value : bad) {
        expect_refused(
            enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "1"}, {"ALIYUN_COM_GPU_MEM_DEV", value}}),
            "ALIYUN_COM_GPU_MEM_DEV", value);
    }
    // The largest 64-bit value itself is fine.
    EXPECT_TRUE(parse(enabled({{"GPU_MEM_PER_DEVICE", "18446744073709551615"}})).ok);
    EXPECT_TRUE(parse(enabled({{"GPU_MEM_PER_DEVICE", "0004294967296"}})).ok);
}

TEST(Egpu, ZeroWhereAPositiveNumberIsNeeded) {
    expect_refused(enabled({{"GPU_MEM_PER_DEVICE", "0"}}), "GPU_MEM_PER_DEVICE", "\"0\"");
    expect_refused(enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "0"}}), "ALIYUN_COM_GPU_MEM_CONTAINER",
                   "\"0\"");
    expect_refused(
        enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "1"}, {"ALIYUN_COM_GPU_MEM_DEV", "0"}}),
        "ALIYUN_COM_GPU_MEM_DEV", "\"0\"");
    expect_refused(enabled({{"GPU_LIMIT_OOM_SCRIPT_TIMEOUT", "0"}}), "GPU_LIMIT_OOM_SCRIPT_TIMEOUT",
                   "\"0\"");
    expect_refused(enabled({{"GPU_LIMIT_OOM_SCRIPT_TIMEOUT", "3601"}}),
                   "GPU_LIMIT_OOM_SCRIPT_TIMEOUT", "3601");
    EXPECT_EQ(
        parse(enabled({{"GPU_LIMIT_OOM_SCRIPT_TIMEOUT", "3600"}})).settings.oom_script_timeout_ms,
        3600000u);
}

TEST(Egpu, ConflictingMemoryVariables) {
    expect_refused(enabled({{"ALIYUN_COM_GPU_MEM_DEV", "4"}}), "ALIYUN_COM_GPU_MEM_CONTAINER",
                   "\"4\"");
    expect_refused(
        enabled({{"ALIYUN_COM_GPU_MEM_CONTAINER", "5"}, {"ALIYUN_COM_GPU_MEM_DEV", "4"}}),
        "ALIYUN_COM_GPU_MEM_DEV", "\"4\"");
    expect_refused(
        enabled({{"GPU_MEM_PER_DEVICE", "4294967296"}, {"ALIYUN_COM_GPU_MEM_CONTAINER", "1"}}),
        "GPU_MEM_PER_DEVICE", "ALIYUN_COM_GPU_MEM_CONTAINER");
    expect_refused(enabled({{"GPU_MEM_PER_DEVICE", "4294967296"}, {"ALIYUN_COM_GPU_MEM_DEV", "2"}}),
                   "GPU_MEM_PER_DEVICE", "ALIYUN_COM_GPU_MEM_DEV");
}

TEST(Egpu, OomScriptPolicyGroupAndStateDir) {
    Parsed parsed = parse(enabled({{"ALIYUN_COM_GPU_OOM_SCRIPT", "/usr/local/bin/notify"},
                                   {"GPU_LIMIT_OOM_POLICY", "kill"},
                                   {"GPU_LIMIT_OOM_SCRIPT_TIMEOUT", "3"},
                                   {"GPU_LIMIT_GROUP", "slurm-4711.0_A-z"},
                                   {"GPU_LIMIT_STATE_DIR", "/run/user/1000/gpu-limit"}}));
    ASSERT_TRUE(parsed.ok) << parsed.problem.text;
    EXPECT_STREQ(parsed.settings.oom_script, "/usr/local/bin/notify");
    EXPECT_EQ(parsed.settings.oom_policy, OomPolicy::Kill);
    EXPECT_EQ(parsed.settings.oom_script_timeout_ms, 3000u);
    EXPECT_STREQ(parsed.settings.group, "slurm-4711.0_A-z");
    EXPECT_STREQ(parsed.settings.state_dir, "/run/user/1000/gpu-limit");
    EXPECT_EQ(parse(enabled({{"GPU_LIMIT_OOM_POLICY", "return"}})).settings.oom_policy,
              OomPolicy::Return);

    expect_refused(enabled({{"ALIYUN_COM_GPU_OOM_SCRIPT", "notify.sh"}}),
                   "ALIYUN_COM_GPU_OOM_SCRIPT", "notify.sh");
    expect_refused(enabled({{"ALIYUN_COM_GPU_OOM_SCRIPT", ""}}), "ALIYUN_COM_GPU_OOM_SCRIPT",
                   "\"\"");
    expect_refused(enabled({{"ALIYUN_COM_GPU_OOM_SCRIPT", "/" + std::string(kPathSize, 'x')}}),
                   "ALIYUN_COM_GPU_OOM_SCRIPT", "(cut)");
    for (const char* policy : {"", "Kill", "abort", "kill "}) {
        expect_refused(enabled({{"GPU_LIMIT_OOM_POLICY", policy}}), "GPU_LIMIT_OOM_POLICY",
                       (std::string("\"") + policy + "\"").c_str());
    }
    std::string longest(kGroupNameSize - 1, 'g');
    EXPECT_STREQ(parse(enabled({{"GPU_LIMIT_GROUP", longest}})).settings.group, longest.c_str());
    for (std::string group :
         {std::string(""), std::string("."), std::string(".."), std::string("a/b"),
          std::string("a b"), std::string("x\ny"), std::string("caf\xc3\xa9"), longest + "g"}) {
        SCOPED_TRACE(group);
        expect_refused(enabled({{"GPU_LIMIT_GROUP", group}}), "GPU_LIMIT_GROUP", nullptr);
    }
    expect_refused(enabled({{"GPU_LIMIT_STATE_DIR", "state"}}), "GPU_LIMIT_STATE_DIR", "state");
    expect_refused(enabled({{"GPU_LIMIT_STATE_DIR", ""}}), "GPU_LIMIT_STATE_DIR", "\"\"");
}

TEST(Egpu, ValuesInMessagesStayOnOneLine) {
    Parsed parsed = parse(enabled({{"GPU_MEM_PER_DEVICE", "1\n\x1b[31m2"}}));
    EXPECT_FALSE(parsed.ok);
    EXPECT_STREQ(std::strchr(parsed.problem.text, '"'),
                 "\"1??[31m2\" is not a positive decimal number of bytes below 2^64; set it to "
                 "digits only (no sign, spaces, suffix or 0x), such as "
                 "GPU_MEM_PER_DEVICE=4294967296, or unset it");
    parsed = parse(enabled({{"GPU_MEM_PER_DEVICE", std::string(5000, '7')}}));
    EXPECT_FALSE(parsed.ok);
    EXPECT_LT(std::strlen(parsed.problem.text), sizeof parsed.problem.text - 1);
}

// The entry a list message names is shown like the whole value: found by
// fuzz_egpu_settings, where a MIG entry with a non-ASCII byte went raw into
// the message.
TEST(Egpu, ListEntriesInMessagesStayPrintable) {
    for (const char* value : {"MIG-GPU-28\xe4"
                              "f1ae3/1/0",
                              "0,GPU-\x1b[2J"}) {
        SCOPED_TRACE(value);
        Parsed parsed = parse(enabled({{"NVIDIA_VISIBLE_DEVICES", value}}));
        EXPECT_FALSE(parsed.ok);
        for (const char* c = parsed.problem.text; *c != '\0'; ++c) {
            auto byte = static_cast<unsigned char>(*c);
            EXPECT_TRUE(byte >= 0x20 && byte < 0x7f) << parsed.problem.text;
        }
    }
}

constexpr const char* kUuidA = "GPU-28df3c1e-6b3e-4c5b-9a8f-0123456789ab";
constexpr const char* kUuidB = "GPU-00000000-1111-2222-3333-444444444444";

SeenDevice seen(const char* uuid, int host_index = -1) {
    SeenDevice device;
    device.uuid = uuid;
    device.host_index = host_index;
    return device;
}

SeenDevice seen_at(const char* uuid, const char* pci) {
    SeenDevice device;
    device.uuid = uuid;
    device.pci_known = parse_pci_address(pci, std::strlen(pci), device.pci);
    EXPECT_TRUE(device.pci_known) << pci;
    return device;
}

// "void" and the empty value are what NVIDIA's CDI specs and jit-cdi runtime
// write once they have injected the devices themselves: every GPU the
// process sees is the container's, never none of them.
TEST(Egpu, VisibleDevicesAllVoidAndNone) {
    EXPECT_EQ(parse(enabled()).settings.visible.kind, VisibleDevices::Kind::All);
    for (const char* all : {"all", "void", ""}) {
        Parsed parsed = parse(enabled({{"NVIDIA_VISIBLE_DEVICES", all}}));
        ASSERT_TRUE(parsed.ok) << all;
        EXPECT_EQ(parsed.settings.visible.kind, VisibleDevices::Kind::All) << all;
        EXPECT_TRUE(device_listed(parsed.settings.visible, seen(kUuidA, 0))) << all;
    }
    Parsed none = parse(enabled({{"NVIDIA_VISIBLE_DEVICES", "none"}}));
    ASSERT_TRUE(none.ok);
    EXPECT_EQ(none.settings.visible.kind, VisibleDevices::Kind::None);
    EXPECT_FALSE(device_listed(none.settings.visible, seen(kUuidA, 0)));
    VisibleDevices all;
    EXPECT_TRUE(device_listed(all, seen(kUuidA, 0)));
    EXPECT_TRUE(device_listed(all, seen(nullptr, 7)));
}

TEST(Egpu, VisibleDevicesMixedIndicesAndUuids) {
    std::string upper = "GPU-28DF3C1E-6B3E-4C5B-9A8F-0123456789AB";
    Parsed parsed = parse(enabled({{"NVIDIA_VISIBLE_DEVICES", upper + ",3," + kUuidB + ",0"}}));
    ASSERT_TRUE(parsed.ok) << parsed.problem.text;
    const VisibleDevices& visible = parsed.settings.visible;
    ASSERT_EQ(visible.kind, VisibleDevices::Kind::List);
    ASSERT_EQ(visible.count, 4);
    EXPECT_TRUE(visible.has_index());
    EXPECT_EQ(visible.entries[0].kind, ListedDevice::Kind::Uuid);
    EXPECT_STREQ(visible.entries[0].uuid, kUuidA); // hex stored lower-case
    EXPECT_EQ(visible.entries[1].kind, ListedDevice::Kind::Index);
    EXPECT_EQ(visible.entries[1].index, 3u);
    EXPECT_STREQ(visible.entries[2].uuid, kUuidB);
    EXPECT_EQ(visible.entries[3].index, 0u);

    EXPECT_TRUE(device_listed(visible, seen(kUuidA, 5)));        // by UUID
    EXPECT_TRUE(device_listed(visible, seen(upper.c_str(), 5))); // case-insensitive
    const char* other = "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff";
    EXPECT_TRUE(device_listed(visible, seen(other, 3))); // by host index
    EXPECT_TRUE(device_listed(visible, seen(other, 0)));
    EXPECT_FALSE(device_listed(visible, seen(other, 1)));
    EXPECT_FALSE(device_listed(visible, seen(other))); // host index unknown
    EXPECT_FALSE(device_listed(visible, seen("GPU-28df3c1e-6b3e-4c5b-9a8f-0123456789a", 1)));
    EXPECT_FALSE(device_listed(visible, seen("GPU-28df3c1e-6b3e-4c5b-9a8f-0123456789abc", 1)));
    EXPECT_FALSE(device_listed(visible, seen(nullptr, 1)));

    Parsed single = parse(enabled({{"NVIDIA_VISIBLE_DEVICES", "2"}}));
    ASSERT_TRUE(single.ok);
    EXPECT_EQ(single.settings.visible.count, 1);
    EXPECT_TRUE(device_listed(single.settings.visible, seen(kUuidA, 2)));
    EXPECT_FALSE(device_listed(single.settings.visible, seen(kUuidA, 0)));
    Parsed uuids = parse(enabled({{"NVIDIA_VISIBLE_DEVICES", kUuidA}}));
    EXPECT_FALSE(uuids.settings.visible.has_index());
}

TEST(Egpu, PciAddresses) {
    PciAddress address;
    ASSERT_TRUE(parse_pci_address("0000:3b:00.0", 12, address));
    EXPECT_EQ(address.domain, 0u);
    EXPECT_EQ(address.bus, 0x3bu);
    PciAddress driver; // cuDeviceGetPCIBusId's form
    ASSERT_TRUE(parse_pci_address("00000000:3B:00.0", 16, driver));
    EXPECT_TRUE(same_pci_address(address, driver));
    ASSERT_TRUE(parse_pci_address("3b:00.0", 7, driver));
    EXPECT_TRUE(same_pci_address(address, driver));
    ASSERT_TRUE(parse_pci_address("0001:1a:1f.7", 12, driver));
    EXPECT_EQ(driver.domain, 1u);
    EXPECT_TRUE(pci_address_before(address, driver));
    for (const char* bad :
         {"", "3b", "3b:00", "0000:3b:00.", "0000:3b:00.8", "0000:3b:20.0", "000000000:3b:00.0",
          "0000:13b:00.0", "0000:3b:00.0 ", "0:0:0:00.0", "g0:00.0", "0000::00.0"}) {
        EXPECT_FALSE(parse_pci_address(bad, std::strlen(bad), address)) << bad;
    }
}

// GPU_LIMIT_DEVICES is the host's answer (gpu-limit's hook and runtime): it
// decides over NVIDIA_VISIBLE_DEVICES, which a CDI injector may have set to
// void and which may hold host indices the process cannot match.
TEST(Egpu, HostDevicesDecide) {
    Parsed parsed = parse(enabled({{"NVIDIA_VISIBLE_DEVICES", "void"},
                                   {"GPU_LIMIT_DEVICES", std::string(kUuidA) + ",0000:1a:00.0"}}));
    ASSERT_TRUE(parsed.ok) << parsed.problem.text;
    ASSERT_TRUE(parsed.settings.host_devices_given);
    const VisibleDevices& listed = deciding_devices(parsed.settings);
    EXPECT_EQ(&listed, &parsed.settings.host_devices);
    ASSERT_EQ(listed.count, 2);
    EXPECT_FALSE(listed.has_index());
    EXPECT_TRUE(device_listed(listed, seen_at(kUuidA, "0000:3b:00.0")));
    EXPECT_TRUE(device_listed(listed, seen_at(kUuidB, "00000000:1A:00.0")));
    EXPECT_FALSE(device_listed(listed, seen_at(kUuidB, "0000:3c:00.0")));

    Parsed unset = parse(enabled({{"NVIDIA_VISIBLE_DEVICES", "1"}}));
    EXPECT_FALSE(unset.settings.host_devices_given);
    EXPECT_EQ(&deciding_devices(unset.settings), &unset.settings.visible);
    for (const char* value : {"all", "none"}) {
        Parsed given = parse(enabled({{"GPU_LIMIT_DEVICES", value}}));
        ASSERT_TRUE(given.ok) << value;
        EXPECT_EQ(given.settings.host_devices.kind,
                  value[0] == 'a' ? VisibleDevices::Kind::All : VisibleDevices::Kind::None);
    }
    // Indices are what the host translates; void and empty are not its words.
    for (const char* value : {"1", "void", "", "0,GPU-28df3c1e-6b3e-4c5b-9a8f-0123456789ab", "0:1",
                              "MIG-GPU-28df3c1e-6b3e-4c5b-9a8f-0123456789ab/1/0"}) {
        SCOPED_TRACE(value);
        expect_refused(enabled({{"GPU_LIMIT_DEVICES", value}}), "GPU_LIMIT_DEVICES", nullptr);
    }
}

// Host indices against the driver's list: matched only when the process
// sees every GPU the host lists (the seed's NVIDIA_VISIBLE_DEVICES=1 in a
// container given GPU 1 alone sees one GPU: it must fail, not cap GPU 0).
TEST(Egpu, HostIndicesNeedTheWholeHost) {
    PciAddress host[2];
    ASSERT_TRUE(parse_pci_address("0000:3b:00.0", 12, host[0])); // listed out of order
    ASSERT_TRUE(parse_pci_address("0000:1a:00.0", 12, host[1]));
    Parsed one = parse(enabled({{"NVIDIA_VISIBLE_DEVICES", "1"}}));
    ASSERT_TRUE(one.ok);
    const VisibleDevices& listed = one.settings.visible;

    SeenDevice both[2] = {seen_at(kUuidA, "00000000:3B:00.0"), seen_at(kUuidB, "00000000:1A:00.0")};
    Problem problem;
    ASSERT_TRUE(match_host_indices(listed, host, 2, true, both, 2, problem)) << problem.text;
    EXPECT_EQ(both[0].host_index, 1); // PCI order, not CUDA's or the directory's
    EXPECT_EQ(both[1].host_index, 0);
    EXPECT_TRUE(device_listed(listed, both[0]));
    EXPECT_FALSE(device_listed(listed, both[1]));

    SeenDevice only[1] = {seen_at(kUuidA, "00000000:3B:00.0")};
    Problem partial;
    EXPECT_FALSE(match_host_indices(listed, host, 2, true, only, 1, partial));
    EXPECT_EQ(only[0].host_index, -1);
    EXPECT_NE(std::string(partial.text).find("sees 1 of the 2 GPUs"), std::string::npos)
        << partial.text;
    EXPECT_NE(std::string(partial.text).find("UUID"), std::string::npos) << partial.text;

    // A container whose /proc/driver/nvidia/gpus shows only its own GPU (as
    // libnvidia-container mounts it): index 1 does not exist there.
    Problem masked;
    EXPECT_FALSE(match_host_indices(listed, host, 1, true, only, 1, masked));
    EXPECT_NE(std::string(masked.text).find("host lists 1 GPUs"), std::string::npos) << masked.text;

    Problem unreadable;
    EXPECT_FALSE(match_host_indices(listed, nullptr, 0, false, both, 2, unreadable));
    EXPECT_NE(std::string(unreadable.text).find("/proc/driver/nvidia/gpus"), std::string::npos);

    SeenDevice no_pci[2] = {seen(kUuidA), seen_at(kUuidB, "0000:1a:00.0")};
    Problem unknown;
    EXPECT_FALSE(match_host_indices(listed, host, 2, true, no_pci, 2, unknown));

    // Without index entries nothing is read or required.
    Parsed uuids = parse(enabled({{"NVIDIA_VISIBLE_DEVICES", kUuidA}}));
    Problem none;
    EXPECT_TRUE(match_host_indices(uuids.settings.visible, nullptr, 0, false, only, 1, none));
}

TEST(Egpu, VisibleDevicesMalformedEntries) {
    for (const char* value : {",",
                              "0,",
                              ",0",
                              "0,,1",
                              " 0",
                              "0 ,1",
                              "-1",
                              "+1",
                              "0x1",
                              "4294967296",
                              "all,0",
                              "ALL",
                              "None",
                              "GPU-",
                              "GPU-28df3c1e",
                              "GPU-28df3c1e-6b3e-4c5b-9a8f-0123456789ag",
                              "GPU-28df3c1e-6b3e-4c5b-9a8f-0123456789ab0",
                              "GPU-28df3c1e_6b3e-4c5b-9a8f-0123456789ab",
                              "GPU 28df3c1e-6b3e-4c5b-9a8f-0123456789ab",
                              "gpu0"}) {
        SCOPED_TRACE(value);
        expect_refused(enabled({{"NVIDIA_VISIBLE_DEVICES", value}}), "NVIDIA_VISIBLE_DEVICES",
                       nullptr);
        Parsed parsed = parse(enabled({{"NVIDIA_VISIBLE_DEVICES", value}}));
        EXPECT_NE(std::string(parsed.problem.text).find("GPU UUID"), std::string::npos)
            << parsed.problem.text;
    }
    std::string many;
    for (int i = 0; i <= kMaxListedDevices; ++i) {
        many += (i > 0 ? "," : "") + std::to_string(i);
    }
    expect_refused(enabled({{"NVIDIA_VISIBLE_DEVICES", many}}), "NVIDIA_VISIBLE_DEVICES", nullptr);
    many.resize(many.rfind(','));
    EXPECT_EQ(parse(enabled({{"NVIDIA_VISIBLE_DEVICES", many}})).settings.visible.count,
              kMaxListedDevices);
}

TEST(Egpu, MigInstancesAreRefusedAsAlreadyIsolated) {
    for (const char* value : {"MIG-2f5bcf53-1a1f-5e3b-8e8a-0f0d3c3b7c11", "0:1",
                              "MIG-GPU-28df3c1e-6b3e-4c5b-9a8f-0123456789ab/1/0",
                              "0,mig-2f5bcf53-1a1f-5e3b-8e8a-0f0d3c3b7c11"}) {
        SCOPED_TRACE(value);
        expect_refused(enabled({{"NVIDIA_VISIBLE_DEVICES", value}}), "NVIDIA_VISIBLE_DEVICES",
                       nullptr);
        Parsed parsed = parse(enabled({{"NVIDIA_VISIBLE_DEVICES", value}}));
        EXPECT_NE(std::string(parsed.problem.text).find("isolated"), std::string::npos)
            << parsed.problem.text;
    }
}

TEST(Egpu, DefaultStateDir) {
    char out[kPathSize];
    Problem problem;
    ASSERT_TRUE(default_state_dir(0, "/run/user/0", out, problem));
    EXPECT_STREQ(out, "/run/gpu-limit");
    ASSERT_TRUE(default_state_dir(1000, "/run/user/1000", out, problem));
    EXPECT_STREQ(out, "/run/user/1000/gpu-limit");
    ASSERT_TRUE(default_state_dir(1000, nullptr, out, problem));
    EXPECT_STREQ(out, "/tmp/gpu-limit-1000");
    ASSERT_TRUE(default_state_dir(1000, "relative/dir", out, problem));
    EXPECT_STREQ(out, "/tmp/gpu-limit-1000");
    ASSERT_TRUE(default_state_dir(4294967294u, "", out, problem));
    EXPECT_STREQ(out, "/tmp/gpu-limit-4294967294");
    std::string longest = "/" + std::string(kPathSize - 1 - 1 - 10, 'x'); // + "/gpu-limit"
    ASSERT_TRUE(default_state_dir(1000, longest.c_str(), out, problem));
    EXPECT_EQ(std::strlen(out), kPathSize - 1);
    EXPECT_FALSE(default_state_dir(1000, (longest + "x").c_str(), out, problem));
    EXPECT_NE(std::string(problem.text).find("GPU_LIMIT_STATE_DIR"), std::string::npos);
}

TEST(Egpu, RoundUp) {
    EXPECT_EQ(round_up(0, 2 * kMiB), 0u);
    EXPECT_EQ(round_up(1, 2 * kMiB), 2 * kMiB);
    EXPECT_EQ(round_up(2 * kMiB, 2 * kMiB), 2 * kMiB);
    EXPECT_EQ(round_up(2 * kMiB + 1, 2 * kMiB), 4 * kMiB);
    EXPECT_EQ(round_up(10, 3), 12u); // not a power of two
    EXPECT_EQ(round_up(12345, 0), 12345u);
    EXPECT_EQ(round_up(12345, 1), 12345u);
    EXPECT_EQ(round_up(~uint64_t{0} - 5, 2 * kMiB), ~uint64_t{0}); // saturates
    EXPECT_EQ(round_up(~uint64_t{0}, ~uint64_t{0}), ~uint64_t{0});
    EXPECT_EQ(round_up(1, ~uint64_t{0}), ~uint64_t{0});
}

} // namespace
} // namespace gpuinit::limit

namespace gpuinit::limit {

TEST(Egpu, ComputeShareInPercentAndWhatDisablesIt) {
    EXPECT_EQ(parse(enabled()).settings.compute_percent, 0u); // unset: no compute cap
    const std::pair<const char*, uint32_t> cases[] = {
        {"1", 1},   {"25", 25},  {"50", 50}, {"95", 95},  {"050", 50},
        {"0", 0},   {"96", 0},   {"100", 0}, {"1000", 0}, {"99999999999999999999999", 0},
        {"000", 0}, {"0095", 95}};
    for (const auto& [value, percent] : cases) {
        Parsed parsed = parse(enabled({{"GPU_UTIL_PER_DEVICE", value}}));
        EXPECT_TRUE(parsed.ok) << value << ": " << parsed.problem.text;
        EXPECT_EQ(parsed.settings.compute_percent, percent) << value;
    }
    // Off: not even read.
    Parsed off = parse({{"GPU_UTIL_PER_DEVICE", "garbage"}});
    EXPECT_TRUE(off.ok);
    EXPECT_EQ(off.settings.compute_percent, 0u);
}

TEST(Egpu, MalformedComputeShareIsRefusedWithValueAndFix) {
    for (const char* value : {"", "abc", "50%", "-1", "+50", " 50", "50 ", "0x10", "5.5", "1e2"}) {
        SCOPED_TRACE(value);
        expect_refused(enabled({{"GPU_UTIL_PER_DEVICE", value}}), "GPU_UTIL_PER_DEVICE", value);
    }
}

TEST(Egpu, HostDaemonOnlyWhenExactlyOne) {
    EXPECT_FALSE(parse(enabled()).settings.use_host_daemon);
    EXPECT_TRUE(parse(enabled({{"AMP_USE_HOST_DAEMON", "1"}})).settings.use_host_daemon);
    for (const char* value : {"0", "", "true", "yes", " 1", "01", "2"}) {
        Parsed parsed = parse(enabled({{"AMP_USE_HOST_DAEMON", value}}));
        EXPECT_TRUE(parsed.ok) << value;
        EXPECT_FALSE(parsed.settings.use_host_daemon) << value;
    }
}

} // namespace gpuinit::limit
