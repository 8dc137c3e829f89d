// Another library whose file name starts like the driver's
// (libcuda.so.impostor) and defines a hooked name: dlsym on its handle must
// answer its own function, switch on or off.
extern "C" __attribute__((visibility("default"))) int cuMemAlloc_v2(void*, unsigned long) {
    return 54321;
}
