// <root>/run/gpuinit: gpuinit's run-time state. Every name in it is here:
// the locks that serialize runs, lease files that a process holds while it
// lives, and records written atomically.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace gpuinit {

inline constexpr std::string_view kRunDir = "run/gpuinit";
// gpu-mknod's run lock: concurrent runs (udev starts one per GPU) serialize on it.
inline constexpr std::string_view kMknodLock = "lock";
// Which PCI address had which minor, for udev's remove event (gpu_records).
inline constexpr std::string_view kGpuRecords = "gpus";

// How long a run waits for another one to finish before it gives up.
inline constexpr std::chrono::milliseconds kDefaultLockWait{60'000};

class RunDir {
  public:
    // Opens <root>/run/gpuinit, creating it (0755) when `create`. It must be
    // owned by root (or by this process's user) and writable by nobody else:
    // whoever can write it can block every run or fake its records.
    static Result<RunDir> open(const Sysroot& root, bool create);

    // The exclusive lock `name`, waiting at most `wait` for its holder. The
    // lock file is root-only (0600): one that others can open (and so hold)
    // is replaced by a new one before use. Held until the fd closes.
    Result<UniqueFd> lock(std::string_view name, std::chrono::milliseconds wait) const;
    // Without waiting: an error with code EWOULDBLOCK when it is held.
    Result<UniqueFd> try_lock(std::string_view name) const;
    // A lease: the lock `name`, taken without waiting, whose file says who
    // holds it (`holder`, e.g. "pid 1234 gpu-mig"). It ends when the fd
    // closes, also when the holder dies.
    Result<UniqueFd> take_lease(std::string_view name, std::string_view holder) const;
    // Who holds the lease `name`; nullopt when nobody does.
    Result<std::optional<std::string>> lease_holder(std::string_view name) const;

    // A record's text; nullopt when there is none.
    Result<std::optional<std::string>> read_record(std::string_view name, size_t max_bytes) const;
    // Replaces the record atomically (0644).
    Status write_record(std::string_view name, std::string_view text) const;

    std::string display(std::string_view name) const { return dir_.path_of(name); }
    const SafeDir& dir() const { return dir_; }

  private:
    explicit RunDir(SafeDir dir) : dir_(std::move(dir)) {}
    // Opens (creating) the lock file `name`, replacing one others could open.
    Result<UniqueFd> open_lock_file(std::string_view name) const;

    SafeDir dir_;
};

} // namespace gpuinit
