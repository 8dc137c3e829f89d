// gpu-persist's connections: admission (each socket's room, a bound per
// peer), the deadline each gets at connect, reading and writing, and the
// control socket's one-line requests.
#include "daemon_internal.hpp"
#include "gpuinit/base/text.hpp"

#include <algorithm>
#include <cerrno>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace gpuinit::persist_daemon {

// To the checks a container's root is a user like any other: the uid the
// kernel shows for one it cannot map.
uid_t Daemon::acting_uid(const service::Peer& peer) {
    uid_t uid = peer.credentials.uid;
    return uid == 0 && !peer.host ? kOverflowUid : uid;
}

Connection* Daemon::find(uint64_t id) {
    auto it = std::find_if(connections_.begin(), connections_.end(),
                           [&](const Connection& c) { return c.id == id; });
    return it == connections_.end() ? nullptr : &*it;
}

void Daemon::on_accept(service::Listener& listener, bool rpc) {
    while (auto admission = listener.accept(proc_.get())) {
        Connection& connection = connections_.emplace_back();
        connection.id = next_id_++;
        connection.fd = std::move(admission->fd);
        connection.listener = &listener;
        connection.rpc = rpc;
        connection.peer = std::move(admission->peer);
        // Fixed here: what the client sends later does not move it.
        uint64_t id = connection.id;
        loop_.set_deadline(id, Clock::now() + kRequestDeadline, [this, id] { expired(id); });
        watch(connection, EPOLLIN | EPOLLRDHUP);
    }
}

void Daemon::watch(Connection& connection, uint32_t events) {
    if (events == connection.events) {
        return;
    }
    uint64_t id = connection.id;
    if (events == 0) {
        loop_.forget(connection.fd.get());
    } else if (connection.events == 0) {
        (void)loop_.watch(connection.fd.get(), events,
                          [this, id](uint32_t happened) { on_connection(id, happened); });
    } else {
        (void)loop_.modify(connection.fd.get(), events);
    }
    connection.events = events;
}

// The daemon's own wait (a GPU initializing for this client's change) is
// not the client's: it gets its time from when its request was complete.
void Daemon::settle_deadline(Connection& connection) {
    uint64_t id = connection.id;
    loop_.set_deadline(id, Clock::now() + kSettleDeadline, [this, id] { expired(id); });
}

void Daemon::expired(uint64_t id) {
    Connection* connection = find(id);
    if (connection == nullptr) {
        return;
    }
    if (connection->awaiting_settle) {
        connection->awaiting_settle = false;
        connection->out = format_control_reply(
            snapshot(ETIMEDOUT, "the driver is still initializing a GPU; ask again later"));
        connection->close_after_write = true;
        // Its last chance to take the reply.
        loop_.set_deadline(id, Clock::now() + kRequestDeadline, [this, id] { drop(id); });
        flush(*connection);
        return;
    }
    drop(id);
}

ControlReply Daemon::snapshot(int code, std::string message) const {
    ControlReply reply;
    reply.code = code;
    reply.message = std::move(message);
    reply.daemon.pid = ::getpid();
    reply.daemon.uid = ::geteuid();
    reply.daemon.runs_as_root = ::geteuid() == 0;
    reply.daemon.compat = compat_state_;
    reply.daemon.hotplug = !monitor_                                  ? "off"
                           : monitor_->source() == UeventSource::Udev ? "udev"
                                                                      : "kernel";
    reply.gpus = table_.gpus();
    return reply;
}

void Daemon::handle_control_line(Connection& connection, std::string_view line) {
    auto request = parse_control_request(line);
    PeerCredentials acting = connection.peer.credentials;
    acting.uid = acting_uid(connection.peer);
    if (!request) {
        connection.out = format_control_reply(snapshot(EINVAL, request.error().message));
    } else if (request->changes() && !peer_may_change(acting, admin_gid_)) {
        log_.warning(format("refused %s from uid %u (pid %d%s): changes need root%s",
                            std::string(trim(line)).c_str(),
                            static_cast<unsigned>(connection.peer.credentials.uid),
                            static_cast<int>(connection.peer.credentials.pid),
                            connection.peer.host ? "" : ", outside the host's namespaces",
                            admin_gid_ ? " or the admin group" : ""));
        connection.out = format_control_reply(
            snapshot(EPERM, std::string("permission denied: changes need root") +
                                (admin_gid_ ? " or the group " + options_.admin_group
                                            : std::string(" (the daemon has no --admin-group)"))));
    } else if (request->changes()) {
        auto done = change(*request);
        if (!done) {
            connection.out =
                format_control_reply(snapshot(done.error().code, done.error().message));
        } else {
            log_.info(format("%s by uid %u", format_control_request(*request).c_str(),
                             static_cast<unsigned>(connection.peer.credentials.uid)));
            // Answer once the GPUs it opened have initialized.
            connection.awaiting_settle = true;
            settle_deadline(connection);
            watch(connection, 0);
            return;
        }
    } else {
        connection.out = format_control_reply(snapshot(0, {}));
    }
    connection.close_after_write = true;
    flush(connection);
}

void Daemon::flush(Connection& connection) {
    while (!connection.out.empty()) {
        ssize_t sent =
            ::send(connection.fd.get(), connection.out.data(), connection.out.size(), MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EAGAIN) {
                break;
            }
            if (errno == EINTR) {
                continue;
            }
            drop(connection.id);
            return;
        }
        connection.out.erase(0, static_cast<size_t>(sent));
    }
    if (connection.out.empty() && connection.close_after_write) {
        drop(connection.id);
        return;
    }
    bool want_write = !connection.out.empty();
    // An RPC connection stops being read while a call waits (its next
    // calls wait behind it) and once its client half-closed; a control
    // connection waiting for its change is not read either.
    bool reading = !connection.awaiting_settle &&
                   (!connection.rpc || (!connection.pending && !connection.peer_closed));
    watch(connection, (reading ? EPOLLIN | EPOLLRDHUP : 0U) | (want_write ? EPOLLOUT : 0U));
}

void Daemon::drop(uint64_t id) {
    auto it = std::find_if(connections_.begin(), connections_.end(),
                           [&](const Connection& c) { return c.id == id; });
    if (it == connections_.end()) {
        return;
    }
    loop_.forget(it->fd.get());
    loop_.clear_deadline(id);
    it->listener->release(it->peer);
    connections_.erase(it);
}

void Daemon::on_connection(uint64_t id, uint32_t events) {
    Connection* found = find(id);
    if (found == nullptr) {
        return;
    }
    Connection& connection = *found;
    if ((events & EPOLLOUT) != 0) {
        flush(connection);
        if (find(id) == nullptr) {
            return;
        }
    }
    if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) == 0) {
        return;
    }
    if (connection.rpc && connection.pending) {
        // Hung up while its call waits: epoll reports that on every wait,
        // and nothing is read before the call is answered. Unwatched until
        // then (flush() adds it back); the call is still carried out, as
        // nvidia-persistenced finishes a call whose client left.
        watch(connection, 0);
        return;
    }
    char buffer[1024];
    ssize_t got = ::recv(connection.fd.get(), buffer, sizeof(buffer), 0);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;
    }
    if (got == 0 && connection.rpc) {
        // As libtirpc: the calls that came before the EOF are answered.
        connection.peer_closed = true;
        serve_rpc(id);
        return;
    }
    if (got <= 0) {
        // EOF: a half-closed control request still gets an answer.
        if (!connection.rpc && !connection.in.empty() && connection.out.empty()) {
            connection.out =
                format_control_reply(snapshot(EINVAL, "incomplete request: end it with a newline"));
            connection.close_after_write = true;
            flush(connection);
            return;
        }
        drop(id);
        return;
    }
    std::string_view data(buffer, static_cast<size_t>(got));
    if (connection.rpc) {
        connection.in.append(data);
        serve_rpc(id);
        return;
    }
    if (connection.close_after_write) {
        return; // one request per connection; the rest is ignored
    }
    connection.in.append(data);
    size_t newline = connection.in.find('\n');
    if (newline == std::string::npos) {
        if (connection.in.size() > kMaxControlRequest) {
            connection.out = format_control_reply(snapshot(EMSGSIZE, "request too long"));
            connection.close_after_write = true;
            flush(connection);
        }
        return;
    }
    std::string line = connection.in.substr(0, newline);
    handle_control_line(connection, line);
}

} // namespace gpuinit::persist_daemon
