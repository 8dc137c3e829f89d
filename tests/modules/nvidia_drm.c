#include "fake_module.h"
FAKE_MODINFO(name, "name=nvidia_drm");
FAKE_MODINFO(license, "license=Dual MIT/GPL");
extern int nvidia_modeset_get_functions(void);
int drm_init(void) {
    return nvidia_modeset_get_functions();
}
