#include "rpcgen_support.hpp"

#include "machine_fixture.hpp"

#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace gpuinit::testing {

int connect_unix(const std::string& path) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMarkerXid = 0x7e57;

// Waits up to 10 s for something to answer on `path`.
bool wait_for_socket(const std::string& path, const Process& process) {
    for (int i = 0; i < 1000 && process.alive(); ++i) {
        int fd = connect_unix(path);
        if (fd >= 0) {
            ::close(fd);
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

std::string word(uint32_t value) {
    std::string bytes;
    for (int shift = 24; shift >= 0; shift -= 8) {
        bytes += static_cast<char>(value >> shift);
    }
    return bytes;
}

uint32_t load(const std::string& bytes, size_t at) {
    uint32_t value = 0;
    for (size_t i = 0; i < 4; ++i) {
        value = value << 8 | static_cast<unsigned char>(bytes[at + i]);
    }
    return value;
}

std::string real_path(const std::string& path) {
    char resolved[PATH_MAX];
    return ::realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
}

} // namespace

nvpd_pci_device pci(int bus, int function) {
    return nvpd_pci_device{0, bus, 0, function};
}

Process::~Process() {
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
    }
}

void Process::start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    const std::string& log) {
    pid_ = ::fork();
    if (pid_ != 0) {
        return;
    }
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out >= 0) {
        ::dup2(out, 1);
        ::dup2(out, 2);
    }
    for (const std::string& entry : env) {
        ::putenv(const_cast<char*>(entry.c_str()));
    }
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const std::string& arg : argv) {
        args.push_back(const_cast<char*>(arg.c_str()));
    }
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
}

int Process::stop() {
    if (pid_ <= 0) {
        return -1;
    }
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 500; ++i) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
}

bool Process::alive() const {
    return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0;
}

PersistDaemon::PersistDaemon() : socket_(dir_ / "run/nvidia-persistenced/socket") {}

std::string PersistDaemon::start() {
    if (!write_fixture(workstation(5), dir_.path())) {
        return "cannot write the fixture";
    }
    for (const FixtureGpu& gpu : {kHeld, kNoNode, kInitFails, kSlowFail, kSlow}) {
        if (gpu.node == nullptr) {
            continue;
        }
        std::string node = dir_ / ("dev/nvidia" + std::to_string(gpu.minor));
        int fd = ::open(node.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0660);
        if (fd < 0 || ::write(fd, gpu.node, std::strlen(gpu.node)) < 0) {
            return "cannot write " + node;
        }
        ::close(fd);
    }
    // Other users reach the socket (mkdtemp made the directory 0700).
    ::chmod(dir_.path().c_str(), 0755);
    process_.start(
        {GPU_PERSIST_BIN, "--root", dir_.path(), "--no-hotplug", "-v"},
        {"LD_PRELOAD=" FAKE_GPU_NODE_LIBRARY, "GPUINIT_FAKE_GPU_DEV=" + real_path(dir_ / "dev")},
        logs_ / "daemon.log");
    if (!wait_for_socket(socket_, process_)) {
        return "gpu-persist does not answer on " + socket_ + ":\n" + log();
    }
    return {};
}

std::string PersistDaemon::log() const {
    std::string text;
    int fd = ::open((logs_ / "daemon.log").c_str(), O_RDONLY | O_CLOEXEC);
    char buffer[4096];
    ssize_t got = 0;
    while (fd >= 0 && (got = ::read(fd, buffer, sizeof(buffer))) > 0) {
        text.append(buffer, static_cast<size_t>(got));
    }
    if (fd >= 0) {
        ::close(fd);
    }
    return text;
}

std::string ReferenceServer::start() {
    socket_ = dir_ / "socket";
    ::chmod(dir_.path().c_str(), 0755);
    process_.start({NVPD_REFERENCE_SERVER, socket_}, {}, dir_ / "log");
    if (!wait_for_socket(socket_, process_)) {
        return "the reference server does not answer on " + socket_;
    }
    // svcunix_create() binds with the umask: let every user call, as
    // nvidia-persistenced (umask 0) does.
    ::chmod(socket_.c_str(), 0777);
    return {};
}

RpcgenClient::RpcgenClient(const std::string& socket, unsigned long version, bool auth_sys) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socket.c_str(), sizeof(address.sun_path) - 1);
    int fd = RPC_ANYSOCK;
    client_ = clntunix_create(&address, NVPD_PERSISTENCE_PROGRAM, version, &fd, 0, 0);
    if (client_ == nullptr) {
        error_ = clnt_spcreateerror("clntunix_create");
        return;
    }
    if (auth_sys) {
        auth_destroy(client_->cl_auth);
        client_->cl_auth = authunix_create_default();
    }
}

RpcgenClient::~RpcgenClient() {
    if (client_ != nullptr) {
        if (client_->cl_auth != nullptr) {
            auth_destroy(client_->cl_auth);
            client_->cl_auth = nullptr;
        }
        clnt_destroy(client_);
    }
}

std::string RpcgenClient::error() const {
    return error_;
}

int RpcgenClient::set(int bus, int mode, int function) {
    if (client_ == nullptr) {
        return -1;
    }
    nvpd_set_mode_args args{pci(bus, function), static_cast<nvpd_persistence_mode>(mode)};
    nvpd_status* status = nvpd_set_persistence_mode_1(&args, client_);
    if (status == nullptr) {
        error_ = clnt_sperror(client_, "SetPersistenceMode");
        return -1;
    }
    return *status;
}

int RpcgenClient::set_only(int bus, int mode, int function) {
    if (client_ == nullptr) {
        return -1;
    }
    nvpd_set_mode_args args{pci(bus, function), static_cast<nvpd_persistence_mode>(mode)};
    nvpd_status* status = nvpd_set_persistence_mode_only_2(&args, client_);
    if (status == nullptr) {
        error_ = clnt_sperror(client_, "SetPersistenceModeOnly");
        return -1;
    }
    return *status;
}

int RpcgenClient::set_numa(int bus, int numa, int function) {
    if (client_ == nullptr) {
        return -1;
    }
    nvpd_set_numa_args args{pci(bus, function), static_cast<nvpd_numa_status>(numa)};
    nvpd_status* status = nvpd_set_numa_status_2(&args, client_);
    if (status == nullptr) {
        error_ = clnt_sperror(client_, "SetNumaStatus");
        return -1;
    }
    return *status;
}

RpcgenClient::Mode RpcgenClient::get(int bus, int function) {
    if (client_ == nullptr) {
        return {};
    }
    nvpd_get_mode_args args{pci(bus, function)};
    nvpd_get_mode_result* result = nvpd_get_persistence_mode_1(&args, client_);
    if (result == nullptr) {
        error_ = clnt_sperror(client_, "GetPersistenceMode");
        return {};
    }
    Mode mode;
    mode.status = result->status;
    if (result->status == NVPD_STATUS_SUCCESS) {
        mode.mode = result->nvpd_get_mode_result_u.mode;
    }
    return mode;
}

Exchange exchange_with_marker(const std::string& socket, const std::string& data) {
    Exchange result;
    int fd = connect_unix(socket);
    if (fd < 0) {
        result.bytes = "cannot connect to " + socket;
        return result;
    }
    std::string marker = word(kMarkerXid) + word(0) + word(2) + word(NVPD_PERSISTENCE_PROGRAM) +
                         word(1) + word(0) + word(0) + word(0) + word(0) + word(0);
    std::string sent = data + word(0x80000000u | static_cast<uint32_t>(marker.size())) + marker;
    (void)::send(fd, sent.data(), sent.size(), MSG_NOSIGNAL);
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
        // Whole records so far: stop at the marker's reply.
        bool marker_seen = false;
        for (size_t at = 0; at + 4 <= result.bytes.size();) {
            size_t length = load(result.bytes, at) & 0x7fffffffu;
            if (at + 4 + length > result.bytes.size()) {
                break;
            }
            marker_seen = marker_seen || (length >= 4 && load(result.bytes, at + 4) == kMarkerXid);
            at += 4 + length;
        }
        if (marker_seen) {
            break;
        }
        pollfd waiting{fd, POLLIN, 0};
        if (::poll(&waiting, 1, 100) <= 0) {
            continue;
        }
        char buffer[4096];
        ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
        if (got <= 0) {
            result.closed = true;
            break;
        }
        result.bytes.append(buffer, static_cast<size_t>(got));
    }
    ::close(fd);
    return result;
}

std::vector<int> as_nobody(const std::function<std::vector<int>()>& body) {
    int pipe[2];
    if (::pipe(pipe) != 0) {
        return {};
    }
    pid_t child = ::fork();
    if (child == 0) {
        ::close(pipe[0]);
        if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
            ::setresuid(65534, 65534, 65534) != 0) {
            ::_exit(1);
        }
        std::vector<int> values = body();
        ssize_t size = static_cast<ssize_t>(values.size() * sizeof(int));
        ::_exit(::write(pipe[1], values.data(), values.size() * sizeof(int)) == size ? 0 : 1);
    }
    ::close(pipe[1]);
    std::vector<int> values;
    int value = 0;
    while (::read(pipe[0], &value, sizeof(value)) == static_cast<ssize_t>(sizeof(value))) {
        values.push_back(value);
    }
    ::close(pipe[0]);
    ::waitpid(child, nullptr, 0);
    return values;
}

} // namespace gpuinit::testing
