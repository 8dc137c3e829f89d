#include "fake_module.h"
FAKE_MODINFO(name, "name=nvidia");
FAKE_MODINFO(license, "license=NVIDIA");
FAKE_MODINFO(alias_vga, "alias=pci:v000010DEd*sv*sd*bc03sc00i00*");
FAKE_MODINFO(alias_3d, "alias=pci:v000010DEd*sv*sd*bc03sc02i00*");
FAKE_MODINFO(parm, "parm=NVreg_DeviceFileMode:uint");
FAKE_EXPORT(nvidia_get_rm_ops)
FAKE_EXPORT(nvidia_uvm_register)
