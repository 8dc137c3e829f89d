#include "gpuinit/persist/client.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/gpu_selector.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace gpuinit {

namespace {

// The daemon answers a set once the GPU's init has finished (as
// nvidia-persistenced, which opens synchronously, does), and waits at most
// 120 s for it: as long as `gpu-persist enable` waits.
constexpr int kRpcTimeoutMs = 150'000;

Result<UniqueFd> connect_to(const Sysroot& root, std::string_view rel) {
    std::string path = root.path(rel);
    sockaddr_un address{};
    if (path.size() >= sizeof(address.sun_path)) {
        return error(root.display(rel) + ": path too long for a unix socket; use a shorter --root",
                     ENAMETOOLONG);
    }
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.data(), path.size());
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
        return errno_error("socket");
    }
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        int code = errno;
        std::string hint = code == ENOENT || code == ECONNREFUSED ? ": is gpu-persist running?"
                           : code == EACCES                       ? ": permission denied"
                                                                  : "";
        return os_error(code, "cannot connect to " + root.display(rel) + hint);
    }
    return fd;
}

Status send_all(int fd, std::string_view data) {
    while (!data.empty()) {
        ssize_t sent = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno_error("send to gpu-persist");
        }
        data.remove_prefix(static_cast<size_t>(sent));
    }
    return {};
}

// Reads until EOF (or, with `reader`, one whole record), at most `limit`.
Result<std::string> receive(int fd, size_t limit, int timeout_ms, RpcRecordReader* reader) {
    std::string data;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
        pollfd waiting{fd, POLLIN, 0};
        int ready = left > 0 ? ::poll(&waiting, 1, static_cast<int>(left)) : 0;
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        if (ready <= 0) {
            return error("gpu-persist did not answer in time", ETIMEDOUT);
        }
        char buffer[4096];
        ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno_error("read gpu-persist's reply");
        }
        if (got == 0) {
            if (reader != nullptr) {
                return error("the daemon closed the connection without a reply", EPROTO);
            }
            return data;
        }
        if (reader != nullptr) {
            std::string_view chunk(buffer, static_cast<size_t>(got));
            reader->feed(chunk);
            if (reader->state() == RpcRecordReader::State::Record) {
                return reader->take_record();
            }
            if (reader->state() == RpcRecordReader::State::Error) {
                return error("malformed RPC reply", EPROTO);
            }
            continue;
        }
        data.append(buffer, static_cast<size_t>(got));
        if (data.size() > limit) {
            return error("gpu-persist's reply is too long", EMSGSIZE);
        }
    }
}

Result<RpcReply> rpc_call(const Sysroot& root, std::string_view call, bool is_get, uint32_t xid) {
    auto fd = connect_to(root, kPersistenceRpcSocket);
    if (!fd) {
        return fd.error();
    }
    if (auto sent = send_all(fd->get(), frame_rpc_record(call)); !sent) {
        return sent.error();
    }
    RpcRecordReader reader;
    auto record = receive(fd->get(), kMaxRpcRecord, kRpcTimeoutMs, &reader);
    if (!record) {
        return record.error();
    }
    return is_get ? decode_get_mode_reply(*record, xid) : decode_set_mode_reply(*record, xid);
}

uint32_t new_xid() {
    return static_cast<uint32_t>(::getpid()) ^
           static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

} // namespace

Result<ClientReply> persist_request(const Sysroot& root, const ControlRequest& request,
                                    int timeout_ms) {
    std::string socket = std::string(kPersistRunDir) + "/" + std::string(kPersistSocketName);
    auto fd = connect_to(root, socket);
    if (!fd) {
        if (fd.error().code == EACCES && !request.changes()) {
            std::string rel = std::string(kPersistRunDir) + "/status";
            auto text = root.read_file(rel, kMaxControlReply);
            if (!text) {
                return text.error();
            }
            auto reply = parse_control_reply(*text);
            if (!reply) {
                return reply.error();
            }
            // Left behind by a daemon that was killed: it is not running.
            if (root.is_host() && ::kill(reply->daemon.pid, 0) != 0 && errno == ESRCH) {
                return error(format("gpu-persist is not running (pid %d in %s is gone)",
                                    static_cast<int>(reply->daemon.pid), root.display(rel).c_str()),
                             ECONNREFUSED);
            }
            return ClientReply{std::move(*reply), true};
        }
        if (fd.error().code == EACCES) {
            return error("cannot connect to " + root.display(socket) +
                             ": changes need root or gpu-persist's --admin-group",
                         EACCES);
        }
        return fd.error();
    }
    if (auto sent = send_all(fd->get(), format_control_request(request)); !sent) {
        return sent.error();
    }
    auto text = receive(fd->get(), kMaxControlReply, timeout_ms, nullptr);
    if (!text) {
        return text.error();
    }
    auto reply = parse_control_reply(*text);
    if (!reply) {
        return reply.error();
    }
    return ClientReply{std::move(*reply), false};
}

Result<NvPciDevice> parse_nv_pci_device(std::string_view bdf) {
    auto selector = GpuSelector::parse(bdf);
    if (!selector || selector->kind() != GpuSelector::Kind::Bdf) {
        return error("not a PCI address: " + quote(bdf) + " (expected DOMAIN:BUS:DEVICE.FUNCTION)",
                     EINVAL);
    }
    const std::string& key = selector->key(); // dddd:bb:dd.f, domain may be longer
    size_t colon = key.rfind(':', key.size() - 6);
    NvPciDevice device;
    device.domain = static_cast<uint32_t>(parse_hex_digits(key.substr(0, colon)).value_or(0));
    device.bus = static_cast<uint32_t>(parse_hex_digits(key.substr(colon + 1, 2)).value_or(0));
    device.slot = static_cast<uint32_t>(parse_hex_digits(key.substr(colon + 4, 2)).value_or(0));
    device.function = static_cast<uint32_t>(parse_hex_digits(key.substr(colon + 7, 1)).value_or(0));
    return device;
}

Result<RpcReply> persistence_rpc_get(const Sysroot& root, const NvPciDevice& device) {
    uint32_t xid = new_xid();
    return rpc_call(root, encode_get_mode_call(xid, device), true, xid);
}

Result<RpcReply> persistence_rpc_set(const Sysroot& root, const NvPciDevice& device, bool enable) {
    uint32_t xid = new_xid();
    return rpc_call(root, encode_set_mode_call(xid, 1, device, enable), false, xid);
}

namespace {

constexpr int kResetRequestTimeoutMs = 10000;

bool held_by_daemon(const HeldGpu& held, const GpuIdentity& gpu) {
    return (!gpu.bdf.empty() && held.id.bdf == gpu.bdf) ||
           (!gpu.uuid.empty() && same_uuid(held.id.uuid, gpu.uuid)) ||
           (gpu.bdf.empty() && gpu.uuid.empty() && held.id.minor == gpu.minor);
}

Result<ControlRequest> request_for(ControlRequest::Kind kind, const GpuIdentity& gpu) {
    auto selector = GpuSelector::parse(gpu.bdf.empty() ? std::to_string(gpu.minor) : gpu.bdf);
    if (!selector) {
        return selector.error();
    }
    ControlRequest request;
    request.kind = kind;
    request.gpu = *selector;
    return request;
}

Status reply_status(const Result<ClientReply>& reply, const char* what, const GpuIdentity& gpu) {
    if (!reply) {
        Diagnostic failure = reply.error();
        failure.message = std::string("gpu-persist ") + what + " " +
                          (gpu.bdf.empty() ? std::to_string(gpu.minor) : gpu.bdf) + ": " +
                          failure.message;
        return failure;
    }
    if (reply->reply.code != 0) {
        return error(std::string("gpu-persist ") + what + " " +
                         (gpu.bdf.empty() ? std::to_string(gpu.minor) : gpu.bdf) + ": " +
                         reply->reply.message,
                     reply->reply.code);
    }
    return {};
}

} // namespace

Result<bool> persist_release_for_reset(const Sysroot& root, const GpuIdentity& gpu) {
    auto status = persist_request(root, ControlRequest{}, kResetRequestTimeoutMs);
    if (!status) {
        if (status.error().code == ECONNREFUSED || status.error().code == ENOENT) {
            return false;
        }
        return reply_status(status, "status before resetting", gpu).error();
    }
    bool held = false;
    for (const HeldGpu& entry : status->reply.gpus) {
        held = held || (held_by_daemon(entry, gpu) && entry.wanted);
    }
    if (!held) {
        return false;
    }
    auto request = request_for(ControlRequest::Kind::Disable, gpu);
    if (!request) {
        return request.error();
    }
    Status released =
        reply_status(persist_request(root, *request, kResetRequestTimeoutMs), "disable", gpu);
    if (!released) {
        return released.error();
    }
    return true;
}

Status persist_hold_after_reset(const Sysroot& root, const GpuIdentity& gpu) {
    auto request = request_for(ControlRequest::Kind::Enable, gpu);
    if (!request) {
        return request.error();
    }
    return reply_status(persist_request(root, *request, kResetRequestTimeoutMs), "enable", gpu);
}

} // namespace gpuinit
