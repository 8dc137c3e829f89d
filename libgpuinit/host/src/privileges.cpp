#include "gpuinit/host/privileges.hpp"

#include "gpuinit/base/text.hpp"

#include <cap-ng.h>
#include <cerrno>
#include <grp.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace gpuinit {

Status drop_privileges(uid_t uid, gid_t gid, const std::vector<gid_t>& supplementary_groups) {
    if (::setgroups(supplementary_groups.size(), supplementary_groups.data()) != 0) {
        return errno_error("setgroups");
    }
    if (::setresgid(gid, gid, gid) != 0) {
        return errno_error(format("setresgid(%u)", static_cast<unsigned>(gid)));
    }
    // The bounding set can only be cleared while CAP_SETPCAP is still held.
    capng_get_caps_process();
    capng_clear(CAPNG_SELECT_BOUNDS);
    if (capng_apply(CAPNG_SELECT_BOUNDS) != 0) {
        return error("cannot clear the capability bounding set", EPERM);
    }
    if (::setresuid(uid, uid, uid) != 0) {
        return errno_error(format("setresuid(%u)", static_cast<unsigned>(uid)));
    }
    capng_clear(CAPNG_SELECT_CAPS);
    if (capng_apply(CAPNG_SELECT_CAPS) != 0) {
        return error("cannot clear the capabilities", EPERM);
    }
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        return errno_error("prctl(PR_SET_NO_NEW_PRIVS)");
    }

    uid_t ruid = 0, euid = 0, suid = 0;
    gid_t rgid = 0, egid = 0, sgid = 0;
    if (::getresuid(&ruid, &euid, &suid) != 0 || ::getresgid(&rgid, &egid, &sgid) != 0 ||
        ruid != uid || euid != uid || suid != uid || rgid != gid || egid != gid || sgid != gid) {
        return error("ids did not change as asked", EPERM);
    }
    capng_get_caps_process();
    if (capng_have_capabilities(CAPNG_SELECT_CAPS) != CAPNG_NONE) {
        return error("capabilities remain after dropping them", EPERM);
    }
    return {};
}

Status keep_only_capabilities(const std::vector<unsigned>& capabilities) {
    capng_get_caps_process();
    capng_clear(CAPNG_SELECT_BOTH);
    for (unsigned capability : capabilities) {
        if (capng_update(CAPNG_ADD, static_cast<capng_type_t>(CAPNG_EFFECTIVE | CAPNG_PERMITTED),
                         capability) != 0 ||
            capng_update(CAPNG_ADD, CAPNG_BOUNDING_SET, capability) != 0) {
            return error(format("cannot keep capability %u", capability), EINVAL);
        }
    }
    if (capng_apply(CAPNG_SELECT_BOTH) != 0) {
        return error("cannot restrict the capabilities", EPERM);
    }
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        return errno_error("prctl(PR_SET_NO_NEW_PRIVS)");
    }
    return {};
}

} // namespace gpuinit
