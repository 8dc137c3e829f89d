// One container taking over another's limit group (the review's F1), on the
// host side as root: prepare_host makes a group's directory for the
// container that names it and never hands an existing one to another owner;
// and `gpu-limit oci-hook precreate` refuses such a config in one line with
// nothing on stdout, so the runtime mounts nothing.
#include "gpuinit/limit/oci_host.hpp"
#include "gpuinit/limit/oci_spec.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <cerrno>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuinit {

using testing::TempDir;

namespace {

constexpr uid_t kVictim = 0;
constexpr uid_t kAttacker = 1000;

struct stat stat_of(const std::string& path) {
    struct stat status {};
    EXPECT_EQ(::lstat(path.c_str(), &status), 0) << path;
    return status;
}

// Runs `gpu-limit oci-hook precreate` on `config`; the exit status, and
// what it wrote to stdout and stderr.
int run_hook(const std::string& state_root, const std::string& library, const std::string& config,
             std::string& out, std::string& err) {
    TempDir io;
    const std::string in_path = io / "in", out_path = io / "out", err_path = io / "err";
    std::ofstream(in_path) << config;
    pid_t child = ::fork();
    if (child == 0) {
        int in = ::open(in_path.c_str(), O_RDONLY);
        int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in < 0 || o < 0 || e < 0 || ::dup2(in, 0) < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0) {
            ::_exit(125);
        }
        ::execl(GPUINIT_BIN, "gpu-limit", "oci-hook", "--library", library.c_str(), "--state-root",
                state_root.c_str(), "precreate", static_cast<char*>(nullptr));
        ::_exit(126);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    auto slurp = [](const std::string& path) {
        std::ifstream file(path);
        return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    };
    out = slurp(out_path);
    err = slurp(err_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace

TEST(OciTakeover, AnExistingGroupIsNeverReownedNorReused) {
    GPUINIT_REQUIRE_ROOT();
    TempDir temp;
    const std::string root = temp / "state";
    ASSERT_TRUE(limit::oci::prepare_host(root, "victim", {kVictim, kVictim}).ok());
    std::ofstream(root + "/victim/state") << "the victim's";
    auto taken = limit::oci::prepare_host(root, "victim", {kAttacker, kAttacker});
    ASSERT_FALSE(taken.ok());
    EXPECT_EQ(taken.error().code, EEXIST);
    EXPECT_EQ(taken.error().text().find('\n'), std::string::npos);
    struct stat status = stat_of(root + "/victim");
    EXPECT_EQ(status.st_uid, kVictim);
    EXPECT_EQ(status.st_gid, kVictim);
    EXPECT_EQ(status.st_mode & 07777, 0700u);
    status = stat_of(root + "/victim/state");
    EXPECT_EQ(status.st_uid, 0u);
    // A new group is the attacker's own, 0700, and nobody else's.
    ASSERT_TRUE(limit::oci::prepare_host(root, "own", {kAttacker, kAttacker}).ok());
    status = stat_of(root + "/own");
    EXPECT_EQ(status.st_uid, kAttacker);
    EXPECT_EQ(status.st_gid, kAttacker);
    EXPECT_EQ(status.st_mode & 07777, 0700u);
}

// The attack as the review ran it: no id in linux.cgroupsPath, the victim's
// id in CRI-O's annotation (and in ours), the attacker's uid 1000.
TEST(OciTakeover, TheHookNamesNoGroupFromAnnotations) {
    GPUINIT_REQUIRE_ROOT();
    TempDir temp;
    const std::string root = temp / "state";
    const std::string library = temp / "libgpulimit.so";
    std::ofstream(library) << "stand-in";
    const std::string victim(64, 'c');
    ASSERT_TRUE(limit::oci::prepare_host(root, victim, {kVictim, kVictim}).ok());
    ASSERT_TRUE(limit::oci::prepare_host(root, "oci-0123", {kVictim, kVictim}).ok());
    for (const std::string& annotation :
         {R"("io.kubernetes.cri-o.ContainerID":")" + victim + "\"",
          std::string(R"("org.gpuinit.gpu-limit.group":"oci-0123")")}) {
        const std::string config =
            R"({"ociVersion":"1.0.2","process":{"user":{"uid":1000,"gid":1000},)"
            R"("env":["AMP_VGPU_ENABLE=1"],"args":["/bin/true"]},"linux":{},)"
            R"("annotations":{)" +
            annotation + "}}";
        std::string out, err;
        EXPECT_EQ(run_hook(root, library, config, out, err), 0) << err;
        EXPECT_NE(out.find("\"GPU_LIMIT_GROUP="), std::string::npos) << out;
        EXPECT_EQ(out.find("\"GPU_LIMIT_GROUP=" + victim + "\""), std::string::npos) << out;
        EXPECT_EQ(out.find(R"("GPU_LIMIT_GROUP=oci-0123")"), std::string::npos) << out;
        for (const std::string& group : {victim, std::string("oci-0123")}) {
            struct stat status = stat_of(root + "/" + group);
            EXPECT_EQ(status.st_uid, kVictim) << annotation;
            EXPECT_EQ(status.st_mode & 07777, 0700u) << annotation;
        }
    }
}

// A second config whose cgroup path names an existing group: refused, one
// line, nothing on stdout (the runtime gets no config to mount from).
TEST(OciTakeover, TheHookRefusesAnExistingGroupAndPrintsNoConfig) {
    GPUINIT_REQUIRE_ROOT();
    TempDir temp;
    const std::string root = temp / "state";
    const std::string library = temp / "libgpulimit.so";
    std::ofstream(library) << "stand-in";
    const std::string id(64, 'd');
    ASSERT_TRUE(limit::oci::prepare_host(root, id, {kVictim, kVictim}).ok());
    const std::string config = R"({"ociVersion":"1.0.2","process":{"user":{"uid":1000,"gid":1000},)"
                               R"("env":["AMP_VGPU_ENABLE=1"],"args":["/bin/true"]},)"
                               R"("linux":{"cgroupsPath":"machine.slice:libpod:)" +
                               id + R"("}})";
    std::string out, err;
    EXPECT_EQ(run_hook(root, library, config, out, err), 3);
    EXPECT_EQ(out, "");
    ASSERT_FALSE(err.empty());
    EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
    EXPECT_NE(err.find(root + "/" + id), std::string::npos) << err;
    struct stat status = stat_of(root + "/" + id);
    EXPECT_EQ(status.st_uid, kVictim);
}

} // namespace gpuinit
