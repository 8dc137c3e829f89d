// A listening unix socket bound relative to a directory fd (no symlink on
// the way is followed), with a budget of connections of its own and a
// bound per peer, so that one socket's clients never use up another's room.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/service/peer.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace gpuinit::service {

struct ListenOptions {
    int type = 0; // SOCK_STREAM or SOCK_SEQPACKET (0: SOCK_STREAM)
    mode_t mode = 0600;
    uid_t owner = 0;
    gid_t group = 0;
    int backlog = 16;
    size_t budget = 16;  // connections open at once
    size_t per_peer = 0; // at most this many per PeerKey; 0: no bound
    size_t reserved = 0; // of the budget, kept for the host's root
};

struct Admission {
    UniqueFd fd;
    Peer peer;
};

class Listener {
  public:
    // Binds `name` in `dir` (an old socket there is replaced, anything else
    // refused), gives it options.mode (through the umask at bind: never
    // wider for a moment) and its owner, and listens. Non-blocking.
    static Result<Listener> bind_at(const SafeDir& dir, std::string_view name,
                                    const ListenOptions& options);

    int fd() const { return fd_.get(); }
    // One waiting connection: nullopt when none waits. A connection over
    // the budget or its peer's bound is closed at once and skipped.
    // `proc_fd` as identify_peer's.
    std::optional<Admission> accept(int proc_fd);
    // A connection accept() gave has closed.
    void release(const Peer& peer);
    size_t open_connections() const { return open_; }
    size_t refused() const { return refused_; }

  private:
    UniqueFd fd_;
    ListenOptions options_;
    size_t open_ = 0;
    size_t open_unreserved_ = 0;
    size_t refused_ = 0;
    std::map<PeerKey, size_t> per_peer_;
};

// connect(2) to `name` in `dir`, relative to its fd as bind_at binds.
Result<UniqueFd> connect_at(const SafeDir& dir, std::string_view name, int type, bool nonblocking);

} // namespace gpuinit::service
