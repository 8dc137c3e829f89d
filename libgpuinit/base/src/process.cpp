#include "gpuinit/base/process.hpp"

#include <cerrno>
#include <string>
#include <sys/auxv.h>
#include <unistd.h>

namespace gpuinit {

Status refuse_elevated_start(const char* program) {
    uid_t ruid = 0, euid = 0, suid = 0;
    gid_t rgid = 0, egid = 0, sgid = 0;
    bool ids_differ = ::getresuid(&ruid, &euid, &suid) != 0 ||
                      ::getresgid(&rgid, &egid, &sgid) != 0 || ruid != euid || ruid != suid ||
                      rgid != egid || rgid != sgid;
    if (::getauxval(AT_SECURE) != 0 || ids_differ) {
        return error(std::string(program) +
                         " refuses to run setuid or setgid (AT_SECURE, or real and effective ids"
                         " differ): run it as root, from root's shell, udev or init, and remove the"
                         " set-id bit (chmod u-s,g-s)",
                     EPERM);
    }
    return {};
}

} // namespace gpuinit
