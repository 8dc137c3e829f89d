// The hook's and the shim's flow (oci_edit.hpp) on a temporary state root:
// config in, config out, the group's directory made once, the bundle
// rewritten whole; with a stand-in reader of the host's GPUs.
#include "gpuinit/base/json_value.hpp"
#include "gpuinit/limit/oci_edit.hpp"
#include "temp_dir.hpp"

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace gpuinit::limit::oci {

using gpuinit::testing::TempDir;

namespace {

constexpr const char* kAsking =
    R"({"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["sh"],)"
    R"("env":["PATH=/bin","AMP_VGPU_ENABLE=1"]},"root":{"path":"rootfs"}})";
constexpr const char* kNotAsking =
    "{ \"ociVersion\" : \"1.0.2\" ,\n\t\"process\":{\"env\":[\"AMP_VGPU_ENABLE=0\"]}\r\n}\n";

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

std::vector<std::string> names_in(const std::string& dir) {
    std::vector<std::string> names;
    DIR* listing = ::opendir(dir.c_str());
    while (listing != nullptr) {
        dirent* entry = ::readdir(listing);
        if (entry == nullptr) {
            break;
        }
        std::string name = entry->d_name;
        if (name != "." && name != "..") {
            names.push_back(name);
        }
    }
    if (listing != nullptr) {
        ::closedir(listing);
    }
    return names;
}

struct Box {
    TempDir temp;
    int reads = 0;
    Settings settings;
    Box() {
        write_file(temp / "libgpulimit.so", "stand-in");
        settings.library = temp / "libgpulimit.so";
        settings.state_root = temp / "state";
        settings.host_gpus = [this]() -> Result<HostGpus> {
            ++reads;
            return HostGpus{};
        };
    }
};

} // namespace

TEST(OciEdit, AConfigThatDoesNotAskIsLeftAloneAndTheHostIsNotRead) {
    Box box;
    auto edited = edit_config(kNotAsking, {}, box.settings);
    ASSERT_TRUE(edited.ok()) << edited.error().message;
    EXPECT_FALSE(edited->changed);
    EXPECT_EQ(box.reads, 0);
    struct stat status {};
    EXPECT_NE(::stat(box.settings.state_root.c_str(), &status), 0);
    // Not our JSON, not asking: the runtime's business.
    EXPECT_FALSE(edit_config("{\"a\":1,\"a\":2}", {}, box.settings)->changed);
    EXPECT_FALSE(edit_config("{\"a\":1,\"a\":2,\"AMP_VGPU_ENABLE\":1}", {}, box.settings).ok());
}

TEST(OciEdit, TheShimsIdIsTheGroupAndIsMadeOnce) {
    Box box;
    auto edited = edit_config(kAsking, "ctr-1", box.settings);
    ASSERT_TRUE(edited.ok()) << edited.error().message;
    EXPECT_TRUE(edited->changed);
    EXPECT_EQ(edited->group, "ctr-1");
    EXPECT_EQ(box.reads, 1);
    EXPECT_NE(edited->text.find("\"GPU_LIMIT_GROUP=ctr-1\""), std::string::npos);
    struct stat status {};
    ASSERT_EQ(::stat((box.settings.state_root + "/ctr-1").c_str(), &status), 0);
    EXPECT_EQ(status.st_mode & 07777, 0700u);
    // A second container of that id: refused, nothing to mount.
    auto again = edit_config(kAsking, "ctr-1", box.settings);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.error().code, EEXIST);
    EXPECT_FALSE(edit_config(kAsking, "../x", box.settings).ok());
}

TEST(OciEdit, AMissingLibraryOrAFailedHostReadStopsTheContainer) {
    Box box;
    Settings missing = box.settings;
    missing.library = box.temp / "absent.so";
    EXPECT_EQ(edit_config(kAsking, "a", missing).error().code, ENOENT);
    Settings broken = box.settings;
    broken.host_gpus = []() -> Result<HostGpus> { return error("the driver's list is broken"); };
    EXPECT_FALSE(edit_config(kAsking, "b", broken).ok());
    Settings none = box.settings;
    none.host_gpus = nullptr;
    EXPECT_FALSE(edit_config(kAsking, "c", none).ok());
}

TEST(OciEdit, PrecreateWritesTheConfigOrNothing) {
    Box box;
    write_file(box.temp / "in", kNotAsking);
    {
        int in = ::open((box.temp / "in").c_str(), O_RDONLY | O_CLOEXEC);
        int out =
            ::open((box.temp / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT_TRUE(run_precreate(in, out, box.settings).ok());
        ::close(in);
        ::close(out);
        EXPECT_EQ(read_file(box.temp / "out"), kNotAsking); // byte for byte
    }
    // With the cgroup path's id, twice: the second is refused with no output.
    const std::string id(64, 'e');
    const std::string asking = std::string(kAsking).substr(0, std::string(kAsking).size() - 1) +
                               R"(,"linux":{"cgroupsPath":"machine.slice:libpod:)" + id + "\"}}";
    write_file(box.temp / "in", asking);
    for (int round = 0; round < 2; ++round) {
        int in = ::open((box.temp / "in").c_str(), O_RDONLY | O_CLOEXEC);
        int out =
            ::open((box.temp / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        Status done = run_precreate(in, out, box.settings);
        ::close(in);
        ::close(out);
        if (round == 0) {
            ASSERT_TRUE(done.ok()) << done.error().message;
            EXPECT_NE(read_file(box.temp / "out").find("GPU_LIMIT_GROUP=" + id), std::string::npos);
        } else {
            ASSERT_FALSE(done.ok());
            EXPECT_EQ(done.error().code, EEXIST);
            EXPECT_EQ(read_file(box.temp / "out"), "");
        }
    }
}

TEST(OciEdit, PoststopRemovesTheStatesIdOnly) {
    Box box;
    ASSERT_TRUE(edit_config(kAsking, "victim", box.settings).ok());
    ASSERT_TRUE(edit_config(kAsking, "mine", box.settings).ok());
    write_file(box.temp / "state.json",
               R"({"ociVersion":"1.0.2","id":"mine","status":"stopped",)"
               R"("annotations":{"org.gpuinit.gpu-limit.group":"victim"}})");
    int in = ::open((box.temp / "state.json").c_str(), O_RDONLY | O_CLOEXEC);
    auto removed = run_poststop(in, box.settings.state_root);
    ::close(in);
    ASSERT_TRUE(removed.ok()) << removed.error().message;
    EXPECT_EQ(removed->group, "mine");
    EXPECT_EQ(removed->outcome, Cleanup::Removed);
    struct stat status {};
    EXPECT_EQ(::stat((box.settings.state_root + "/victim").c_str(), &status), 0);
}

TEST(OciEdit, TheBundleIsRewrittenWholeWithItsModeOrNotAtAll) {
    Box box;
    const std::string bundle = box.temp / "bundle";
    ASSERT_EQ(::mkdir(bundle.c_str(), 0711), 0);
    write_file(bundle + "/config.json", kAsking);
    ASSERT_EQ(::chmod((bundle + "/config.json").c_str(), 0640), 0);
    RuntimeCall call;
    call.command = "create";
    call.bundle = bundle;
    call.id = "ctr-2";
    ASSERT_TRUE(edit_bundle(call, box.settings).ok());
    const std::string text = read_file(bundle + "/config.json");
    EXPECT_NE(text.find("GPU_LIMIT_GROUP=ctr-2"), std::string::npos);
    struct stat status {};
    ASSERT_EQ(::stat((bundle + "/config.json").c_str(), &status), 0);
    EXPECT_EQ(status.st_mode & 07777, 0640u);
    EXPECT_EQ(names_in(bundle), std::vector<std::string>{"config.json"});
    // The same id again: refused, config.json as it was, no temporary left.
    write_file(bundle + "/config.json", kAsking);
    EXPECT_FALSE(edit_bundle(call, box.settings).ok());
    EXPECT_EQ(read_file(bundle + "/config.json"), kAsking);
    EXPECT_EQ(names_in(bundle), std::vector<std::string>{"config.json"});
    // A planted link as config.json is not read through.
    ASSERT_EQ(::unlink((bundle + "/config.json").c_str()), 0);
    write_file(box.temp / "elsewhere.json", kAsking);
    ASSERT_EQ(::symlink((box.temp / "elsewhere.json").c_str(), (bundle + "/config.json").c_str()),
              0);
    call.id = "ctr-3";
    EXPECT_FALSE(edit_bundle(call, box.settings).ok());
    EXPECT_EQ(read_file(box.temp / "elsewhere.json"), kAsking);
    // crun's --config is refused.
    call.config = "other.json";
    EXPECT_FALSE(edit_bundle(call, box.settings).ok());
}

} // namespace gpuinit::limit::oci
