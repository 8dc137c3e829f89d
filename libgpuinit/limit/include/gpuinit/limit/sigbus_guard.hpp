// A SIGBUS guard for MAP_SHARED mappings of files that someone else may
// truncate (the technique Wayland compositors use for their clients' shm
// pools). `gpu-limit daemon` (root) maps every group's state file, and a
// container's group belongs to the container's uid: its processes can
// ftruncate the file, and the daemon's next access to a page beyond the new
// end raises SIGBUS, which would kill the daemon of every group on the host.
//
// A guarded range is a registered [base, base + length): when SIGBUS's
// faulting address (si_addr, kernel-sent BUS_ADRERR only) falls in one, the
// handler maps private anonymous zero pages over the whole range
// (MAP_FIXED), marks it poisoned and returns, so that the faulting access
// retries on zeros and the owner finds poisoned() true and gives the range
// up. Any other SIGBUS goes to the handler that was there before install(),
// or, for the default action, the handler restores SIG_DFL and returns so
// that the fault happens again and kills as it would have.
//
// The registry is a fixed array of atomics (no allocation, async-signal-safe
// to read in the handler). Guard a range right after mapping it and unguard
// it right before unmapping it, from the thread that owns the mapping.
#pragma once

#include <cstddef>

namespace gpuinit::limit::sigbus_guard {

// Ranges guarded at a time: a group of the daemon has two mappings
// (DaemonConfig::max_groups is 4096 by default).
inline constexpr int kMaxGuarded = 8192;

// Installs the handler (once; later calls do nothing). False when sigaction
// fails (errno set).
bool install();

// Registers [base, base + length): a handle, or -1 when the registry is
// full or the range is empty. The handler must be installed for the range to
// be guarded.
int guard(void* base, size_t length);

// Forgets a handle (-1: nothing).
void unguard(int handle);

// Whether a SIGBUS in the range replaced it with anonymous zeros (the file
// was truncated under it). False for -1.
bool poisoned(int handle);

} // namespace gpuinit::limit::sigbus_guard
