// A third library, loaded after libgpulimit.so (a DT_NEEDED of the probe,
// before libcuda.so.1). It defines cuMemAlloc_v2 itself, so RTLD_NEXT from
// here must skip this definition and ours and find the driver's: the answer
// glibc gives only when our dlsym forwards with the caller's return address.
#include <dlfcn.h>

extern "C" __attribute__((visibility("default"))) int cuMemAlloc_v2(void*, unsigned long) {
    return 12345;
}

// Not tail calls: glibc must see a return address inside this library (a
// sibling call here would make the probe the caller).
extern "C" __attribute__((visibility("default"), optimize("no-optimize-sibling-calls"))) void*
resolve_next_lookup(const char* name) {
    void* volatile found = dlsym(RTLD_NEXT, name);
    return found;
}

extern "C" __attribute__((visibility("default"), optimize("no-optimize-sibling-calls"))) void*
resolve_default_lookup(const char* name) {
    void* volatile found = dlsym(RTLD_DEFAULT, name);
    return found;
}
