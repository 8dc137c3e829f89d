#include "gpuinit/service/listener.hpp"

#include "gpuinit/base/text.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

// Linux 6.16 (include/uapi/asm-generic/socket.h); the libc headers may lack
// it.
#ifdef SO_PASSRIGHTS
constexpr int kSoPassRights = SO_PASSRIGHTS;
#else
constexpr int kSoPassRights = 83;
#endif

namespace gpuinit::service {

namespace {

// bind() and connect() take a path: run `call` with the working directory
// at `dir` (so a leaf name, and no symlink on the way, is used), then go
// back where the process was.
template <typename Call>
Result<int> in_directory(const SafeDir& dir, Call call) {
    UniqueFd here(::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!here.valid()) {
        return errno_error("open the working directory");
    }
    if (::fchdir(dir.fd()) != 0) {
        return errno_error("fchdir " + dir.path());
    }
    int rc = call();
    int code = errno;
    if (::fchdir(here.get()) != 0 && ::chdir("/") != 0) {
        return errno_error("chdir /");
    }
    errno = code;
    return rc;
}

Result<sockaddr_un> leaf_address(const SafeDir& dir, std::string_view name) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (name.empty() || name.size() >= sizeof address.sun_path ||
        name.find('/') != std::string_view::npos) {
        return error("socket name " + quote(name) + " in " + dir.path() +
                         " is not one leaf of at most " +
                         std::to_string(sizeof address.sun_path - 1) + " bytes",
                     EINVAL);
    }
    std::memcpy(address.sun_path, name.data(), name.size());
    return address;
}

} // namespace

Result<Listener> Listener::bind_at(const SafeDir& dir, std::string_view name,
                                   const ListenOptions& options) {
    auto address = leaf_address(dir, name);
    if (!address) {
        return address.error();
    }
    std::string leaf(name);
    auto existing = dir.inspect(leaf);
    if (existing && existing->exists) {
        if (!S_ISSOCK(existing->st.st_mode)) {
            return error(dir.path_of(leaf) + " exists and is not a socket: remove it", EEXIST);
        }
        // A socket left by a daemon that died: the caller holds the pid lock.
        if (auto removed = dir.unlink(leaf); !removed) {
            return removed.error();
        }
    }
    int type = options.type != 0 ? options.type : SOCK_STREAM;
    Listener listener;
    listener.options_ = options;
    listener.fd_.reset(::socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!listener.fd_.valid()) {
        return errno_error("socket");
    }
    // No descriptors: none of these protocols takes one, and one a peer
    // sends anyway is closed by the kernel in our recv (or with the
    // connection), on the daemon's one thread. Its last close can block for
    // as long as the peer likes (a TCP socket with SO_LINGER and unsent data
    // nobody reads; a file on a FUSE mount the peer serves): every socket
    // of the daemon with it. SO_PASSRIGHTS 0 makes the kernel refuse such a
    // send (EPERM); accepted connections take it from the listener. Older
    // kernels than 6.16 lack it (ENOPROTOOPT).
    int rights = 0;
    if (::setsockopt(listener.fd_.get(), SOL_SOCKET, kSoPassRights, &rights, sizeof rights) != 0 &&
        errno != ENOPROTOOPT) {
        return errno_error("setsockopt SO_PASSRIGHTS");
    }
    // The umask gives the mode at bind: never wider, not even for a moment.
    auto bound = in_directory(dir, [&] {
        mode_t old_mask = ::umask(0777 & ~options.mode);
        int rc = ::bind(listener.fd_.get(), reinterpret_cast<const sockaddr*>(&*address),
                        sizeof *address);
        int code = errno;
        ::umask(old_mask);
        errno = code;
        return rc;
    });
    if (!bound) {
        return bound.error();
    }
    if (*bound != 0) {
        return errno_error("cannot bind " + dir.path_of(leaf));
    }
    if (auto owned = dir.chown(leaf, options.owner, options.group); !owned) {
        return owned.error();
    }
    if (::listen(listener.fd_.get(), options.backlog) != 0) {
        return errno_error("listen on " + dir.path_of(leaf));
    }
    return listener;
}

std::optional<Admission> Listener::accept(int proc_fd) {
    while (true) {
        UniqueFd fd(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!fd.valid()) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            return std::nullopt; // EAGAIN; or EMFILE and the like: tried again on the next event
        }
        if (open_ >= options_.budget) {
            ++refused_;
            continue; // closed: this socket has enough
        }
        Peer peer = identify_peer(fd.get(), proc_fd);
        bool reserved = peer.host_root();
        if (!reserved) {
            if (open_unreserved_ + options_.reserved >= options_.budget) {
                ++refused_;
                continue; // the rest is the host root's
            }
            if (options_.per_peer != 0) {
                auto it = per_peer_.find(peer.key());
                if (it != per_peer_.end() && it->second >= options_.per_peer) {
                    ++refused_;
                    continue; // that peer has enough
                }
            }
            ++open_unreserved_;
            if (options_.per_peer != 0) {
                ++per_peer_[peer.key()];
            }
        }
        ++open_;
        return Admission{std::move(fd), std::move(peer)};
    }
}

void Listener::release(const Peer& peer) {
    if (open_ > 0) {
        --open_;
    }
    if (peer.host_root()) {
        return;
    }
    if (open_unreserved_ > 0) {
        --open_unreserved_;
    }
    if (options_.per_peer != 0) {
        auto it = per_peer_.find(peer.key());
        if (it != per_peer_.end() && --it->second == 0) {
            per_peer_.erase(it);
        }
    }
}

Result<UniqueFd> connect_at(const SafeDir& dir, std::string_view name, int type, bool nonblocking) {
    auto address = leaf_address(dir, name);
    if (!address) {
        return address.error();
    }
    UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0));
    if (!fd.valid()) {
        return errno_error("socket");
    }
    auto connected = in_directory(dir, [&] {
        return ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address);
    });
    if (!connected) {
        return connected.error();
    }
    // A full backlog (EAGAIN) or a connect under way is a listener too.
    if (*connected != 0 && errno != EAGAIN && errno != EINPROGRESS) {
        return errno_error("cannot connect to " + dir.path_of(std::string(name)));
    }
    return fd;
}

} // namespace gpuinit::service
