#include "fake_module.h"
FAKE_MODINFO(name, "name=nvidia_uvm");
FAKE_MODINFO(license, "license=Dual MIT/GPL");
/* A few of the parameters NVIDIA's nvidia-uvm declares, as it types them
 * (open-gpu-kernel-modules 595.45.04, kernel-open/nvidia-uvm/uvm_ats.c,
 * uvm_common.c, uvm_hmm.c, uvm_perf_prefetch.c, uvm_pmm_gpu.c). */
FAKE_PARAM(uvm_ats_mode, int);
FAKE_PARAM(uvm_enable_builtin_tests, int);
FAKE_PARAM(uvm_disable_hmm, bool);
FAKE_PARAM(uvm_perf_prefetch_enable, uint);
FAKE_PARAM(uvm_global_oversubscription, int);
extern int nvidia_uvm_register(void);
int uvm_init(void) {
    return nvidia_uvm_register();
}
