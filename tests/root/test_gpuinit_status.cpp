// `gpuinit status` as a process on fixture machines: healthy, a node wrong,
// a GPU gpu-persist failed to hold, a MIG instance without a name, and a
// probe that hangs. The textfile is read by a parser of the exposition
// format (below) that refuses what node_exporter's would.
#include "gpuinit/mig/leases.hpp"
#include "gpuinit/mig/names_file.hpp"
#include "gpuinit/mig/sync.hpp"
#include "gpuinit/persist/control.hpp"
#include "json_check.hpp"
#include "machine_fixture.hpp"
#include "root_helpers.hpp"
#include "temp_dir.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <poll.h>
#include <regex>
#include <set>
#include <sstream>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

namespace gpuinit {

using testing::run_process;
using testing::TempDir;

namespace {

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

struct StatusRun {
    int code = -1;
    std::string out;
    std::string err;
};

// The tool with stdout and stderr apart.
StatusRun status(const TempDir& scratch, const std::vector<std::string>& args) {
    std::string command = "exec \"$0\" status";
    std::vector<std::string> argv = {"/bin/sh", "-c", "", GPUINIT_BIN};
    for (size_t i = 0; i < args.size(); ++i) {
        command += " \"$" + std::to_string(i + 1) + "\"";
        argv.push_back(args[i]);
    }
    command += " >'" + scratch / "out" + "' 2>'" + scratch / "err" + "'";
    argv[2] = command;
    StatusRun run;
    run.code = run_process(argv);
    run.out = read_all(scratch / "out");
    run.err = read_all(scratch / "err");
    return run;
}

// The text exposition format (Prometheus 0.0.4), as node_exporter's textfile
// collector reads it: "# HELP" and "# TYPE" once per family, before its
// samples, which follow each other; names and label names by the format's
// grammar; label values with the \\, \" and \n escapes only; a float
// value; no series twice; a newline at the end. Returns "name{labels}" ->
// value, or fails the test.
std::map<std::string, double> parse_exposition(const std::string& text) {
    std::map<std::string, double> series;
    const std::regex name_re("[a-zA-Z_:][a-zA-Z0-9_:]*");
    const std::regex label_re("[a-zA-Z_][a-zA-Z0-9_]*");
    std::map<std::string, int> help;
    std::map<std::string, std::string> type;
    std::string current;
    std::set<std::string> finished;
    EXPECT_TRUE(!text.empty() && text.back() == '\n') << "no newline at the end";
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
            std::string rest = line.substr(7);
            std::string name = rest.substr(0, rest.find(' '));
            EXPECT_TRUE(std::regex_match(name, name_re)) << line;
            EXPECT_NE(rest.find(' '), std::string::npos) << line;
            if (line[2] == 'H') {
                EXPECT_EQ(help[name]++, 0) << "HELP twice: " << line;
            } else {
                std::string kind = rest.substr(rest.find(' ') + 1);
                EXPECT_TRUE(kind == "gauge" || kind == "counter" || kind == "untyped") << line;
                EXPECT_TRUE(type.emplace(name, kind).second) << "TYPE twice: " << line;
            }
            EXPECT_EQ(finished.count(name), 0u) << "family split: " << line;
            continue;
        }
        EXPECT_NE(line.rfind('#', 0), 0u) << "stray comment: " << line;
        size_t end = line.find_first_of("{ ");
        std::string name = line.substr(0, end);
        EXPECT_TRUE(std::regex_match(name, name_re)) << line;
        EXPECT_EQ(type.count(name), 1u) << "no TYPE before " << line;
        EXPECT_EQ(help.count(name), 1u) << "no HELP before " << line;
        if (name != current) {
            if (!current.empty()) {
                finished.insert(current);
            }
            EXPECT_EQ(finished.count(name), 0u) << "family split: " << line;
            current = name;
        }
        std::string key = name;
        size_t at = end;
        if (at < line.size() && line[at] == '{') {
            key += '{';
            ++at;
            while (at < line.size() && line[at] != '}') {
                size_t eq = line.find('=', at);
                std::string label = line.substr(at, eq - at);
                EXPECT_TRUE(std::regex_match(label, label_re)) << line;
                EXPECT_EQ(line.at(eq + 1), '"') << line;
                at = eq + 2;
                std::string value;
                while (at < line.size() && line[at] != '"') {
                    if (line[at] == '\\') {
                        char next = line.at(at + 1);
                        EXPECT_TRUE(next == '\\' || next == '"' || next == 'n') << line;
                        value += next == 'n' ? '\n' : next;
                        at += 2;
                    } else {
                        value += line[at++];
                    }
                }
                EXPECT_LT(at, line.size()) << "unterminated label value: " << line;
                ++at;
                key += label + "=" + value;
                if (at < line.size() && line[at] == ',') {
                    key += ',';
                    ++at;
                }
            }
            EXPECT_LT(at, line.size()) << line;
            key += '}';
            ++at;
        }
        EXPECT_EQ(line.at(at), ' ') << line;
        std::string number = line.substr(at + 1);
        char* stop = nullptr;
        double value = std::strtod(number.c_str(), &stop);
        EXPECT_TRUE(!number.empty() && *stop == '\0') << "value: " << line;
        EXPECT_TRUE(series.emplace(key, value).second) << "series twice: " << line;
    }
    return series;
}

// A machine gpu-mknod has set up: the healthy start of every test.
struct FixtureMachine {
    TempDir root;
    TempDir scratch;
    explicit FixtureMachine(testing::FakeMachine machine = testing::workstation(2)) {
        EXPECT_TRUE(testing::write_fixture(machine, root.path()));
        std::string output;
        EXPECT_EQ(run_process({GPU_MKNOD_BIN, "--root", root.path()}, &output), 0) << output;
    }
    std::string prom() const { return scratch / "gpuinit.prom"; }
};

// gpu-persist's control socket for one request: it answers `reply`.
class FakePersist {
  public:
    // silent: reads the request and never answers.
    FakePersist(const TempDir& root, const ControlReply& reply, bool silent = false) {
        ::mkdir((root / "run").c_str(), 0755);
        ::mkdir((root / "run/gpu-persist").c_str(), 0755);
        std::string path = root / "run/gpu-persist/socket";
        listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
        EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
        EXPECT_EQ(::listen(listener_, 4), 0);
        std::string text = format_control_reply(reply);
        server_ = std::thread([this, text, silent] {
            pollfd waiting{listener_, POLLIN, 0};
            if (::poll(&waiting, 1, 20000) != 1) {
                return;
            }
            int peer = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
            char request[256];
            ssize_t got = ::read(peer, request, sizeof(request));
            requests_ = got > 0 ? std::string(request, static_cast<size_t>(got)) : "";
            if (silent) {
                pollfd hangup{peer, POLLRDHUP, 0};
                ::poll(&hangup, 1, 20000);
            } else {
                (void)!::write(peer, text.data(), text.size());
            }
            ::close(peer);
        });
    }
    ~FakePersist() {
        ::shutdown(listener_, SHUT_RDWR);
        server_.join();
        ::close(listener_);
    }
    const std::string& requests() const { return requests_; }

  private:
    int listener_ = -1;
    std::thread server_;
    std::string requests_;
};

} // namespace

TEST(GpuinitStatus, AHealthyMachineIsAllOk) {
    GPUINIT_REQUIRE_ROOT();
    FixtureMachine machine;
    StatusRun run =
        status(machine.scratch, {"--root", machine.root.path(), "--prometheus", machine.prom()});
    EXPECT_EQ(run.code, 0) << run.out << run.err;
    EXPECT_EQ(run.err, "");
    EXPECT_NE(run.out.find("nodes    ok"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("persist  not-configured"), std::string::npos) << run.out;
    auto series = parse_exposition(read_all(machine.prom()));
    for (const char* probe : {"driver", "nodes", "persist", "mig", "limit"}) {
        EXPECT_EQ(series[std::string("gpuinit_probe_success{probe=") + probe + "}"], 1) << probe;
        EXPECT_EQ(series[std::string("gpuinit_probe_ok{probe=") + probe + "}"], 1) << probe;
    }
    EXPECT_EQ(series["gpuinit_probe_configured{probe=persist}"], 0);
    EXPECT_EQ(series["gpuinit_status_exit_code"], 0);
    double now = static_cast<double>(::time(nullptr));
    EXPECT_NEAR(series["gpuinit_last_run_timestamp_seconds"], now, 60);
    struct stat st {};
    ASSERT_EQ(::stat(machine.prom().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0644u);

    run = status(machine.scratch, {"--root", machine.root.path(), "--json"});
    EXPECT_EQ(run.code, 0);
    std::string why;
    EXPECT_TRUE(testing::valid_json(run.out, &why)) << why << "\n" << run.out;
    EXPECT_NE(run.out.find("\"exit_code\":0"), std::string::npos) << run.out;
    // Nothing is left beside the file (the temporary name was renamed).
    EXPECT_EQ(run_process({"/bin/sh", "-c",
                           "test $(ls -A '" + machine.scratch.path() + "' | wc -l) -eq 3"}),
              0);
}

TEST(GpuinitStatus, ANodeThatDiffersExitsFourWithItsReasonOnOneLine) {
    GPUINIT_REQUIRE_ROOT();
    FixtureMachine machine;
    ASSERT_EQ(::chmod((machine.root / "dev/nvidia1").c_str(), 0666), 0);
    StatusRun run = status(
        machine.scratch, {"--root", machine.root.path(), "--prometheus", machine.prom(), "--json"});
    EXPECT_EQ(run.code, 4) << run.out << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    EXPECT_EQ(run.err.rfind("gpuinit status: nodes: ", 0), 0u) << run.err;
    EXPECT_NE(run.err.find("/dev/nvidia1"), std::string::npos) << run.err;
    std::string why;
    EXPECT_TRUE(testing::valid_json(run.out, &why)) << why << "\n" << run.out;
    EXPECT_NE(run.out.find("\"exit_code\":4"), std::string::npos) << run.out;
    auto series = parse_exposition(read_all(machine.prom()));
    EXPECT_EQ(series["gpuinit_probe_ok{probe=nodes}"], 0);
    EXPECT_EQ(series["gpuinit_probe_success{probe=nodes}"], 1);
    EXPECT_EQ(series["gpuinit_nodes_differing"], 1);
    EXPECT_EQ(series["gpuinit_status_exit_code"], 4);
}

TEST(GpuinitStatus, AGpuThatPersistFailedToHoldExitsFour) {
    GPUINIT_REQUIRE_ROOT();
    FixtureMachine machine;
    ControlReply reply;
    reply.daemon.pid = ::getpid();
    HeldGpu held;
    held.id = {0, "0000:17:00.0", testing::fake_uuid(0)};
    held.state = HoldState::Held;
    HeldGpu failed;
    failed.id = {1, "0000:27:00.0", testing::fake_uuid(1)};
    failed.state = HoldState::Failed;
    failed.error_code = EIO;
    failed.error = "open /dev/nvidia1: Input/output error";
    reply.gpus = {held, failed};
    StatusRun run;
    {
        FakePersist daemon(machine.root, reply);
        run = status(machine.scratch,
                     {"--root", machine.root.path(), "--prometheus", machine.prom()});
        EXPECT_EQ(daemon.requests(), "status\n");
    }
    EXPECT_EQ(run.code, 4) << run.out << run.err;
    EXPECT_EQ(run.err.rfind("gpuinit status: persist: GPU 1 (0000:27:00.0) is failed", 0), 0u)
        << run.err;
    EXPECT_NE(run.err.find("Input/output error"), std::string::npos) << run.err;
    auto series = parse_exposition(read_all(machine.prom()));
    EXPECT_EQ(series["gpuinit_persist_daemon_up"], 1);
    EXPECT_EQ(series["gpuinit_persist_gpu_held{gpu=0,pci_address=0000:17:00.0,uuid=" +
                     testing::fake_uuid(0) + ",state=held}"],
              1);
    EXPECT_EQ(series.count("gpuinit_persist_gpu_held{gpu=1,pci_address=0000:27:00.0,uuid=" +
                           testing::fake_uuid(1) + ",state=failed}"),
              1u);
}

// A daemon that takes the request and never answers: its own timeout,
// within the probe's deadline, says so.
TEST(GpuinitStatus, APersistDaemonThatDoesNotAnswerTimesOut) {
    GPUINIT_REQUIRE_ROOT();
    FixtureMachine machine;
    StatusRun run;
    auto start = std::chrono::steady_clock::now();
    {
        FakePersist daemon(machine.root, ControlReply{}, true);
        run = status(machine.scratch, {"--root", machine.root.path(), "--prometheus",
                                       machine.prom(), "--timeout", "2"});
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
    EXPECT_EQ(run.code, 3) << run.out << run.err;
    EXPECT_EQ(run.err.rfind("gpuinit status: persist: gpu-persist did not answer in time", 0), 0u)
        << run.err;
    auto series = parse_exposition(read_all(machine.prom()));
    EXPECT_EQ(series["gpuinit_probe_success{probe=persist}"], 0);
    EXPECT_EQ(series["gpuinit_probe_success{probe=mig}"], 1);
}

TEST(GpuinitStatus, AnEnabledPersistThatIsNotRunningExitsThree) {
    GPUINIT_REQUIRE_ROOT();
    FixtureMachine machine;
    std::string wants = machine.root / "etc/systemd/system/multi-user.target.wants";
    ASSERT_EQ(run_process({"/bin/mkdir", "-p", wants}), 0);
    ASSERT_EQ(::symlink("/lib/systemd/system/gpu-persist.service",
                        (wants + "/gpu-persist.service").c_str()),
              0);
    StatusRun run = status(machine.scratch, {"--root", machine.root.path()});
    EXPECT_EQ(run.code, 3) << run.out << run.err;
    EXPECT_EQ(run.err.rfind("gpuinit status: persist: gpu-persist is not running", 0), 0u)
        << run.err;
}

namespace {

// Two GPUs, MIG on GPU 1 with two instances, the leases sync makes, and a
// names file with every instance but `unnamed` (none when past the end).
testing::FakeMachine mig_machine() {
    testing::FakeMachine fake = testing::workstation(2);
    fake.mig_caps = true;
    fake.mig = {{1, 7, {0}}, {1, 8, {0}}};
    fake.cap_modify = false; // as gpu-mknod --mig leaves them
    return fake;
}

void write_names(const std::string& dir, size_t unnamed) {
    auto root = Sysroot::open(dir);
    ASSERT_TRUE(root);
    Diagnostics diagnostics;
    auto view = read_mig_view(*root, diagnostics);
    ASSERT_TRUE(view) << view.error().text();
    ASSERT_EQ(view->instances.size(), 2u);
    ASSERT_TRUE(sync_leases(*root, view->instances, {}, true, diagnostics));
    for (size_t i = 0; i < view->instances.size(); ++i) {
        if (i != unnamed) {
            view->instances[i].profile = "1g.10gb";
            view->instances[i].uuid = "MIG-aaaaaaaa-bbbb-cccc-dddd-00000000000" + std::to_string(i);
        }
    }
    ASSERT_TRUE(write_mig_names_file(*root, render_mig_names_file(view->instances, "test")));
}

// PATH with only `dir` (and the shell's own), for the stand-in nvidia-smi.
class PathIs {
  public:
    explicit PathIs(const std::string& dir) {
        const char* old = std::getenv("PATH");
        old_ = old != nullptr ? old : "";
        ::setenv("PATH", (dir + ":/usr/bin:/bin").c_str(), 1);
    }
    ~PathIs() { ::setenv("PATH", old_.c_str(), 1); }

  private:
    std::string old_;
};

} // namespace

TEST(GpuinitStatus, MigInstancesThatAreAllNamedAreOk) {
    GPUINIT_REQUIRE_ROOT();
    FixtureMachine machine(mig_machine());
    write_names(machine.root.path(), 99);
    StatusRun run = status(machine.scratch,
                           {"--root", machine.root.path(), "--prometheus", machine.prom(), "-v"});
    EXPECT_EQ(run.code, 0) << run.out << run.err;
    EXPECT_NE(run.out.find("gpu1/gi7/ci0"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("free"), std::string::npos) << run.out;
    auto series = parse_exposition(read_all(machine.prom()));
    EXPECT_EQ(series["gpuinit_mig_instances"], 2);
    EXPECT_EQ(series["gpuinit_mig_unnamed_instances"], 0);
    EXPECT_EQ(series["gpuinit_mig_instance_leased{instance=gpu1/gi7/ci0,gpu=1,profile=1g.10gb,"
                     "mig_uuid=MIG-aaaaaaaa-bbbb-cccc-dddd-000000000000}"],
              0);
}

TEST(GpuinitStatus, AnInstanceWithoutANameExitsFourNamingIt) {
    GPUINIT_REQUIRE_ROOT();
    FixtureMachine machine(mig_machine());
    write_names(machine.root.path(), 1);
    // No nvidia-smi and no NVML here: the names file is all there is.
    PathIs path(machine.scratch.path());
    StatusRun run =
        status(machine.scratch, {"--root", machine.root.path(), "--prometheus", machine.prom()});
    EXPECT_EQ(run.code, 4) << run.out << run.err;
    EXPECT_EQ(run.err.rfind("gpuinit status: mig: 1 MIG instance without a name", 0), 0u)
        << run.err;
    EXPECT_NE(run.err.find("gpu1/gi8/ci0"), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("gpu-mig sync"), std::string::npos) << run.err;
    auto series = parse_exposition(read_all(machine.prom()));
    EXPECT_EQ(series["gpuinit_mig_unnamed_instances"], 1);
    EXPECT_EQ(series["gpuinit_probe_ok{probe=mig}"], 0);
}

// nvidia-smi hangs on a wedged GPU: the MIG probe (which asks it for the
// names the file lacks) is killed at its deadline, and the rest is reported.
TEST(GpuinitStatus, AHangingNvidiaSmiTimesOutItsProbeOnly) {
    GPUINIT_REQUIRE_ROOT();
    FixtureMachine machine(mig_machine());
    write_names(machine.root.path(), 1);
    TempDir bin;
    ASSERT_EQ(::chmod(bin.path().c_str(), 0755), 0);
    {
        std::ofstream smi(bin / "nvidia-smi");
        smi << "#!/bin/sh\necho $$ >'" << bin / "pid"
            << "'\nexec sleep 60\n";
    }
    ASSERT_EQ(::chmod((bin / "nvidia-smi").c_str(), 0755), 0);
    PathIs path(bin.path());
    auto start = std::chrono::steady_clock::now();
    StatusRun run = status(machine.scratch, {"--root", machine.root.path(), "--prometheus",
                                             machine.prom(), "--timeout", "1"});
    auto took = std::chrono::steady_clock::now() - start;
    EXPECT_LT(took, std::chrono::seconds(8));
    EXPECT_EQ(run.code, 3) << run.out << run.err;
    EXPECT_EQ(run.err.rfind("gpuinit status: mig: the mig probe did not finish within 1 s", 0), 0u)
        << run.err;
    EXPECT_NE(run.out.find("limit    not-configured"), std::string::npos) << run.out;
    auto series = parse_exposition(read_all(machine.prom()));
    EXPECT_EQ(series["gpuinit_probe_success{probe=mig}"], 0);
    EXPECT_EQ(series["gpuinit_probe_success{probe=limit}"], 1);
    EXPECT_EQ(series["gpuinit_status_exit_code"], 3);
    // The hanging nvidia-smi went with the probe (it runs in a process
    // group of its own: killing the probe's group alone would miss it).
    std::string pid = read_all(bin / "pid");
    ASSERT_FALSE(pid.empty());
    pid.pop_back();
    bool gone = false;
    for (int i = 0; i < 50 && !gone; ++i) {
        std::string stat = read_all("/proc/" + pid + "/stat");
        gone = stat.empty() || stat.find(") Z ") != std::string::npos;
        if (!gone) {
            ::usleep(100000);
        }
    }
    EXPECT_TRUE(gone) << "nvidia-smi (pid " << pid << ") still runs";
}

// The exposition parser itself refuses what node_exporter would.
TEST(GpuinitStatus, TheFormatCheckCatchesWhatItIsFor) {
    const char* bad[] = {
        "x 1\n",                                    // no HELP or TYPE
        "# HELP x h\n# TYPE x gauge\nx{a=\"1} 1\n", // unterminated value
        "# HELP x h\n# TYPE x gauge\nx 1\n# HELP y h\n# TYPE y gauge\ny 1\nx 2\n", // split
        "# HELP x h\n# TYPE x gauge\nx 1\nx 1\n",                                  // series twice
        "# HELP x h\n# TYPE x gauge\nx one\n",                                     // not a number
        "# HELP x h\n# TYPE x gauge\nx{a=\"\\t\"} 1\n",                            // a bad escape
    };
    for (const char* text : bad) {
        std::string output;
        int code = testing::run_in_child(
            [&] {
                parse_exposition(text);
                return ::testing::Test::HasFailure() ? 1 : 0;
            },
            &output);
        EXPECT_EQ(code, 1) << text;
    }
}

} // namespace gpuinit

namespace gpuinit {

namespace {

// A listener where the gpu-limit daemon's socket is (the registration
// protocol's SOCK_SEQPACKET); the probe only connects.
int listen_limit_socket(const TempDir& root) {
    ::mkdir((root / "run").c_str(), 0755);
    ::mkdir((root / "run/gpu-limit").c_str(), 0755);
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof(address.sun_path), "%s",
                  (root / "run/gpu-limit/daemon.sock").c_str());
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(::listen(fd, 4), 0);
    return fd;
}

} // namespace

TEST(GpuinitStatus, TheLimitDaemonUpIsOkAndEnabledButDownFails) {
    GPUINIT_REQUIRE_ROOT();
    FixtureMachine machine;
    int listener = listen_limit_socket(machine.root);
    StatusRun run = status(machine.scratch,
                           {"--root", machine.root.path(), "--prometheus", machine.prom(), "-v"});
    EXPECT_EQ(run.code, 0) << run.out << run.err;
    EXPECT_NE(run.out.find("limit    ok"), std::string::npos) << run.out;
    EXPECT_EQ(parse_exposition(read_all(machine.prom()))["gpuinit_limit_daemon_up"], 1);
    ::close(listener);

    // The socket is left, nobody listens: the daemon died.
    run = status(machine.scratch, {"--root", machine.root.path(), "--prometheus", machine.prom()});
    EXPECT_EQ(run.code, 3) << run.out << run.err;
    EXPECT_EQ(run.err.rfind("gpuinit status: limit: the gpu-limit daemon does not answer", 0), 0u)
        << run.err;
    EXPECT_EQ(parse_exposition(read_all(machine.prom()))["gpuinit_limit_daemon_up"], 0);
}

} // namespace gpuinit
