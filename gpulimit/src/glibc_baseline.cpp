// The stat family for libgpulimit.so's glibc baseline (glibc_baseline.h).
//
// glibc 2.33 turned stat, fstat, lstat and fstatat into exported functions
// (version GLIBC_2.33); before, the headers made them inline calls of
// __xstat and friends, so there is no old version to pin them to. These
// hidden definitions take their place inside the library: every object of
// the link (ours, the limit layer's, static libstdc++'s) binds to them, and
// nothing is imported. The kernel's struct stat is glibc's on x86_64 and
// aarch64, so the raw system call fills the caller's struct as glibc would.
//
// This file includes no <sys/stat.h>: the symbols are named by asm labels,
// so that _FILE_OFFSET_BITS cannot rename them and the 64 variants can be
// defined next to the plain ones.
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

struct stat;

namespace {

int stat_at(int dirfd, const char* path, struct stat* buf, int flags) {
    return static_cast<int>(syscall(SYS_newfstatat, dirfd, path, buf, flags));
}

} // namespace

#define GPULIMIT_HIDDEN_AS(symbol) __asm__(symbol) __attribute__((visibility("hidden")))

extern "C" {

int gpulimit_fstat(int fd, struct stat* buf) GPULIMIT_HIDDEN_AS("fstat");
int gpulimit_fstat64(int fd, struct stat* buf) GPULIMIT_HIDDEN_AS("fstat64");
int gpulimit_stat(const char* path, struct stat* buf) GPULIMIT_HIDDEN_AS("stat");
int gpulimit_stat64(const char* path, struct stat* buf) GPULIMIT_HIDDEN_AS("stat64");
int gpulimit_lstat(const char* path, struct stat* buf) GPULIMIT_HIDDEN_AS("lstat");
int gpulimit_lstat64(const char* path, struct stat* buf) GPULIMIT_HIDDEN_AS("lstat64");
int gpulimit_fstatat(int dirfd, const char* path, struct stat* buf, int flags)
    GPULIMIT_HIDDEN_AS("fstatat");
int gpulimit_fstatat64(int dirfd, const char* path, struct stat* buf, int flags)
    GPULIMIT_HIDDEN_AS("fstatat64");

// syscall() returns -1 and sets errno on failure, as the libc functions do.
int gpulimit_fstat(int fd, struct stat* buf) {
    return static_cast<int>(syscall(SYS_fstat, fd, buf));
}
int gpulimit_fstat64(int fd, struct stat* buf) {
    return gpulimit_fstat(fd, buf);
}
int gpulimit_stat(const char* path, struct stat* buf) {
    return stat_at(AT_FDCWD, path, buf, 0);
}
int gpulimit_stat64(const char* path, struct stat* buf) {
    return stat_at(AT_FDCWD, path, buf, 0);
}
int gpulimit_lstat(const char* path, struct stat* buf) {
    return stat_at(AT_FDCWD, path, buf, AT_SYMLINK_NOFOLLOW);
}
int gpulimit_lstat64(const char* path, struct stat* buf) {
    return stat_at(AT_FDCWD, path, buf, AT_SYMLINK_NOFOLLOW);
}
int gpulimit_fstatat(int dirfd, const char* path, struct stat* buf, int flags) {
    return stat_at(dirfd, path, buf, flags);
}
int gpulimit_fstatat64(int dirfd, const char* path, struct stat* buf, int flags) {
    return stat_at(dirfd, path, buf, flags);
}

} // extern "C"
