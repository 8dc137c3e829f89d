#include "gpuinit/base/process.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <cerrno>
#include <fcntl.h>
#include <string>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

void name_process(const char* name) {
    ::prctl(PR_SET_NAME, name, 0, 0, 0);
}

namespace {

// Root's alone: owned by root, and no write bit for group or others.
bool roots_alone(const struct stat& st) {
    return st.st_uid == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

} // namespace

Status exec_trusted_program(const std::string& path, char* const* argv, char* const* envp) {
    size_t slash = path.rfind('/');
    if (path.empty() || path.front() != '/' || slash + 1 == path.size()) {
        return error("cannot run " + quote(path) + ": not an absolute file name", EINVAL);
    }
    std::string directory = slash == 0 ? "/" : path.substr(0, slash);
    std::string name = path.substr(slash + 1);
    UniqueFd dir(::open(directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid()) {
        return os_error(errno, "cannot open " + quote(directory));
    }
    UniqueFd file(::openat(dir.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!file.valid()) {
        if (errno == ELOOP) {
            return error(quote(path) + " is a symbolic link: not run", EPERM);
        }
        return os_error(errno, "cannot open " + quote(path));
    }
    struct stat dir_st {};
    struct stat file_st {};
    if (::fstat(dir.get(), &dir_st) != 0 || ::fstat(file.get(), &file_st) != 0) {
        return os_error(errno, "cannot stat " + quote(path));
    }
    if (!S_ISREG(file_st.st_mode) || !roots_alone(file_st) || !roots_alone(dir_st)) {
        return error(quote(path) +
                         " is not root's alone (a regular file owned by root, in a directory of "
                         "root's, neither writable by group or others): not run; fix its owner "
                         "and mode (chown root:root, chmod go-w)",
                     EPERM);
    }
    ::syscall(SYS_execveat, file.get(), "", argv, envp, AT_EMPTY_PATH);
    // The file is there: ENOENT now means its interpreter is not (the #!
    // line's, or the dynamic loader), or it is a script, which the kernel
    // hands its interpreter as /dev/fd/N, closed by then (O_CLOEXEC).
    // Callers take ENOENT for "no such program", so it is not passed on.
    if (errno == ENOENT) {
        return error("cannot run " + quote(path) +
                         ": its interpreter (#! line or dynamic loader) is missing, or it is a "
                         "script; install a binary there",
                     ENOEXEC);
    }
    return os_error(errno, "cannot run " + quote(path));
}

} // namespace gpuinit
