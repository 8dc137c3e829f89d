/* Stand-ins for kernel modules: just enough ELF for depmod and libkmod.
 * Exported symbols are listed in __ksymtab_strings; imported ones are plain
 * undefined references, from which depmod derives the dependencies. */
#define FAKE_MODINFO(tag, text)                                                                    \
    static const char fake_modinfo_##tag[]                                                         \
        __attribute__((section(".modinfo"), used, aligned(1))) = text
#define FAKE_EXPORT(symbol)                                                                        \
    static const char fake_ksymtab_##symbol[]                                                      \
        __attribute__((section("__ksymtab_strings"), used, aligned(1))) = #symbol;                 \
    int symbol(void) {                                                                             \
        return 0;                                                                                  \
    }
/* module_param(name, type, perm): the .modinfo entry it leaves,
 * "parmtype=name:type" (include/linux/moduleparam.h __MODULE_PARM_TYPE). */
#define FAKE_PARAM(name, type) FAKE_MODINFO(parmtype_##name, "parmtype=" #name ":" #type)
