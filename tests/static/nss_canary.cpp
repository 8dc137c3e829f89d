// Must NOT link in the static build: getgrnam pulls in NSS, and glibc's
// "statically linked applications requires at runtime the shared libraries"
// warning is fatal there (cmake/Static.cmake). check-nss-guard.cmake builds
// this target and expects exactly that failure, proving the guard works.
#include <cstdio>
#include <grp.h>

int main() {
    const struct group* group = getgrnam("root");
    std::printf("%d\n", group != nullptr ? static_cast<int>(group->gr_gid) : -1);
    return 0;
}
