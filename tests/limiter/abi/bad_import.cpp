// Negative test of check-abi.sh: compiled without glibc_baseline.h, dlopen
// binds to dlopen@GLIBC_2.34, which older glibc does not have.
#include <dlfcn.h>

__attribute__((visibility("hidden"))) void* gpulimit_abi_bad_open() {
    return dlopen("libm.so.6", RTLD_NOLOAD | RTLD_LAZY);
}
