// The client side of gpu-persist: `gpu-persist status|enable|disable`, and
// a persistence RPC client that talks to the compat socket as nvidia-smi does.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/persist/control.hpp"
#include "gpuinit/persist/rpc.hpp"

namespace gpuinit {

struct ClientReply {
    ControlReply reply;
    // True when the daemon's socket was not ours to use (a user outside the
    // admin group) and the status came from the status file it publishes.
    bool from_status_file = false;
};

// Sends `request` and reads the reply (waiting at most `timeout_ms`). A
// status request that may not connect reads <root>/run/gpu-persist/status.
// Errors: ECONNREFUSED/ENOENT (the daemon is not running), EACCES.
Result<ClientReply> persist_request(const Sysroot& root, const ControlRequest& request,
                                    int timeout_ms);

// Around a GPU reset (gpu-mig apply --reset-if-needed): the daemon lets
// `gpu` go if it holds it (true), and is asked to take it back afterwards.
// No daemon running: false. A GPU the admin disabled stays disabled.
Result<bool> persist_release_for_reset(const Sysroot& root, const GpuIdentity& gpu);
Status persist_hold_after_reset(const Sysroot& root, const GpuIdentity& gpu);

// One persistence RPC call on <root>/run/nvidia-persistenced/socket.
Result<RpcReply> persistence_rpc_get(const Sysroot& root, const NvPciDevice& device);
Result<RpcReply> persistence_rpc_set(const Sysroot& root, const NvPciDevice& device, bool enable);

// "10000:00:01.0" -> NvPciDevice.
Result<NvPciDevice> parse_nv_pci_device(std::string_view bdf);

} // namespace gpuinit
