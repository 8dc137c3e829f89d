/*
 * Stand-ins for glibc's NSS entry points inside the third-party static
 * archives (libudev.a, libcap-ng.a). scripts/build-static-deps.sh renames
 * every reference those archives make to a function that glibc marks
 * "statically linked applications requires at runtime the shared libraries"
 * (getpwnam, initgroups, dlopen, ...), or that reaches NSS inside glibc
 * without such a mark (getnameinfo), to gpuinit_nonss_NAME, and links this
 * file in their place.
 *
 * Why: the warning is per object file, so merely linking udev_enumerate_*
 * pulls systemd's user-util.o (get_user_creds, getpwnam) and any libcap-ng
 * call pulls cap-ng.o (capng_change_id, initgroups), and the static build
 * treats that warning as an error. The gpuinit tools never reach these
 * paths (accounts are parsed from <root>/etc, privileges are dropped with
 * numeric ids); should a library ever do so, it gets a clean "not found" or
 * ENOSYS instead of loading the host's libnss_*.so at run time.
 *
 * Each stand-in is declared with the real function's type, so the compiler
 * checks the signatures.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <grp.h>
#include <gshadow.h>
#include <netdb.h>
#include <pwd.h>
#include <shadow.h>
#include <stddef.h>

#define GPUINIT_NONSS(name) __typeof__(name) gpuinit_nonss_##name

/* Lookups by name or id: nothing found, and errno says why. */
#define GPUINIT_NONSS_R(name, type, key_type)                                                      \
    GPUINIT_NONSS(name);                                                                           \
    int gpuinit_nonss_##name(key_type key, type* entry, char* buffer, size_t size,                 \
                             type** result) {                                                      \
        (void)key, (void)entry, (void)buffer, (void)size;                                          \
        *result = NULL;                                                                            \
        return ENOSYS;                                                                             \
    }

GPUINIT_NONSS(getpwnam);
struct passwd* gpuinit_nonss_getpwnam(const char* name) {
    (void)name;
    errno = ENOSYS;
    return NULL;
}
GPUINIT_NONSS(getpwuid);
struct passwd* gpuinit_nonss_getpwuid(uid_t uid) {
    (void)uid;
    errno = ENOSYS;
    return NULL;
}
GPUINIT_NONSS(getgrnam);
struct group* gpuinit_nonss_getgrnam(const char* name) {
    (void)name;
    errno = ENOSYS;
    return NULL;
}
GPUINIT_NONSS(getgrgid);
struct group* gpuinit_nonss_getgrgid(gid_t gid) {
    (void)gid;
    errno = ENOSYS;
    return NULL;
}

GPUINIT_NONSS_R(getpwnam_r, struct passwd, const char*)
GPUINIT_NONSS_R(getpwuid_r, struct passwd, uid_t)
GPUINIT_NONSS_R(getgrnam_r, struct group, const char*)
GPUINIT_NONSS_R(getgrgid_r, struct group, gid_t)
GPUINIT_NONSS_R(getspnam_r, struct spwd, const char*)
GPUINIT_NONSS_R(getsgnam_r, struct sgrp, const char*)

/* Enumeration: an empty database. */
GPUINIT_NONSS(getpwent);
struct passwd* gpuinit_nonss_getpwent(void) {
    return NULL;
}
GPUINIT_NONSS(getgrent);
struct group* gpuinit_nonss_getgrent(void) {
    return NULL;
}
GPUINIT_NONSS(setpwent);
void gpuinit_nonss_setpwent(void) {}
GPUINIT_NONSS(endpwent);
void gpuinit_nonss_endpwent(void) {}
GPUINIT_NONSS(setgrent);
void gpuinit_nonss_setgrent(void) {}
GPUINIT_NONSS(endgrent);
void gpuinit_nonss_endgrent(void) {}

GPUINIT_NONSS(initgroups);
int gpuinit_nonss_initgroups(const char* user, gid_t group) {
    (void)user, (void)group;
    errno = ENOSYS;
    return -1;
}
GPUINIT_NONSS(getgrouplist);
int gpuinit_nonss_getgrouplist(const char* user, gid_t group, gid_t* groups, int* count) {
    (void)user, (void)group, (void)groups;
    *count = 0;
    return -1;
}

GPUINIT_NONSS(getaddrinfo);
int gpuinit_nonss_getaddrinfo(const char* node, const char* service, const struct addrinfo* hints,
                              struct addrinfo** result) {
    (void)node, (void)service, (void)hints;
    *result = NULL;
    errno = ENOSYS;
    return EAI_SYSTEM;
}

/* systemd names socket peers with it; it falls back to the numeric form. */
GPUINIT_NONSS(getnameinfo);
int gpuinit_nonss_getnameinfo(const struct sockaddr* address, socklen_t address_size, char* host,
                              socklen_t host_size, char* service, socklen_t service_size,
                              int flags) {
    (void)address, (void)address_size, (void)host, (void)host_size, (void)service,
        (void)service_size, (void)flags;
    return EAI_FAIL;
}

/* systemd dlopen()s optional libraries (libidn, ...); a static tool has none. */
GPUINIT_NONSS(dlopen);
void* gpuinit_nonss_dlopen(const char* file, int mode) {
    (void)file, (void)mode;
    return NULL;
}
