/* The glibc symbol baseline of libgpulimit.so: GLIBC_2.17.
 *
 * Force-included (-include) into every source of libgpulimit.so and of the
 * limit layer's objects linked into it, before any system header.
 *
 * Why: libgpulimit.so is built on Debian 12 (glibc 2.36) but must load into
 * CUDA images with glibc 2.17 (CentOS 7), 2.27 (Ubuntu 18.04), 2.28 (UBI8,
 * Debian 10) and 2.31 (Debian 11, Ubuntu 20.04). A reference to a symbol
 * binds, at link time, to its *default* version in the libc we link against.
 * glibc 2.34 moved libdl, libpthread and librt into libc.so.6 and gave the
 * moved functions a new default version (dlopen@@GLIBC_2.34,
 * pthread_key_create@@GLIBC_2.34, ...); 2.33 made stat/fstat real functions
 * (fstat@@GLIBC_2.33; before, they were inline wrappers of __fxstat), and
 * 2.28 added fcntl64. An older glibc has none of these versions, so the
 * dynamic loader would refuse the library ("version `GLIBC_2.34' not found").
 *
 * How:
 * 1. `.symver name, name@OLD` makes this object's undefined references to
 *    `name` bind to the old version, which glibc 2.36 still carries as a
 *    compatibility symbol (same code). An unused pin creates no reference.
 * 2. On glibc < 2.34 those old versions live in libdl.so.2 and
 *    libpthread.so.0, not in libc.so.6, so the library has DT_NEEDED entries
 *    for both (CMake links them with --no-as-needed). glibc 2.34+ keeps the
 *    two files as empty stubs, so the entries cost nothing there. The
 *    loader matches a versioned reference by version name, in whichever
 *    loaded object defines it, so dlopen@GLIBC_2.2.5 recorded against
 *    libc.so.6 is found in libdl.so.2 on an old system.
 * 3. Functions that did not exist before 2.17 under any name (fstat and
 *    friends, as exported functions) are defined inside the library instead,
 *    as hidden raw-syscall versions (glibc_baseline.cpp): every object of the
 *    link binds to them, and nothing is imported.
 * tests/limiter/abi checks the result with objdump -T: no GLIBC_ version
 * above 2.17, no GLIBCXX_/CXXABI_ import.
 *
 * dlsym is deliberately not pinned: the library defines dlsym itself
 * (resolve.cpp), so a pinned reference would bind to our own definition.
 * Code inside the library reaches the real one through real_dlsym()
 * (real.hpp). librt functions (shm_open, timer_*, mq_*) are not pinned
 * either: using one needs librt.so.1 in DT_NEEDED too. */
#ifndef GPULIMIT_GLIBC_BASELINE_H
#define GPULIMIT_GLIBC_BASELINE_H

#if defined(__x86_64__)
#define GPULIMIT_GLIBC_OLD "GLIBC_2.2.5" /* the first version of the x86_64 port */
#elif defined(__aarch64__)
#define GPULIMIT_GLIBC_OLD "GLIBC_2.17" /* the first version of the aarch64 port */
#else
#error "libgpulimit.so: no glibc symbol baseline for this architecture"
#endif

#define GPULIMIT_PIN(name, version) __asm__(".symver " #name "," #name "@" version);
/* References to `name` bind to old_name@version (same ABI, another name). */
#define GPULIMIT_PIN_AS(name, old_name, version)                                                   \
    __asm__(".symver " #name "," #old_name "@" version);

/* libdl (GLIBC_2.34 default on 2.34+). */
GPULIMIT_PIN(dlopen, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(dlclose, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(dlerror, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(dlvsym, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(dladdr, GPULIMIT_GLIBC_OLD)
#if defined(__x86_64__)
GPULIMIT_PIN(dladdr1, "GLIBC_2.3.3")
GPULIMIT_PIN(dlinfo, "GLIBC_2.3.3")
#else
GPULIMIT_PIN(dladdr1, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(dlinfo, GPULIMIT_GLIBC_OLD)
#endif

/* libpthread (GLIBC_2.34 or 2.32 default on 2.34+). pthread_mutex_lock,
 * pthread_self and the condition variables were in libc.so.6 all along. */
GPULIMIT_PIN(pthread_create, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_join, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_detach, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_kill, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_once, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_key_create, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_key_delete, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_getspecific, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_setspecific, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_sigmask, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_mutex_trylock, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_mutexattr_init, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_mutexattr_destroy, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_mutexattr_settype, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_mutexattr_setpshared, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_attr_setstacksize, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_rwlock_rdlock, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_rwlock_wrlock, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_rwlock_unlock, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(sem_init, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(sem_destroy, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(sem_post, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(sem_wait, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(sem_timedwait, GPULIMIT_GLIBC_OLD)
#if defined(__x86_64__)
GPULIMIT_PIN(pthread_mutex_consistent, "GLIBC_2.12")
GPULIMIT_PIN(pthread_mutexattr_setrobust, "GLIBC_2.12")
GPULIMIT_PIN(pthread_setname_np, "GLIBC_2.12")
#else
GPULIMIT_PIN(pthread_mutex_consistent, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_mutexattr_setrobust, GPULIMIT_GLIBC_OLD)
GPULIMIT_PIN(pthread_setname_np, GPULIMIT_GLIBC_OLD)
#endif

/* fcntl64 (2.28) is fcntl on a 64-bit ABI: off_t is already 64 bits, and
 * struct flock (the OFD locks) is the same. _FILE_OFFSET_BITS=64 renames
 * fcntl to fcntl64 in the headers. */
GPULIMIT_PIN_AS(fcntl64, fcntl, GPULIMIT_GLIBC_OLD)

#endif
