// gpu-persist's decisions, without I/O: which GPUs it knows, what state each
// is in, and what to do when something happens. Events go in (a GPU found or
// gone, an open finished, a hangup, an admin's enable/disable), actions come
// out (open this minor, close that fd, save the admin's choices). The daemon
// carries the actions out and feeds the results back as events.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/host/gpu_selector.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

enum class HoldState {
    Opening,        // opened without blocking; the driver is initializing it
    Held,           // initialized and held open
    Failed,         // its open or init failed; retried only on enable
    WaitingForNode, // bound, but /dev/nvidiaN is not there yet (udev is making it)
    Disabled,       // the admin asked not to hold it
    Lost,           // the driver reported it lost (POLLHUP): released
    Unbinding,      // the kernel unbinds or removes it: released so that can finish
};

// How often the held GPUs are checked while any is held. The driver reports
// a lost GPU (POLLHUP) only to a poll of its file: it wakes nobody for it
// (open-gpu-kernel-modules kernel-open/nvidia/nv.c nvidia_poll: no wait queue
// for an O_NONBLOCK file, and only RM events wake one). And an unbind or
// removal sends its uevent only after the driver's remove returned, which
// waits while the GPU is held (nv-pci.c nv_pci_remove). So a lost GPU is
// released, and a waiting removal goes on, at most this long after it
// began; an idle daemon wakes 60 s / this many times a minute.
inline constexpr std::chrono::seconds kHeldCheckInterval{30};
static_assert(kHeldCheckInterval <= std::chrono::seconds(30), "noticed within 30 s");
static_assert(std::chrono::seconds(60) / kHeldCheckInterval <= 2, "2 wakeups a minute at most");

const char* hold_state_name(HoldState state);

struct HeldGpu {
    GpuIdentity id;
    bool wanted = true; // the admin's choice; false after disable
    HoldState state = HoldState::Opening;
    int error_code = 0;
    std::string error; // why it is Failed, Lost or WaitingForNode
};

// GPUs the admin wants held that are not: failed, lost, being unbound, or
// waiting for their node. One whose init is under way is not counted: it
// is on its way to held.
size_t count_not_held(const std::vector<HeldGpu>& gpus);

struct PersistAction {
    enum class Kind {
        Open,        // open /dev/nvidia<minor> and wait for its init
        Close,       // release the fd held for the GPU
        SaveChoices, // write the disabled list to the state file
    };
    Kind kind = Kind::Open;
    std::string bdf;
    unsigned minor = 0;
    bool operator==(const PersistAction&) const = default;
};

// A GPU the admin disabled, as the state file keeps it: by UUID when the
// driver gave one (it follows the board), else by PCI address.
struct DisabledGpu {
    std::string uuid;
    std::string bdf;
    bool operator==(const DisabledGpu&) const = default;
};

class GpuTable {
  public:
    using Actions = std::vector<PersistAction>;

    // The admin's saved choices; applies to GPUs found from now on.
    void load_choices(std::vector<DisabledGpu> disabled);
    // The choices to save: every disabled GPU, known or remembered.
    const std::vector<DisabledGpu>& choices() const { return disabled_; }

    // The driver lists the GPU (at start, on a rescan, after a bind). A GPU
    // already known at the same minor changes nothing.
    Actions gpu_present(const GpuIdentity& id);
    // The GPU is no longer bound (unbind or remove uevent, or gone on a
    // rescan): forgotten, and released if held.
    Actions gpu_gone(std::string_view bdf);
    // The results of an Open action.
    Actions open_succeeded(std::string_view bdf);
    Actions open_failed(std::string_view bdf, int code, std::string message);
    // A held fd reported POLLHUP or POLLERR when polled: released as lost.
    Actions hangup(std::string_view bdf);
    // A held GPU's sysfs device lost its driver link: the kernel unbinds or
    // removes it and the driver's remove waits for the last close. Nobody
    // can open it any more, so holding it only blocks the admin: released.
    Actions unbinding(std::string_view bdf);
    // /dev changed: GPUs waiting for their node are tried again.
    Actions nodes_changed();
    // The admin's requests; `selector` empty means every GPU. An error when
    // the selector names no known GPU.
    Result<Actions> enable(const std::optional<GpuSelector>& selector);
    Result<Actions> disable(const std::optional<GpuSelector>& selector);
    // Release everything (stop).
    Actions release_all();

    const std::vector<HeldGpu>& gpus() const { return gpus_; }
    const HeldGpu* find(std::string_view bdf) const;
    // No GPU is still Opening: every GPU it should hold is held or failed.
    bool settled() const;
    size_t count(HoldState state) const;
    bool any_waiting_for_node() const { return count(HoldState::WaitingForNode) > 0; }
    // The held GPUs are checked (every kHeldCheckInterval) only while there
    // are any: with none, nothing wakes the daemon.
    bool needs_checks() const { return count(HoldState::Held) > 0; }

  private:
    HeldGpu* find_mutable(std::string_view bdf);
    bool is_disabled(const GpuIdentity& id) const;
    // Adds or removes `id` from disabled_; true when that changed it.
    bool set_choice(const GpuIdentity& id, bool wanted);

    std::vector<HeldGpu> gpus_; // sorted by minor
    std::vector<DisabledGpu> disabled_;
};

// The state file (/var/lib/gpu-persist/state): one "disabled UUID BDF" line
// per GPU ("-" for an unknown UUID), '#' comments. Hostile input: lines
// that do not parse are skipped, each a warning in `diagnostics`.
std::vector<DisabledGpu> parse_choices(std::string_view text, std::string_view source,
                                       Diagnostics& diagnostics);
std::string format_choices(const std::vector<DisabledGpu>& disabled);

} // namespace gpuinit
