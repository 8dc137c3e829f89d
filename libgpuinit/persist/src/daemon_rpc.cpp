// nvidia-smi's persistence RPC on the compatibility socket.
#include "daemon_internal.hpp"
#include "gpuinit/base/text.hpp"

#include <algorithm>

namespace gpuinit::persist_daemon {

// nvidia-persistenced's table is matched by domain, bus and slot.
const HeldGpu* Daemon::rpc_gpu(const NvPciDevice& device) const {
    for (const HeldGpu& gpu : table_.gpus()) {
        if (rpc_device_matches(device, gpu.id.bdf)) {
            return &gpu;
        }
    }
    return nullptr;
}

// nvidia-smi's persistence RPC, answered as nvidia-persistenced does
// (NVIDIA/nvidia-persistenced 595.71.05, commit 410f354: command_server.c
// and nvidia-persistenced.c decide each answer, see plan_rpc_call() in
// rpc.cpp; nvpd_rpc_server.c and libtirpc the transport, see
// read_rpc_record()). svc_run() answers one call after the other: a call
// that waits for its GPU holds back the calls behind it on its connection.
void Daemon::serve_rpc(uint64_t id) {
    Connection* found = find(id);
    if (found == nullptr) {
        return;
    }
    Connection& connection = *found;
    while (!connection.close_after_write) {
        if (connection.pending) {
            if (!answer_rpc(connection)) {
                // The GPU's init decides the answer: as long as the control
                // socket waits for one, counted from the call.
                if (!connection.pending->waited) {
                    connection.pending->waited = true;
                    settle_deadline(connection);
                }
                break;
            }
            continue;
        }
        size_t used = connection.reader.feed(connection.in);
        connection.in.erase(0, used);
        if (connection.reader.state() == RpcRecordReader::State::Error) {
            connection.close_after_write = true;
            break;
        }
        if (connection.reader.state() != RpcRecordReader::State::Record) {
            break;
        }
        RpcIncoming incoming = read_rpc_record(connection.reader.take_record());
        switch (incoming.kind) {
        case RpcIncoming::Kind::Close:
            connection.close_after_write = true;
            break;
        case RpcIncoming::Kind::Reply:
            // Calls do not move the deadline set at connect: a client that
            // keeps calling holds its place no longer than one that idles.
            connection.out += frame_rpc_record(incoming.reply);
            break;
        case RpcIncoming::Kind::Call:
            connection.pending = PendingRpc{std::move(incoming.call)};
            break;
        }
        if (connection.out.size() > kMaxPendingOutput) {
            drop(id); // it sends and never reads
            return;
        }
    }
    if (connection.peer_closed && !connection.pending) {
        connection.close_after_write = true;
    }
    flush(connection);
}

// Takes the pending call as far as it goes: false while it waits for its
// GPU, true once answered.
bool Daemon::answer_rpc(Connection& connection) {
    PendingRpc& pending = *connection.pending;
    const RpcCall& call = pending.call;
    while (true) {
        const HeldGpu* gpu = rpc_gpu(call.device);
        std::optional<RpcGpu> view;
        if (gpu != nullptr) {
            view = RpcGpu{gpu->state == HoldState::Held, gpu->state == HoldState::Opening,
                          gpu->wanted};
        }
        uid_t uid = connection.peer.credentials.uid == kUnknownRpcPeer
                        ? kUnknownRpcPeer
                        : acting_uid(connection.peer);
        RpcStep step = plan_rpc_call(call, uid, view, pending.applied);
        if (step.kind == RpcStep::Kind::Answer && step.status == NvPdStatus::DeviceNotFound &&
            call.procedure != RpcProcedure::GetPersistenceMode && !pending.rescanned) {
            // Only root gets this far. Bound since the last event we heard
            // of (hotplug off or lost): look again, as a control request does.
            pending.rescanned = true;
            rescan();
            continue;
        }
        switch (step.kind) {
        case RpcStep::Kind::Wait:
            return false;
        case RpcStep::Kind::Answer:
            connection.out += frame_rpc_record(encode_rpc_answer(call, step.status, step.enabled));
            if (pending.waited) {
                // The wait was the GPU's: the client gets its time back.
                uint64_t id = connection.id;
                loop_.set_deadline(id, Clock::now() + kRequestDeadline,
                                   [this, id] { expired(id); });
            }
            connection.pending.reset();
            return true;
        case RpcStep::Kind::Enable:
        case RpcStep::Kind::Disable: {
            bool enable = step.kind == RpcStep::Kind::Enable;
            std::string bdf = gpu->id.bdf; // `gpu` does not outlive the change
            ControlRequest request;
            request.kind = enable ? ControlRequest::Kind::Enable : ControlRequest::Kind::Disable;
            auto selector = GpuSelector::parse(bdf);
            Status done = selector ? Status() : Status(selector.error());
            if (selector) {
                request.gpu = std::move(*selector);
                if (auto changed = change(request); !changed) {
                    done = changed.error();
                }
            }
            pending.applied = true;
            if (!done) {
                log_.error("nvidia-smi's persistence mode " + std::string(enable ? "on" : "off") +
                           " for " + bdf + ": " + done.error().text());
                connection.out += frame_rpc_record(encode_rpc_answer(call, NvPdStatus::Unknown));
                connection.pending.reset();
                return true;
            }
            log_.info(format("nvidia-smi (uid 0, pid %d) set persistence mode %s for %s",
                             static_cast<int>(connection.peer.credentials.pid),
                             enable ? "on" : "off", bdf.c_str()));
            continue;
        }
        }
    }
}

} // namespace gpuinit::persist_daemon
