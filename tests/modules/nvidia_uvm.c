#include "fake_module.h"
FAKE_MODINFO(name, "name=nvidia_uvm");
FAKE_MODINFO(license, "license=Dual MIT/GPL");
extern int nvidia_uvm_register(void);
int uvm_init(void) {
    return nvidia_uvm_register();
}
