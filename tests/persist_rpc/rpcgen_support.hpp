// What the rpcgen tests share: a gpu-persist daemon on a fixture whose GPUs
// fake_gpu_node.c makes openable, nvidia-persistenced's reference server,
// the rpcgen client, and raw exchanges for the RPC layer.
#pragma once

#include "nvpd_protocol.h"
#include "temp_dir.hpp"

#include <functional>
#include <rpc/rpc.h>
#include <string>
#include <sys/types.h>
#include <vector>

namespace gpuinit::testing {

// The fixture's GPUs: workstation(5), slot by slot, and what each node does.
struct FixtureGpu {
    unsigned minor;
    int bus;
    const char* node; // fake_gpu_node.c's behaviour; nullptr: no node at all
};
inline constexpr FixtureGpu kHeld{0, 0x17, "ok"};                // held
inline constexpr FixtureGpu kNoNode{1, 0x27, nullptr};           // cannot be held: no node
inline constexpr FixtureGpu kInitFails{2, 0x37, "fail"};         // cannot be held: init fails
inline constexpr FixtureGpu kSlowFail{3, 0x47, "slowfail 1000"}; // fails after 1 s
inline constexpr FixtureGpu kSlow{4, 0x57, "slow 700"};          // held after 0.7 s
inline constexpr int kUnknownBus = 0x99;                         // no GPU there

nvpd_pci_device pci(int bus, int function = 0);

// A process that is killed when the object goes away.
class Process {
  public:
    Process() = default;
    Process(const Process&) = delete;
    Process& operator=(const Process&) = delete;
    ~Process();
    // Starts `argv` with `env` added; stdout and stderr go to `log`.
    void start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const std::string& log);
    // SIGTERM; the exit status, or -1 when it is not gone within 5 s.
    int stop();
    bool alive() const;

  private:
    pid_t pid_ = -1;
};

// gpu-persist on a workstation(5) fixture with the GPUs above.
class PersistDaemon {
  public:
    PersistDaemon();
    // Empty when it runs and answers on its compat socket.
    std::string start();
    const std::string& socket() const { return socket_; }
    std::string log() const;
    const TempDir& dir() const { return dir_; }

  private:
    TempDir dir_;
    TempDir logs_;
    std::string socket_;
    Process process_;
};

// reference_server.c on a socket of its own.
class ReferenceServer {
  public:
    // Empty when it answers.
    std::string start();
    const std::string& socket() const { return socket_; }

  private:
    TempDir dir_;
    std::string socket_;
    Process process_;
};

// An rpcgen client (clntunix_create) of one version, AUTH_NONE as
// clntunix_create makes it, or AUTH_SYS.
class RpcgenClient {
  public:
    RpcgenClient(const std::string& socket, unsigned long version, bool auth_sys = false);
    ~RpcgenClient();
    RpcgenClient(const RpcgenClient&) = delete;
    RpcgenClient& operator=(const RpcgenClient&) = delete;
    CLIENT* get() const { return client_; }
    std::string error() const; // clnt_spcreateerror or clnt_sperror, when a call failed

    // The status, or -1 with the RPC error in error().
    int set(int bus, int mode, int function = 0);        // v1 SetPersistenceMode
    int set_only(int bus, int mode, int function = 0);   // v2 SetPersistenceModeOnly
    int set_numa(int bus, int status, int function = 0); // v2 SetNumaStatus
    // The status and, with success, the mode (v1 GetPersistenceMode).
    struct Mode {
        int status = -1;
        int mode = -1;
    };
    Mode get(int bus, int function = 0);

  private:
    CLIENT* client_ = nullptr;
    std::string error_;
};

// Sends `data`, then a NULL call (xid 0x7e57) as a marker, and reads until
// the marker's reply or EOF: the bytes the server answered, and whether it
// closed the connection. No timing involved.
struct Exchange {
    std::string bytes;
    bool closed = false;
    bool operator==(const Exchange&) const = default;
};
Exchange exchange_with_marker(const std::string& socket, const std::string& data);

// Runs `body` in a child as uid and gid 65534 without groups: what it
// returned, or nothing when the child could not drop to that user.
// A connected AF_UNIX stream socket to `path`, or -1.
int connect_unix(const std::string& path);

std::vector<int> as_nobody(const std::function<std::vector<int>()>& body);

} // namespace gpuinit::testing
