// gpu-limit for containers: the strict JSON tree (json_value.cpp), the spec
// edit and what it reads (oci_spec.cpp), the host's files under the state
// root (oci_host.cpp), and `gpu-limit oci-hook` end to end on text: a config
// without the switch comes out byte for byte, whatever its whitespace.
#include "gpuinit/base/json_value.hpp"
#include "gpuinit/limit/egpu.hpp"
#include "gpuinit/limit/oci_host.hpp"
#include "gpuinit/limit/oci_spec.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace gpuinit::limit::oci {

using gpuinit::testing::TempDir;

namespace {

JsonValue parse_ok(std::string_view text) {
    auto parsed = parse_json(text);
    EXPECT_TRUE(parsed.ok()) << text << ": " << parsed.error().message;
    return parsed.ok() ? std::move(parsed).value() : JsonValue::make_null();
}

JsonValue spec_ok(std::string_view text) {
    auto parsed = parse_spec(text);
    EXPECT_TRUE(parsed.ok()) << text << ": " << parsed.error().message;
    return parsed.ok() ? std::move(parsed).value() : JsonValue::make_object();
}

std::vector<std::string> env_of(const JsonValue& spec) {
    std::vector<std::string> out;
    for (const JsonValue& item : spec.find("process")->find("env")->items()) {
        out.push_back(item.text());
    }
    return out;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

void write_file(const std::string& path, std::string_view text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
}

// Runs argv with `input` on stdin; returns the exit status and stdout.
std::pair<int, std::string> run_with_input(std::vector<std::string> argv, std::string_view input,
                                           const TempDir& temp) {
    write_file(temp / "stdin", input);
    pid_t child = ::fork();
    if (child == 0) {
        int in = ::open((temp / "stdin").c_str(), O_RDONLY);
        int out = ::open((temp / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ::dup2(in, 0);
        ::dup2(out, 1);
        std::vector<char*> args;
        args.reserve(argv.size() + 1);
        for (std::string& word : argv) {
            args.push_back(word.data());
        }
        args.push_back(nullptr);
        ::execv(args[0], args.data());
        ::_exit(127);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(temp / "stdout")};
}

constexpr const char* kMinimalSpec =
    R"({"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["sh"],)"
    R"("env":["PATH=/bin","AMP_VGPU_ENABLE=1"]},"root":{"path":"rootfs"},)"
    R"("mounts":[{"destination":"/proc","type":"proc","source":"proc"}]})";

EditOptions options_for(const std::string& group, bool socket = false) {
    EditOptions options;
    options.library = "/usr/lib/x86_64-linux-gnu/gpuinit/libgpulimit.so";
    options.group = group;
    options.daemon_socket = socket;
    return options;
}

} // namespace

TEST(OciSpec, TheSwitchIsExactlyAmpVgpuEnableEqualsOne) {
    auto with = [](const std::string& entry) {
        return spec_ok(R"({"process":{"env":["PATH=/bin",")" + entry + R"("]}})");
    };
    EXPECT_TRUE(limit_requested(with("AMP_VGPU_ENABLE=1")));
    for (const char* other : {"AMP_VGPU_ENABLE=0", "AMP_VGPU_ENABLE=10", "AMP_VGPU_ENABLE=",
                              "AMP_VGPU_ENABLE= 1", "AMP_VGPU_ENABLE=1 ", " AMP_VGPU_ENABLE=1",
                              "amp_vgpu_enable=1", "XAMP_VGPU_ENABLE=1", "AMP_VGPU_ENABLE"}) {
        EXPECT_FALSE(limit_requested(with(other))) << other;
    }
    EXPECT_FALSE(limit_requested(spec_ok(R"({"process":{}})")));
    EXPECT_FALSE(limit_requested(spec_ok(R"({})")));
}

TEST(OciSpec, HostileSpecsAreRefused) {
    const std::vector<std::string> bad = {
        R"([])",
        R"({"process":[]})",
        R"({"process":{"env":"AMP_VGPU_ENABLE=1"}})",
        R"({"process":{"env":["AMP_VGPU_ENABLE=1",1]}})",
        R"({"process":{"user":{"uid":-1}}})",
        R"({"process":{"user":{"uid":1.5}}})",
        R"({"process":{"user":{"uid":1e3}}})",
        R"({"process":{"user":{"uid":4294967296}}})",
        R"({"process":{"user":{"gid":"0"}}})",
        R"({"mounts":{}})",
        R"({"mounts":["/x"]})",
        R"({"annotations":{"a":1}})",
        R"({"linux":{"uidMappings":[{"containerID":0,"hostID":1000}]}})",
        R"({"linux":{"gidMappings":{}}})",
        R"({"process":{"env":["AMP_VGPU_ENABLE=1"]},"process":{"env":[]}})",
    };
    for (const std::string& text : bad) {
        EXPECT_FALSE(parse_spec(text).ok()) << text;
    }
}

TEST(OciSpec, TheEditAddsMountsAfterTheSpecsAndSetsTheGroup) {
    JsonValue spec = spec_ok(kMinimalSpec);
    ASSERT_TRUE(edit_spec(spec, options_for("c0ffee")));
    const auto& mounts = spec.find("mounts")->items();
    ASSERT_EQ(mounts.size(), 4u);
    EXPECT_EQ(mounts[0].find("destination")->text(), "/proc"); // the spec's stay first
    EXPECT_EQ(serialize_json(mounts[1]),
              R"({"destination":"/usr/lib/gpuinit/libgpulimit.so","type":"bind",)"
              R"("source":"/usr/lib/x86_64-linux-gnu/gpuinit/libgpulimit.so",)"
              R"("options":["bind","ro","nosuid","nodev"]})");
    EXPECT_EQ(serialize_json(mounts[2]), R"({"destination":"/etc/ld.so.preload","type":"bind",)"
                                         R"("source":"/run/gpu-limit/ld.so.preload",)"
                                         R"("options":["bind","ro","nosuid","nodev","noexec"]})");
    EXPECT_EQ(serialize_json(mounts[3]), R"({"destination":"/run/gpu-limit/c0ffee","type":"bind",)"
                                         R"("source":"/run/gpu-limit/c0ffee",)"
                                         R"("options":["bind","rw","nosuid","nodev","noexec"]})");
    EXPECT_EQ(env_of(spec), (std::vector<std::string>{"PATH=/bin", "AMP_VGPU_ENABLE=1",
                                                      "GPU_LIMIT_STATE_DIR=/run/gpu-limit",
                                                      "GPU_LIMIT_GROUP=c0ffee"}));
    EXPECT_EQ(spec.find("annotations")->find(kGroupAnnotation)->text(), "c0ffee");
    // Members the edit did not touch keep their order; new ones come last.
    EXPECT_EQ(spec.members()[0].key, "ociVersion");
    EXPECT_EQ(spec.members().back().key, "annotations");
}

TEST(OciSpec, TheDaemonSocketIsMountedOnlyWhenItRuns) {
    JsonValue spec = spec_ok(kMinimalSpec);
    ASSERT_TRUE(edit_spec(spec, options_for("g", true)));
    const auto& mounts = spec.find("mounts")->items();
    ASSERT_EQ(mounts.size(), 5u);
    EXPECT_EQ(mounts[4].find("destination")->text(), "/run/gpu-limit/daemon.sock");
    EXPECT_EQ(mounts[4].find("source")->text(), "/run/gpu-limit/daemon.sock");
    auto env = env_of(spec);
    EXPECT_NE(
        std::find(env.begin(), env.end(), "GPU_LIMIT_DAEMON_SOCKET=/run/gpu-limit/daemon.sock"),
        env.end());
}

// Another state root: the library must be told where the socket is bound
// (its default is /run/gpu-limit/daemon.sock). Found by the seed test's
// daemon check: the container's process could not register.
TEST(OciSpec, TheDaemonSocketIsNamedWhereItIsBound) {
    JsonValue spec = spec_ok(kMinimalSpec);
    EditOptions options = options_for("g", true);
    options.state_root = "/srv/limit";
    ASSERT_TRUE(edit_spec(spec, options));
    auto env = env_of(spec);
    EXPECT_NE(std::find(env.begin(), env.end(), "GPU_LIMIT_DAEMON_SOCKET=/srv/limit/daemon.sock"),
              env.end());
    JsonValue without = spec_ok(kMinimalSpec);
    ASSERT_TRUE(edit_spec(without, options_for("g", false)));
    env = env_of(without);
    EXPECT_EQ(std::find_if(env.begin(), env.end(),
                           [](const std::string& item) {
                               return item.rfind("GPU_LIMIT_DAEMON_SOCKET=", 0) == 0;
                           }),
              env.end());
}

TEST(OciSpec, EditingTwiceAddsNothing) {
    JsonValue spec = spec_ok(kMinimalSpec);
    ASSERT_TRUE(edit_spec(spec, options_for("g1", true)));
    std::string once = serialize_json(spec);
    JsonValue again = spec_ok(once);
    EXPECT_FALSE(edit_spec(again, options_for("g1", true)));
    EXPECT_EQ(serialize_json(again), once);
}

TEST(OciSpec, TheGroupAndStateDirAreOursNotTheUsers) {
    JsonValue spec = spec_ok(R"({"process":{"env":["GPU_LIMIT_GROUP=mine","AMP_VGPU_ENABLE=1",)"
                             R"("GPU_LIMIT_STATE_DIR=/tmp/x","GPU_LIMIT_GROUP=other"]}})");
    ASSERT_TRUE(edit_spec(spec, options_for("ctr")));
    // The first entry is the one getenv sees: replaced in place, the rest gone.
    EXPECT_EQ(env_of(spec), (std::vector<std::string>{"GPU_LIMIT_GROUP=ctr", "AMP_VGPU_ENABLE=1",
                                                      "GPU_LIMIT_STATE_DIR=/run/gpu-limit"}));
}

// The config's author may repeat a name as often as 8 MiB allows; the root
// runtime shim must not spend minutes removing the copies one erase at a
// time (150,000 took about a minute that way).
TEST(OciSpec, ManyCopiesOfOurVariablesAreNotQuadratic) {
    std::string text = R"({"process":{"env":["AMP_VGPU_ENABLE=1")";
    for (int i = 0; i < 150000; ++i) {
        text += i % 2 == 0 ? R"(,"GPU_LIMIT_GROUP=mine")" : R"(,"GPU_LIMIT_DEVICES=all")";
    }
    text += "]}}";
    JsonValue spec = spec_ok(text);
    EditOptions options = options_for("ctr");
    options.devices = "none";
    auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(edit_spec(spec, options));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_EQ(env_of(spec), (std::vector<std::string>{"AMP_VGPU_ENABLE=1", "GPU_LIMIT_GROUP=ctr",
                                                      "GPU_LIMIT_DEVICES=none",
                                                      "GPU_LIMIT_STATE_DIR=/run/gpu-limit"}));
}

TEST(OciSpec, AMountThatCoversOursIsCoveredAgain) {
    JsonValue spec = spec_ok(kMinimalSpec);
    ASSERT_TRUE(edit_spec(spec, options_for("g")));
    JsonValue user = parse_ok(
        R"({"destination":"/etc/ld.so.preload","type":"bind","source":"/tmp/empty","options":["bind"]})");
    spec.find("mounts")->items().push_back(user);
    EXPECT_TRUE(edit_spec(spec, options_for("g")));
    const auto& mounts = spec.find("mounts")->items();
    EXPECT_EQ(mounts.back().find("destination")->text(), "/etc/ld.so.preload");
    EXPECT_EQ(mounts.back().find("source")->text(), "/run/gpu-limit/ld.so.preload");
}

// The library bound at our place from our source, but read-write (a user's
// -v), is not ours: ours, read-only, goes after it. And ours spelt
// otherwise ("/usr/lib/gpuinit//libgpulimit.so", found by fuzz.json_value)
// with our options is ours.
TEST(OciSpec, OurMountIsOursOnlyWithOurOptions) {
    const std::string library = options_for("g").library;
    JsonValue spec = spec_ok(kMinimalSpec);
    spec.find("mounts")->items().push_back(
        parse_ok(R"({"destination":"/usr/lib/gpuinit/libgpulimit.so","type":"bind","source":")" +
                 library + R"(","options":["bind","rw"]})"));
    ASSERT_TRUE(edit_spec(spec, options_for("g")));
    const JsonValue* last_library = nullptr;
    for (const JsonValue& mount : spec.find("mounts")->items()) {
        if (mount.find("destination")->text() == "/usr/lib/gpuinit/libgpulimit.so") {
            last_library = &mount;
        }
    }
    ASSERT_NE(last_library, nullptr);
    EXPECT_EQ(serialize_json(*last_library->find("options")), R"(["bind","ro","nosuid","nodev"])");

    JsonValue spelt = spec_ok(kMinimalSpec);
    spelt.find("mounts")->items().push_back(
        parse_ok(R"({"destination":"/usr/lib/gpuinit//libgpulimit.so","type":"bind","source":")" +
                 library + R"(","options":["bind","ro","nosuid","nodev"]})"));
    ASSERT_TRUE(edit_spec(spelt, options_for("g"))); // the other mounts
    const std::string once = serialize_json(spelt);
    EXPECT_EQ(once.find(R"("destination":"/usr/lib/gpuinit/libgpulimit.so")"), std::string::npos);
    EXPECT_FALSE(edit_spec(spelt, options_for("g")));
}

TEST(OciSpec, AMountOverAParentOrSpeltOtherwiseIsCoveredAgain) {
    // Found by fuzz.json_value: an edited spec with a later tmpfs on /etc
    // hid /etc/ld.so.preload, and editing it again changed nothing.
    for (const char* cover : {R"({"destination":"/etc","type":"tmpfs","source":"t"})",
                              R"({"destination":"/","type":"bind","source":"/x"})",
                              R"({"destination":"/etc//ld.so.preload/","type":"tmpfs"})",
                              R"({"destination":"/usr/./lib/../lib/gpuinit","type":"tmpfs"})"}) {
        JsonValue spec = spec_ok(kMinimalSpec);
        ASSERT_TRUE(edit_spec(spec, options_for("g")));
        spec.find("mounts")->items().push_back(parse_ok(cover));
        EXPECT_TRUE(edit_spec(spec, options_for("g"))) << cover;
        std::string once = serialize_json(spec);
        EXPECT_FALSE(edit_spec(spec, options_for("g"))) << cover;
        EXPECT_EQ(serialize_json(spec), once);
    }
    // A mount beside ours, or below a directory of ours, covers nothing.
    JsonValue spec = spec_ok(kMinimalSpec);
    ASSERT_TRUE(edit_spec(spec, options_for("g")));
    spec.find("mounts")->items().push_back(
        parse_ok(R"({"destination":"/etc/ld.so.preload.d","type":"tmpfs"})"));
    spec.find("mounts")->items().push_back(
        parse_ok(R"({"destination":"/run/gpu-limit/g/sub","type":"tmpfs"})"));
    EXPECT_FALSE(edit_spec(spec, options_for("g")));
}

TEST(OciSpec, TheStateOwnerIsTheProcessUserThroughTheMappings) {
    auto owner = state_owner(spec_ok(R"({"process":{"user":{"uid":1000,"gid":100}}})"));
    ASSERT_TRUE(owner.ok());
    EXPECT_EQ(owner->uid, 1000u);
    EXPECT_EQ(owner->gid, 100u);
    owner = state_owner(spec_ok(R"({})"));
    ASSERT_TRUE(owner.ok());
    EXPECT_EQ(owner->uid, 0u);
    const char* mapped = R"({"process":{"user":{"uid":0,"gid":5}},"linux":{)"
                         R"("uidMappings":[{"containerID":0,"hostID":100000,"size":65536}],)"
                         R"("gidMappings":[{"containerID":0,"hostID":200000,"size":10}]}})";
    owner = state_owner(spec_ok(mapped));
    ASSERT_TRUE(owner.ok());
    EXPECT_EQ(owner->uid, 100000u);
    EXPECT_EQ(owner->gid, 200005u);
    EXPECT_FALSE(
        state_owner(spec_ok(R"({"process":{"user":{"uid":70000}},"linux":{)"
                            R"("uidMappings":[{"containerID":0,"hostID":100000,"size":65536}]}})"))
            .ok());
}

TEST(OciSpec, TheGroupOfAPrecreateHookComesFromTheCgroupPath) {
    const std::string id(64, 'a');
    const std::string id2 = std::string(63, '0') + "f";
    auto group = [](const std::string& body) { return group_from_spec(spec_ok(body)); };
    EXPECT_EQ(group(R"({"linux":{"cgroupsPath":"/libpod_parent/libpod-)" + id + R"("}})"), id);
    EXPECT_EQ(group(R"({"linux":{"cgroupsPath":"machine.slice:libpod:)" + id + R"("}})"), id);
    EXPECT_EQ(group(R"({"linux":{"cgroupsPath":"kubepods.slice:crio:)" + id2 + R"("}})"), id2);
    EXPECT_EQ(group(R"({"linux":{"cgroupsPath":"/kubepods/crio-)" + id + R"(.scope"}})"), id);
    // The path wins over annotations.
    EXPECT_EQ(group(R"({"linux":{"cgroupsPath":"/libpod_parent/libpod-)" + id +
                    R"("},"annotations":{"io.kubernetes.cri-o.ContainerID":")" + id2 + R"("}})"),
              id);
    EXPECT_EQ(group(R"({"linux":{"cgroupsPath":"/libpod_parent/libpod-ABC"}})"), std::nullopt);
    EXPECT_EQ(group(R"({"linux":{"cgroupsPath":"/user.slice/)" + id + R"(x"}})"), std::nullopt);
    EXPECT_EQ(group(R"({})"), std::nullopt);
}

// Annotations are the container creator's to write (podman run --annotation):
// one naming another container's group would hand that group over.
TEST(OciSpec, NoAnnotationNamesThePrecreateGroup) {
    const std::string id(64, 'a');
    auto group = [](const std::string& body) { return group_from_spec(spec_ok(body)); };
    EXPECT_EQ(group(R"({"annotations":{"io.kubernetes.cri-o.ContainerID":")" + id + R"("}})"),
              std::nullopt);
    EXPECT_EQ(group(R"({"linux":{"cgroupsPath":""},"annotations":{)"
                    R"("io.kubernetes.cri-o.ContainerID":")" +
                    id + R"("}})"),
              std::nullopt);
    EXPECT_EQ(group(R"({"annotations":{"org.gpuinit.gpu-limit.group":"oci-0123abcd"}})"),
              std::nullopt);
    EXPECT_EQ(group(R"({"annotations":{"org.gpuinit.gpu-limit.group":")" + id + R"("}})"),
              std::nullopt);
}

TEST(OciSpec, RandomGroupsAreValidAndDiffer) {
    auto a = random_group_name();
    auto b = random_group_name();
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE(valid_group_name(*a));
    EXPECT_EQ(a->rfind("oci-", 0), 0u);
    EXPECT_EQ(a->size(), 36u);
    EXPECT_NE(*a, *b);
}

TEST(OciSpec, ThePoststopGroupIsTheStatesIdOnly) {
    const std::string id(64, 'b');
    EXPECT_EQ(group_from_state(R"({"ociVersion":"1.0.2","id":")" + id + R"(","status":"stopped"})")
                  .value_or(""),
              id);
    // podman hands poststop hooks the annotations its user wrote: none of
    // them may point the cleanup at another container's directory.
    EXPECT_EQ(group_from_state(R"({"id":")" + id +
                               R"(","annotations":{"org.gpuinit.gpu-limit.group":"oci-12"}})")
                  .value_or(""),
              id);
    EXPECT_EQ(group_from_state(R"({"id":"mine","annotations":{"org.gpuinit.gpu-limit.group":")" +
                               id + R"(","io.kubernetes.cri-o.ContainerID":")" + id + R"("}})")
                  .value_or(""),
              "mine");
    for (const char* bad : {R"({"id":"../etc"})", R"({"id":""})", R"({"id":"."})", R"({})",
                            R"({"id":1})", R"([])", "{"}) {
        EXPECT_FALSE(group_from_state(bad).ok()) << bad;
    }
}

// --- the runtime's command line ---

// --- which GPUs the host gives a container ---

constexpr const char* kHostUuid0 = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"; // 1a, minor 1
constexpr const char* kHostUuid1 = "GPU-11111111-2222-3333-4444-555555555555"; // 3b, minor 0

// Two GPUs whose minors are not their host indices, in PCI order.
HostGpus two_gpus() {
    HostGpus host;
    host.listed = true;
    host.gpus = {{"0000:1a:00.0", 1, kHostUuid0}, {"0000:3b:00.0", 0, kHostUuid1}};
    return host;
}

JsonValue with_env(std::initializer_list<std::string> env, std::string_view rest = "") {
    std::string text = "{\"process\":{\"env\":[";
    bool first = true;
    for (const std::string& item : env) {
        text += (first ? "\"" : ",\"") + item + "\"";
        first = false;
    }
    text += "]}" + std::string(rest) + "}";
    return spec_ok(text);
}

std::string devices_of(const JsonValue& spec, const HostGpus& host = two_gpus()) {
    auto devices = container_devices(spec, host);
    EXPECT_TRUE(devices.ok()) << (devices.ok() ? "" : devices.error().message);
    if (!devices.ok()) {
        return "<error>";
    }
    return devices->value_or("<unset>");
}

std::string refusal(const JsonValue& spec, const HostGpus& host = two_gpus()) {
    auto devices = container_devices(spec, host);
    EXPECT_FALSE(devices.ok()) << devices->value_or("<unset>");
    return devices.ok() ? "" : devices.error().message;
}

// The seed's NVIDIA_VISIBLE_DEVICES=1 is host GPU 1 in nvidia-smi's numbering
// (PCI order), whatever its minor or the order CUDA sees it in.
TEST(OciDevices, HostIndicesBecomeUuids) {
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=1"})), kHostUuid1);
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=0"})), kHostUuid0);
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=1,0"})),
              std::string(kHostUuid0) + "," + kHostUuid1);
    // NVIDIA's runtime reads the environment into a map: the last entry
    // wins (docker's --gpus appends one after the user's -e).
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=1"})),
              kHostUuid1);
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=GPU-11111111-2222-3333-4444-"
                                   "555555555555"})),
              kHostUuid1);
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=gpu-66666666-7777-8888-9999-"
                                   "AAAAAAAAAAAA"})),
              kHostUuid0);
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"})), kHostUuid1);
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=all"})), "all");
}

TEST(OciDevices, NothingNamedLeavesTheLibraryItsOwnRule) {
    for (const char* value : {"NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=none",
                              "NVIDIA_VISIBLE_DEVICES=", "OTHER=1"}) {
        EXPECT_EQ(devices_of(with_env({value})), "<unset>") << value;
    }
    // nvidiactl and a device of another driver are no GPU.
    EXPECT_EQ(devices_of(with_env({}, ",\"linux\":{\"devices\":[{\"path\":\"/dev/nvidiactl\","
                                      "\"type\":\"c\",\"major\":195,\"minor\":255},"
                                      "{\"path\":\"/dev/x\",\"type\":\"c\",\"major\":10,"
                                      "\"minor\":1}]}")),
              "<unset>");
}

// podman's --device nvidia.com/gpu=N and NVIDIA's jit-cdi runtime inject the
// nodes and set NVIDIA_VISIBLE_DEVICES=void: the nodes say which GPUs.
TEST(OciDevices, InjectedNodesAndCdiRequestsCount) {
    const std::string node1 = ",\"linux\":{\"devices\":[{\"path\":\"/dev/nvidia1\",\"type\":\"c\","
                              "\"major\":195,\"minor\":1}]}";
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=void"}, node1)), kHostUuid0);
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=1"}, node1)),
              std::string(kHostUuid0) + "," + kHostUuid1); // the union
    EXPECT_EQ(devices_of(with_env({}, ",\"annotations\":{\"cdi.k8s.io/gpu-limit\":"
                                      "\"vendor.com/net=1,nvidia.com/gpu=0\"}")),
              kHostUuid0);
    EXPECT_EQ(devices_of(with_env({}, ",\"annotations\":{\"cdi.k8s.io/x\":\"nvidia.com/gpu=all\","
                                      "\"other\":\"nvidia.com/gpu=1\"}")),
              "all");
    EXPECT_EQ(devices_of(with_env({}, ",\"annotations\":{\"other\":\"nvidia.com/gpu=1\"}")),
              "<unset>");
}

// runc makes a node of type "u" (unbuffered) a character device as "c"
// (libcontainer/specconv/spec_linux.go, stringToDeviceRune): a GPU node
// either way. Left out, that GPU would be missing from the list.
TEST(OciDevices, UnbufferedNodesAreCharacterNodes) {
    EXPECT_EQ(devices_of(with_env({}, ",\"linux\":{\"devices\":[{\"path\":\"/dev/nvidia1\","
                                      "\"type\":\"u\",\"major\":195,\"minor\":1}]}")),
              kHostUuid0);
    EXPECT_EQ(devices_of(with_env({}, ",\"linux\":{\"devices\":[{\"path\":\"/dev/sda\","
                                      "\"type\":\"b\",\"major\":195,\"minor\":1}]}")),
              "<unset>");
}

// A name the host cannot place stops the container: started anyway, it would
// run with caps on the wrong GPU or with every allocation refused.
TEST(OciDevices, WhatTheHostCannotPlaceIsRefused) {
    EXPECT_NE(refusal(with_env({"NVIDIA_VISIBLE_DEVICES=2"})).find("the host has 2 GPUs"),
              std::string::npos);
    EXPECT_NE(refusal(with_env({}, ",\"linux\":{\"devices\":[{\"path\":\"/dev/nvidia7\","
                                   "\"type\":\"c\",\"major\":195,\"minor\":7}]}"))
                  .find("no Device Minor 7"),
              std::string::npos);
    EXPECT_NE(refusal(with_env({"NVIDIA_VISIBLE_DEVICES=0:1"})).find("MIG"), std::string::npos);
    EXPECT_NE(refusal(with_env({"NVIDIA_VISIBLE_DEVICES=MIG-GPU-11111111-2222-3333-4444-"
                                "555555555555/1/0"}))
                  .find("MIG"),
              std::string::npos);
    EXPECT_NE(refusal(with_env({"NVIDIA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-"
                                "000000000000"}))
                  .find("no GPU of the host has"),
              std::string::npos);
    EXPECT_NE(refusal(with_env({"NVIDIA_VISIBLE_DEVICES=gpu0"})).find("neither"),
              std::string::npos);
    HostGpus no_driver;
    EXPECT_NE(refusal(with_env({"NVIDIA_VISIBLE_DEVICES=0"}), no_driver)
                  .find("/proc/driver/nvidia/gpus is absent"),
              std::string::npos);
}

// A driver that printed no UUID (the GPU was never initialized: nv-procfs.c
// prints the line only with a valid UUID cache): such a GPU goes by its PCI
// address, and a UUID the host cannot confirm goes through as given.
TEST(OciDevices, GpusWithoutAUuidGoByPciAddress) {
    HostGpus host = two_gpus();
    host.gpus[1].uuid.clear();
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=1"}), host), "0000:3b:00.0");
    const std::string unknown = "GPU-00000000-0000-0000-0000-000000000000";
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=" + unknown}), host), unknown);
    HostGpus no_driver;
    EXPECT_EQ(devices_of(with_env({"NVIDIA_VISIBLE_DEVICES=" + unknown}), no_driver), unknown);
}

// UUIDs the host cannot confirm go through as given, so the config's author
// decides how many: no more than the library takes (it refuses a longer
// GPU_LIMIT_DEVICES, and the container would start with every allocation
// refused), and never quadratic work for the root runtime shim (100,000
// distinct UUIDs took minutes).
TEST(OciDevices, UnconfirmedUuidsAreAtMostWhatTheLibraryTakes) {
    auto uuids = [](int count) {
        std::string list = "NVIDIA_VISIBLE_DEVICES=";
        for (int i = 0; i < count; ++i) {
            char uuid[64];
            std::snprintf(uuid, sizeof uuid, "%sGPU-%08x-0000-0000-0000-000000000000",
                          i == 0 ? "" : ",", static_cast<unsigned>(i));
            list += uuid;
        }
        return list;
    };
    HostGpus no_driver;
    // The one form the library takes.
    EXPECT_NE(refusal(with_env({"NVIDIA_VISIBLE_DEVICES=GPU-0"}), no_driver).find("no GPU UUID"),
              std::string::npos);
    std::string most = devices_of(with_env({uuids(limit::kMaxListedDevices)}), no_driver);
    EXPECT_EQ(std::count(most.begin(), most.end(), ','), limit::kMaxListedDevices - 1) << most;
    EXPECT_NE(refusal(with_env({uuids(limit::kMaxListedDevices + 1)}), no_driver)
                  .find("more than 64 GPUs"),
              std::string::npos);
    // Host GPUs and unconfirmed UUIDs count together.
    HostGpus host = two_gpus();
    host.gpus[1].uuid.clear();
    EXPECT_NE(refusal(with_env({uuids(limit::kMaxListedDevices - 1) + ",0,1"}), host)
                  .find("more than 64 GPUs"),
              std::string::npos);
    auto start = std::chrono::steady_clock::now();
    EXPECT_NE(refusal(with_env({uuids(100000)}), no_driver).find("more than 64 GPUs"),
              std::string::npos);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(OciDevices, TheEditWritesTheHostsListAndDropsTheUsers) {
    JsonValue spec = with_env({"AMP_VGPU_ENABLE=1", "GPU_LIMIT_DEVICES=GPU-mine"});
    EditOptions options;
    options.library = "/usr/lib/gpuinit/libgpulimit.so";
    options.group = "g";
    options.devices = kHostUuid1;
    EXPECT_TRUE(edit_spec(spec, options));
    auto env = env_of(spec);
    EXPECT_EQ(std::count_if(
                  env.begin(), env.end(),
                  [](const std::string& item) { return item.rfind("GPU_LIMIT_DEVICES=", 0) == 0; }),
              1);
    EXPECT_NE(std::find(env.begin(), env.end(), std::string("GPU_LIMIT_DEVICES=") + kHostUuid1),
              env.end());
    EXPECT_FALSE(edit_spec(spec, options));
    options.devices.reset();
    EXPECT_TRUE(edit_spec(spec, options));
    env = env_of(spec);
    EXPECT_EQ(std::count_if(
                  env.begin(), env.end(),
                  [](const std::string& item) { return item.rfind("GPU_LIMIT_DEVICES=", 0) == 0; }),
              0);
}

TEST(OciRuntimeArgs, DockersCreate) {
    // containerd's runc shim after daemon.json's runtimeArgs ("runtime" is
    // gpu-limit's own command word, gone before this).
    std::vector<std::string> args = {"--runtime-path",
                                     "/usr/bin/crun",
                                     "--root",
                                     "/var/run/docker/runtime-runc/moby",
                                     "--log",
                                     "/run/containerd/t/moby/abc/log.json",
                                     "--log-format",
                                     "json",
                                     "--systemd-cgroup",
                                     "create",
                                     "--bundle",
                                     "/run/containerd/t/moby/abc",
                                     "--pid-file",
                                     "/run/containerd/t/moby/abc/init.pid",
                                     "--console-socket",
                                     "/tmp/pty.sock",
                                     "abc"};
    auto call = parse_runtime_args(args);
    ASSERT_TRUE(call.ok()) << call.error().message;
    EXPECT_EQ(call->runtime_path.value_or(""), "/usr/bin/crun");
    EXPECT_EQ(call->command, "create");
    EXPECT_EQ(call->bundle.value_or(""), "/run/containerd/t/moby/abc");
    EXPECT_EQ(call->id, "abc");
    EXPECT_FALSE(call->config.has_value());
    // Everything after ours goes to the runtime unchanged.
    EXPECT_EQ(call->forward, std::vector<std::string>(args.begin() + 2, args.end()));
}

TEST(OciRuntimeArgs, TheRealRuntimesOptionsInRuntimeArgs) {
    // daemon.json's runtimeArgs may name crun's own global options after
    // ours; docker's script puts containerd's after them.
    auto call =
        parse_runtime_args({"--runtime-path", "/usr/bin/crun", "--cgroup-manager=disabled",
                            "--root", "/var/run/docker/runtime-runc/moby", "--log-format", "json",
                            "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "abc"});
    ASSERT_TRUE(call.ok()) << call.error().message;
    EXPECT_EQ(call->runtime_path.value_or(""), "/usr/bin/crun");
    EXPECT_EQ(call->forward.front(), "--cgroup-manager=disabled");
    EXPECT_EQ(call->command, "create");
    EXPECT_EQ(call->bundle.value_or(""), "/b");
    EXPECT_EQ(call->id, "abc");

    call = parse_runtime_args({"--cgroup-manager", "disabled", "--rootless", "false", "--debug",
                               "delete", "--force", "abc"});
    ASSERT_TRUE(call.ok());
    EXPECT_EQ(call->command, "delete");
    EXPECT_EQ(call->id, "abc");
}

TEST(OciRuntimeArgs, RuncsOwnForms) {
    auto call =
        parse_runtime_args({"--root=/r", "--debug", "create", "-b", "/b", "--no-pivot", "id1"});
    ASSERT_TRUE(call.ok());
    EXPECT_EQ(call->command, "create");
    EXPECT_EQ(call->bundle.value_or(""), "/b");
    EXPECT_EQ(call->id, "id1");
    EXPECT_FALSE(call->runtime_path.has_value());

    call = parse_runtime_args({"create", "--bundle=/b2", "id2"});
    ASSERT_TRUE(call.ok());
    EXPECT_EQ(call->bundle.value_or(""), "/b2");
    EXPECT_EQ(call->id, "id2");

    call = parse_runtime_args({"create", "id3"}); // the bundle is the cwd
    ASSERT_TRUE(call.ok());
    EXPECT_FALSE(call->bundle.has_value());
    EXPECT_EQ(call->id, "id3");

    call = parse_runtime_args({"--root", "/r", "delete", "--force", "id4"});
    ASSERT_TRUE(call.ok());
    EXPECT_EQ(call->command, "delete");
    EXPECT_EQ(call->id, "id4");

    call = parse_runtime_args({"kill", "id5", "9"});
    ASSERT_TRUE(call.ok());
    EXPECT_EQ(call->command, "kill");
    EXPECT_EQ(call->id, "id5");

    call = parse_runtime_args({"--cgroup-manager", "systemd", "create", "-f", "c.json", "id6"});
    ASSERT_TRUE(call.ok());
    EXPECT_EQ(call->command, "create"); // "systemd" is the option's value
    EXPECT_EQ(call->config.value_or(""), "c.json");
    EXPECT_EQ(call->id, "id6");

    call = parse_runtime_args({"features"});
    ASSERT_TRUE(call.ok());
    EXPECT_EQ(call->command, "features");
    EXPECT_EQ(call->id, "");

    call = parse_runtime_args({"--version"});
    ASSERT_TRUE(call.ok());
    EXPECT_EQ(call->command, "");
    EXPECT_EQ(call->forward, std::vector<std::string>{"--version"});

    call = parse_runtime_args({"--library=/l.so", "--state-root", "/s", "state", "id7"});
    ASSERT_TRUE(call.ok());
    EXPECT_EQ(call->library.value_or(""), "/l.so");
    EXPECT_EQ(call->state_root.value_or(""), "/s");
    EXPECT_EQ(call->forward, (std::vector<std::string>{"state", "id7"}));
}

TEST(OciRuntimeArgs, HelpAndMissingValues) {
    auto call = parse_runtime_args({"--help"});
    ASSERT_TRUE(call.ok());
    EXPECT_TRUE(call->help);
    // The runtime's own help, after its options, is the runtime's.
    call = parse_runtime_args({"--root", "/r", "--help"});
    ASSERT_TRUE(call.ok());
    EXPECT_FALSE(call->help);
    EXPECT_FALSE(parse_runtime_args({"--runtime-path"}).ok());
    EXPECT_FALSE(parse_runtime_args({"--runtime-path="}).ok());
    EXPECT_FALSE(parse_runtime_args({"create", "--bundle"}).ok());
    call = parse_runtime_args({"--version"});
    ASSERT_TRUE(call.ok());
    EXPECT_TRUE(call->version);
    EXPECT_EQ(call->forward, std::vector<std::string>{"--version"});
}

// --root is runc's (containerd gives it to every call): the host's root for
// reading GPUs is --host-root, ours, before runc's words.
TEST(OciRuntimeArgs, HostRootIsOursAndRootIsRuncs) {
    auto call = parse_runtime_args(
        {"--host-root", "/fixture", "--root", "/run/runc", "create", "--bundle", "/b", "id"});
    ASSERT_TRUE(call.ok());
    EXPECT_EQ(call->host_root.value_or(""), "/fixture");
    EXPECT_EQ(call->forward.front(), "--root");
    EXPECT_EQ(call->command, "create");
    EXPECT_FALSE(parse_runtime_args({"--host-root"}).ok());
}

// --- the host's files ---

TEST(OciHost, PrepareMakesTheRootThePreloadFileAndTheGroup) {
    TempDir temp;
    const std::string root = temp / "run/gpu-limit";
    HostOwner owner{::getuid(), ::getgid()};
    ASSERT_TRUE(prepare_host(root, "g1", owner).ok());
    EXPECT_EQ(read_file(root + "/ld.so.preload"), "/usr/lib/gpuinit/libgpulimit.so\n");
    struct stat status {};
    ASSERT_EQ(::stat((root + "/ld.so.preload").c_str(), &status), 0);
    EXPECT_EQ(status.st_mode & 07777, 0644u);
    ASSERT_EQ(::stat(root.c_str(), &status), 0);
    EXPECT_EQ(status.st_mode & 07777, 0755u);
    ASSERT_EQ(::lstat((root + "/g1").c_str(), &status), 0);
    EXPECT_TRUE(S_ISDIR(status.st_mode));
    EXPECT_EQ(status.st_mode & 07777, 0700u);
    EXPECT_EQ(status.st_uid, owner.uid);
    // Another group: a wrong preload file is put right.
    write_file(root + "/ld.so.preload", "/evil.so\n");
    ASSERT_TRUE(prepare_host(root, "g2", owner).ok());
    EXPECT_EQ(read_file(root + "/ld.so.preload"), "/usr/lib/gpuinit/libgpulimit.so\n");
    EXPECT_FALSE(prepare_host(root, "../g", owner).ok());
}

// A group's directory is made once, by the container it names: a second
// container naming it (a takeover, or a leftover) is refused in one line
// that names it, and the directory keeps its owner, mode and contents.
TEST(OciHost, PrepareRefusesAGroupThatExistsAndNeverReownsIt) {
    TempDir temp;
    const std::string root = temp / "state";
    HostOwner owner{::getuid(), ::getgid()};
    ASSERT_TRUE(prepare_host(root, "victim", owner).ok());
    write_file(root + "/victim/state", "the victim's");
    ASSERT_EQ(::chmod((root + "/victim").c_str(), 0750), 0);
    auto again = prepare_host(root, "victim", owner);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.error().code, EEXIST);
    const std::string message = again.error().text();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find(root + "/victim"), std::string::npos) << message;
    struct stat status {};
    ASSERT_EQ(::stat((root + "/victim").c_str(), &status), 0);
    EXPECT_EQ(status.st_mode & 07777, 0750u);
    EXPECT_EQ(read_file(root + "/victim/state"), "the victim's");
    // A plain file or a symlink by that name is refused too.
    write_file(root + "/file", "x");
    EXPECT_FALSE(prepare_host(root, "file", owner).ok());
}

TEST(OciHost, PrepareRefusesSymlinksAndAWritableRoot) {
    TempDir temp;
    const std::string root = temp / "state";
    ASSERT_EQ(::mkdir((temp / "elsewhere").c_str(), 0700), 0);
    ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
    ASSERT_EQ(::symlink((temp / "elsewhere").c_str(), (root + "/g").c_str()), 0);
    HostOwner owner{::getuid(), ::getgid()};
    EXPECT_FALSE(prepare_host(root, "g", owner).ok());
    struct stat status {};
    ASSERT_EQ(::stat((temp / "elsewhere").c_str(), &status), 0);
    EXPECT_EQ(status.st_mode & 07777, 0700u); // untouched through the link
    // The root itself as a symlink.
    ASSERT_EQ(::symlink(root.c_str(), (temp / "link").c_str()), 0);
    EXPECT_FALSE(prepare_host(temp / "link", "h", owner).ok());
    // A root others can write.
    ASSERT_EQ(::chmod(root.c_str(), 0777), 0);
    EXPECT_FALSE(prepare_host(root, "h", owner).ok());
    // A planted preload link is replaced, never written through.
    ASSERT_EQ(::chmod(root.c_str(), 0755), 0);
    write_file(temp / "target", "keep");
    ::unlink((root + "/ld.so.preload").c_str()); // the first attempt wrote it
    ASSERT_EQ(::symlink((temp / "target").c_str(), (root + "/ld.so.preload").c_str()), 0);
    ASSERT_TRUE(prepare_host(root, "h", owner).ok());
    EXPECT_EQ(read_file(temp / "target"), "keep");
    ASSERT_EQ(::lstat((root + "/ld.so.preload").c_str(), &status), 0);
    EXPECT_TRUE(S_ISREG(status.st_mode));
}

TEST(OciHost, DaemonSocketMeansASocket) {
    TempDir temp;
    EXPECT_FALSE(daemon_socket_present(temp.path()));
    write_file(temp / "daemon.sock", "");
    EXPECT_FALSE(daemon_socket_present(temp.path()));
    ASSERT_EQ(::unlink((temp / "daemon.sock").c_str()), 0);
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::string path = temp / "daemon.sock";
    ASSERT_LT(path.size(), sizeof address.sun_path);
    std::copy(path.begin(), path.end(), address.sun_path);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_TRUE(daemon_socket_present(temp.path()));
    ::close(fd);
}

TEST(OciHost, CleanupRemovesEverythingWithoutFollowingLinks) {
    TempDir temp;
    const std::string root = temp / "state";
    HostOwner owner{::getuid(), ::getgid()};
    ASSERT_TRUE(prepare_host(root, "g", owner).ok());
    // What a container may leave: files, nested directories, links out.
    ASSERT_EQ(::mkdir((temp / "outside").c_str(), 0700), 0);
    write_file(temp / "outside/precious", "keep");
    write_file(root + "/g/state", "not locked");
    ASSERT_EQ(::mkdir((root + "/g/a").c_str(), 0700), 0);
    ASSERT_EQ(::mkdir((root + "/g/a/b").c_str(), 0700), 0);
    write_file(root + "/g/a/b/f", "x");
    ASSERT_EQ(::symlink((temp / "outside").c_str(), (root + "/g/a/out").c_str()), 0);
    ASSERT_EQ(::symlink((temp / "outside/precious").c_str(), (root + "/g/file-link").c_str()), 0);
    auto removed = remove_group(root, "g");
    ASSERT_TRUE(removed.ok()) << removed.error().message;
    EXPECT_EQ(*removed, Cleanup::Removed);
    struct stat status {};
    EXPECT_NE(::lstat((root + "/g").c_str(), &status), 0);
    EXPECT_EQ(read_file(temp / "outside/precious"), "keep");
    // Gone is gone; and the root's own files stay.
    EXPECT_EQ(remove_group(root, "g").value_or(Cleanup::InUse), Cleanup::Absent);
    EXPECT_EQ(::lstat((root + "/ld.so.preload").c_str(), &status), 0);
    EXPECT_EQ(remove_group(temp / "missing", "g").value_or(Cleanup::InUse), Cleanup::Absent);
}

TEST(OciHost, CleanupRefusesASymlinkedGroupAndBadNames) {
    TempDir temp;
    const std::string root = temp / "state";
    ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((temp / "victim").c_str(), 0700), 0);
    write_file(temp / "victim/state", "x");
    ASSERT_EQ(::symlink((temp / "victim").c_str(), (root + "/g").c_str()), 0);
    EXPECT_FALSE(remove_group(root, "g").ok());
    struct stat status {};
    EXPECT_EQ(::stat((temp / "victim/state").c_str(), &status), 0);
    EXPECT_EQ(::lstat((root + "/g").c_str(), &status), 0); // the link is left for the admin
    for (const char* bad : {"..", ".", "", "a/b", "../state"}) {
        EXPECT_FALSE(remove_group(root, bad).ok()) << bad;
    }
}

TEST(OciHost, CleanupLeavesAGroupALiveProcessHolds) {
    TempDir temp;
    const std::string root = temp / "state";
    HostOwner owner{::getuid(), ::getgid()};
    ASSERT_TRUE(prepare_host(root, "g", owner).ok());
    write_file(root + "/g/state", std::string(4096, '\0'));
    // A slot's lock, as the library takes it, held by a child process (an
    // OFD lock of this process would not show to its own F_OFD_GETLK).
    int ready[2];
    int release[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(release), 0);
    pid_t child = ::fork();
    if (child == 0) {
        int fd = ::open((root + "/g/state").c_str(), O_RDWR);
        struct flock lock {};
        lock.l_type = F_WRLCK;
        lock.l_whence = SEEK_SET;
        lock.l_start = 100;
        lock.l_len = 1;
        char byte = ::fcntl(fd, F_OFD_SETLK, &lock) == 0 ? 'y' : 'n';
        (void)!::write(ready[1], &byte, 1);
        (void)!::read(release[0], &byte, 1);
        ::_exit(0);
    }
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    ASSERT_EQ(byte, 'y');
    EXPECT_EQ(remove_group(root, "g").value_or(Cleanup::Removed), Cleanup::InUse);
    struct stat status {};
    EXPECT_EQ(::stat((root + "/g/state").c_str(), &status), 0);
    (void)!::write(release[1], "x", 1);
    int wait_status = 0;
    ::waitpid(child, &wait_status, 0);
    EXPECT_EQ(remove_group(root, "g").value_or(Cleanup::InUse), Cleanup::Removed);
    for (int fd : {ready[0], ready[1], release[0], release[1]}) {
        ::close(fd);
    }
}

// --- gpu-limit oci-hook precreate, on text ---

class OciHookText : public ::testing::Test {
  protected:
    std::pair<int, std::string> hook(std::string_view input) {
        return run_with_input({GPUINIT_BIN, "limit", "oci-hook", "--library", library_,
                               "--state-root", temp_ / "state", "precreate"},
                              input, temp_);
    }
    void SetUp() override {
        library_ = temp_ / "libgpulimit.so";
        write_file(library_, "not really a library");
    }
    TempDir temp_;
    std::string library_;
};

TEST_F(OciHookText, WithoutTheSwitchTheConfigComesOutByteForByte) {
    const std::vector<std::string> inputs = {
        "{ \"ociVersion\" : \"1.0.2\" ,\n\t\"process\":{\"env\":[\"AMP_VGPU_ENABLE=0\"]}\r\n}\n\n",
        "  {\"process\":{\"env\":[\"A=\\u00e9\\/x\"]},\"z\":1.50e+00}",
        "{\"process\":{\"env\":[\"AMP_VGPU_ENABLE=1 \"]}}",
        "{}",
        // Not JSON we accept, and no switch: the runtime's to judge.
        "{\"a\":1,\"a\":2}",
        "\xef\xbb\xbf{\"x\":\"\xff\"}",
    };
    for (const std::string& input : inputs) {
        auto [code, output] = hook(input);
        EXPECT_EQ(code, 0) << input;
        EXPECT_EQ(output, input);
    }
    struct stat status {};
    EXPECT_NE(::lstat((temp_ / "state").c_str(), &status), 0); // nothing made on the host
}

TEST_F(OciHookText, WithTheSwitchTheConfigIsEditedOnceAndTheGroupMade) {
    const std::string id(64, 'c');
    const std::string input =
        "{\n  \"process\": {\"user\": {\"uid\": " + std::to_string(::getuid()) +
        ", \"gid\": " + std::to_string(::getgid()) +
        "},\n  \"env\": [\"AMP_VGPU_ENABLE=1\"]},\n"
        "  \"linux\": {\"cgroupsPath\": \"/libpod_parent/libpod-" +
        id + "\"}\n}\n";
    auto [code, output] = hook(input);
    ASSERT_EQ(code, 0);
    auto spec = parse_spec(output);
    ASSERT_TRUE(spec.ok()) << output;
    EXPECT_TRUE(limit_requested(*spec));
    auto env = env_of(*spec);
    EXPECT_NE(std::find(env.begin(), env.end(), "GPU_LIMIT_GROUP=" + id), env.end());
    EXPECT_NE(std::find(env.begin(), env.end(), "GPU_LIMIT_STATE_DIR=" + temp_ / "state"),
              env.end());
    struct stat status {};
    ASSERT_EQ(::lstat((temp_ / "state/" + id).c_str(), &status), 0);
    EXPECT_TRUE(S_ISDIR(status.st_mode));
    // Through the hook again while the group is there: refused, nothing out.
    auto [refused, nothing] = hook(output);
    EXPECT_EQ(refused, 3);
    EXPECT_EQ(nothing, "");
    // Once it is gone (poststop): nothing more to add, the text as it came.
    ASSERT_EQ(remove_group(temp_ / "state", id).value_or(Cleanup::Absent), Cleanup::Removed);
    auto [code2, output2] = hook(output);
    EXPECT_EQ(code2, 0);
    EXPECT_EQ(output2, output);
}

// The hook numbers GPUs as the host's driver lists them (--root: a fixture
// of /proc/driver/nvidia/gpus in the driver's format, nv-procfs.c).
TEST_F(OciHookText, HostIndicesAreTranslatedThroughTheDriversList) {
    const std::string root = temp_ / "host";
    const std::pair<const char*, const char*> gpus[] = {{"0000:3b:00.0", kHostUuid1},
                                                        {"0000:1a:00.0", kHostUuid0}};
    unsigned minor = 0;
    for (const auto& [bus, uuid] : gpus) {
        const std::string dir = root + "/proc/driver/nvidia/gpus/" + bus;
        ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
        write_file(dir + "/information",
                   "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nGPU UUID: \t " +
                       std::string(uuid) +
                       "\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\n"
                       "DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t " +
                       bus + "\nDevice Minor: \t " + std::to_string(minor++) +
                       "\nGPU Firmware: \t 580.159.04\nGPU Excluded:\t No\n");
    }
    auto hook_at = [&](std::string_view input) {
        return run_with_input({GPUINIT_BIN, "limit", "oci-hook", "--root", root, "--library",
                               library_, "--state-root", temp_ / "state", "precreate"},
                              input, temp_);
    };
    const std::string id(64, 'd');
    const std::string head = "{\"process\":{\"user\":{\"uid\":" + std::to_string(::getuid()) +
                             ",\"gid\":" + std::to_string(::getgid()) +
                             "},\"env\":[\"AMP_VGPU_ENABLE=1\",\"NVIDIA_VISIBLE_DEVICES=";
    auto tail_of = [](const std::string& container) {
        return "\"]},\"linux\":{\"cgroupsPath\":\"/libpod_parent/libpod-" + container + "\"}}";
    };
    const std::string tail = tail_of(id);
    // Each refusal below on a container of its own: the first one's group
    // exists, and a second config naming it would be refused for that alone.
    const std::string other = tail_of(std::string(64, 'e'));
    auto [code, output] = hook_at(head + "1" + tail);
    ASSERT_EQ(code, 0) << output;
    auto spec = parse_spec(output);
    ASSERT_TRUE(spec.ok()) << output;
    auto env = env_of(*spec);
    EXPECT_NE(std::find(env.begin(), env.end(), std::string("GPU_LIMIT_DEVICES=") + kHostUuid1),
              env.end())
        << output;
    std::tie(code, output) = hook_at(head + "2" + other);
    EXPECT_EQ(code, 3);
    EXPECT_EQ(output, "");

    // A driver entry that cannot be read stops the container rather than
    // shift every index after it.
    const std::string broken = root + "/proc/driver/nvidia/gpus/0000:05:00.0";
    ASSERT_EQ(std::system(("mkdir -p " + broken).c_str()), 0);
    write_file(broken + "/information", "Model: \t\t NVIDIA H100 80GB HBM3\n");
    std::tie(code, output) = hook_at(head + "1" + other);
    EXPECT_EQ(code, 3);
    EXPECT_EQ(output, "");
}

TEST_F(OciHookText, WithTheSwitchABrokenConfigOrAMissingLibraryStopsTheContainer) {
    auto [code, output] = hook("{\"process\":{\"env\":[\"AMP_VGPU_ENABLE=1\"]},\"process\":{}}");
    EXPECT_EQ(code, 3);
    EXPECT_EQ(output, "");
    ASSERT_EQ(::unlink(library_.c_str()), 0);
    std::tie(code, output) = hook("{\"process\":{\"env\":[\"AMP_VGPU_ENABLE=1\"]}}");
    EXPECT_EQ(code, 3);
    EXPECT_EQ(output, "");
}

} // namespace gpuinit::limit::oci
