// gpu-limit for containers, the host's side (tool side, not freestanding):
// the files under /run/gpu-limit that the edited spec (oci_spec.hpp) mounts
// into a container, and their removal when the container is gone. Every
// call works from a directory fd opened without following symlinks and on
// one name in it, as safe_fs.hpp does: /run/gpu-limit/<group> is writable
// by the container, which may have planted anything in it.
#pragma once

#include "gpuinit/base/result.hpp"
#include "gpuinit/limit/oci_spec.hpp"

#include <string>

namespace gpuinit::limit::oci {

// Makes, as needed, `state_root` (an absolute path; kStateRoot outside the
// tests) 0755, its ld.so.preload naming kContainerLibrary (0644, written
// under a temporary name and renamed, so a container starting meanwhile sees
// the old file or the new, never half of one); then makes
// <state_root>/<group>, 0700 and owned by `owner`. An existing state root
// must be a directory owned by root or the caller that nobody else can
// write. An existing group (a directory or anything else) is refused with
// EEXIST and left as it is, never re-owned: it is another container's, or a
// leftover of this one.
Status prepare_host(const std::string& state_root, const std::string& group, HostOwner owner);

// <state_root>/daemon.sock is a socket (the host daemon runs).
bool daemon_socket_present(const std::string& state_root);

// "oci-" and 32 hex digits from getrandom: a group for a container whose id
// a precreate hook cannot learn.
Result<std::string> random_group_name();

enum class Cleanup {
    Removed,
    Absent, // nothing to remove
    InUse,  // a live process holds a lock on the group's state: left alone
};

// Removes <state_root>/<group> and everything in it, unless a live process
// of the group still holds its state (any lock on <group>/state: the
// library's slots are open file description locks, held for as long as a
// process is in the group, in whatever pid namespace). Refuses a group
// directory that is a symlink or not a directory; removes what is inside
// without following any symlink (a link is removed, not its target).
Result<Cleanup> remove_group(const std::string& state_root, const std::string& group);

} // namespace gpuinit::limit::oci
