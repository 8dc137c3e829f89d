#include "fake_module.h"
FAKE_MODINFO(name, "name=nvidia_modeset");
FAKE_MODINFO(license, "license=NVIDIA");
extern int nvidia_get_rm_ops(void);
int modeset_init(void) {
    return nvidia_get_rm_ops();
}
FAKE_EXPORT(nvidia_modeset_get_functions)
