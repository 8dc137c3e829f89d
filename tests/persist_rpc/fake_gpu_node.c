/*
 * A stand-in for the NVIDIA driver's /dev/nvidiaN, preloaded into a
 * gpu-persist daemon that runs on a fixture tree, where no driver is: the
 * regular files nvidiaN in $GPUINIT_FAKE_GPU_DEV look like the character
 * devices 195:N to fstatat() and fstat(), open as the files they are, and
 * answer NV_ESC_WAIT_OPEN_COMPLETE as the driver does once its
 * non-blocking open finished (open-gpu-kernel-modules
 * kernel-open/nvidia/nv.c, nv-ioctl-numbers.h: 'F', 200 + 18,
 * { int rc; u32 adapterStatus }, rc 0 or a negative errno). What each
 * file says decides its init:
 *   ok            initialized at once
 *   slow MS       initialized after MS milliseconds
 *   fail          the init fails (rc -EIO)
 *   slowfail MS   the init fails after MS milliseconds
 * Nothing else is touched: other paths and fds go to libc unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define NVIDIA_MAJOR 195
#define MAX_FDS 1024
#define NV_ESC_WAIT_OPEN_COMPLETE_REQUEST _IOWR('F', 200 + 18, struct wait_open_complete)

struct wait_open_complete {
    int rc;
    uint32_t adapter_status;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int fake_minor[MAX_FDS]; /* minor + 1 for an fd on a fake node, else 0 */
static char fake_behaviour[MAX_FDS][32];

/* "nvidiaN" in the fake dev directory: N, else -1. */
static int fake_node(int dirfd, const char* name) {
    const char* dev = getenv("GPUINIT_FAKE_GPU_DEV");
    if (dev == NULL || name == NULL || strncmp(name, "nvidia", 6) != 0) {
        return -1;
    }
    char* end = NULL;
    long minor = strtol(name + 6, &end, 10);
    if (end == name + 6 || *end != '\0' || minor < 0 || minor > 254) {
        return -1;
    }
    char link[64];
    char target[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
    ssize_t length = readlink(link, target, sizeof(target) - 1);
    if (length <= 0) {
        return -1;
    }
    target[length] = '\0';
    return strcmp(target, dev) == 0 ? (int)minor : -1;
}

static void as_char_device(struct stat* st, int minor) {
    st->st_mode = S_IFCHR | (st->st_mode & 07777);
    st->st_rdev = makedev(NVIDIA_MAJOR, (unsigned)minor);
    st->st_size = 0;
}

static int fd_minor(int fd) {
    if (fd < 0 || fd >= MAX_FDS) {
        return -1;
    }
    pthread_mutex_lock(&lock);
    int minor = fake_minor[fd] - 1;
    pthread_mutex_unlock(&lock);
    return minor;
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

int fstatat(int dirfd, const char* name, struct stat* st, int flags) {
    int rc = REAL(fstatat)(dirfd, name, st, flags);
    int minor = rc == 0 && S_ISREG(st->st_mode) ? fake_node(dirfd, name) : -1;
    if (minor >= 0) {
        as_char_device(st, minor);
    }
    return rc;
}

int fstatat64(int dirfd, const char* name, struct stat64* st, int flags) {
    return fstatat(dirfd, name, (struct stat*)st, flags);
}

int fstat(int fd, struct stat* st) {
    int rc = REAL(fstat)(fd, st);
    int minor = rc == 0 ? fd_minor(fd) : -1;
    if (minor >= 0) {
        as_char_device(st, minor);
    }
    return rc;
}

int fstat64(int fd, struct stat64* st) {
    return fstat(fd, (struct stat*)st);
}

int openat(int dirfd, const char* name, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list args;
        va_start(args, flags);
        mode = va_arg(args, mode_t);
        va_end(args);
    }
    int fd = REAL(openat)(dirfd, name, flags, mode);
    int minor = fd >= 0 && fd < MAX_FDS ? fake_node(dirfd, name) : -1;
    if (minor >= 0) {
        char behaviour[32] = "";
        ssize_t got = pread(fd, behaviour, sizeof(behaviour) - 1, 0);
        behaviour[got > 0 ? got : 0] = '\0';
        pthread_mutex_lock(&lock);
        fake_minor[fd] = minor + 1;
        memcpy(fake_behaviour[fd], behaviour, sizeof(behaviour));
        pthread_mutex_unlock(&lock);
    }
    return fd;
}

int openat64(int dirfd, const char* name, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list args;
        va_start(args, flags);
        mode = va_arg(args, mode_t);
        va_end(args);
    }
    return openat(dirfd, name, flags, mode);
}

int close(int fd) {
    if (fd >= 0 && fd < MAX_FDS) {
        pthread_mutex_lock(&lock);
        fake_minor[fd] = 0;
        pthread_mutex_unlock(&lock);
    }
    return REAL(close)(fd);
}

int ioctl(int fd, unsigned long request, ...) {
    va_list args;
    va_start(args, request);
    void* argument = va_arg(args, void*);
    va_end(args);
    if (fd_minor(fd) < 0) {
        return REAL(ioctl)(fd, request, argument);
    }
    if (request != NV_ESC_WAIT_OPEN_COMPLETE_REQUEST) {
        errno = ENOTTY;
        return -1;
    }
    char behaviour[32];
    pthread_mutex_lock(&lock);
    memcpy(behaviour, fake_behaviour[fd], sizeof(behaviour));
    pthread_mutex_unlock(&lock);
    long ms = 0;
    if (strncmp(behaviour, "slow", 4) == 0) {
        ms = strtol(behaviour + (strncmp(behaviour, "slowfail", 8) == 0 ? 8 : 4), NULL, 10);
    }
    struct timespec delay = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&delay, &delay) != 0 && errno == EINTR) {
    }
    struct wait_open_complete* result = argument;
    int fails = strncmp(behaviour, "fail", 4) == 0 || strncmp(behaviour, "slowfail", 8) == 0;
    result->rc = fails ? -EIO : 0;
    result->adapter_status = fails ? 0x62 : 0;
    return 0;
}
