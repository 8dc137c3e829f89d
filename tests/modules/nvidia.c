#include "fake_module.h"
FAKE_MODINFO(name, "name=nvidia");
FAKE_MODINFO(license, "license=NVIDIA");
FAKE_MODINFO(alias_vga, "alias=pci:v000010DEd*sv*sd*bc03sc00i00*");
FAKE_MODINFO(alias_3d, "alias=pci:v000010DEd*sv*sd*bc03sc02i00*");
/* The parameters NVIDIA's driver declares, with their types:
 * NV_MODULE_PARAMETER(x) is module_param(x, int, 0) and
 * NV_MODULE_STRING_PARAMETER(x) module_param(x, charp, 0)
 * (kernel-open/common/inc/nv-linux.h); the NVreg_ list is
 * kernel-open/nvidia/nv-reg.h's NV_DEFINE_REG_ENTRY and
 * NV_DEFINE_REG_STRING_ENTRY, and rm_firmware_active is kernel-open/nvidia/nv.c's;
 * github.com/NVIDIA/open-gpu-kernel-modules, tag 595.45.04. */
FAKE_PARAM(NVreg_ResmanDebugLevel, int);
FAKE_PARAM(NVreg_RmLogonRC, int);
FAKE_PARAM(NVreg_ModifyDeviceFiles, int);
FAKE_PARAM(NVreg_DeviceFileUID, int);
FAKE_PARAM(NVreg_DeviceFileGID, int);
FAKE_PARAM(NVreg_DeviceFileMode, int);
FAKE_PARAM(NVreg_InitializeSystemMemoryAllocations, int);
FAKE_PARAM(NVreg_UsePageAttributeTable, int);
FAKE_PARAM(NVreg_EnablePCIeGen3, int);
FAKE_PARAM(NVreg_EnableMSI, int);
FAKE_PARAM(NVreg_EnableStreamMemOPs, int);
FAKE_PARAM(NVreg_RestrictProfilingToAdminUsers, int);
FAKE_PARAM(NVreg_PreserveVideoMemoryAllocations, int);
FAKE_PARAM(NVreg_EnableS0ixPowerManagement, int);
FAKE_PARAM(NVreg_S0ixPowerManagementVideoMemoryThreshold, int);
FAKE_PARAM(NVreg_DynamicPowerManagement, int);
FAKE_PARAM(NVreg_DynamicPowerManagementVideoMemoryThreshold, int);
FAKE_PARAM(NVreg_EnableGpuFirmware, int);
FAKE_PARAM(NVreg_EnableGpuFirmwareLogs, int);
FAKE_PARAM(NVreg_OpenRmEnableUnsupportedGpus, int);
FAKE_PARAM(NVreg_EnableUserNUMAManagement, int);
FAKE_PARAM(NVreg_MemoryPoolSize, int);
FAKE_PARAM(NVreg_KMallocHeapMaxSize, int);
FAKE_PARAM(NVreg_VMallocHeapMaxSize, int);
FAKE_PARAM(NVreg_IgnoreMMIOCheck, int);
FAKE_PARAM(NVreg_NvLinkDisable, int);
FAKE_PARAM(NVreg_EnablePCIERelaxedOrderingMode, int);
FAKE_PARAM(NVreg_RegisterPCIDriver, int);
FAKE_PARAM(NVreg_RegisterPlatformDeviceDriver, int);
FAKE_PARAM(NVreg_EnableResizableBar, int);
FAKE_PARAM(NVreg_EnableDbgBreakpoint, int);
FAKE_PARAM(NVreg_TegraGpuPgMask, int);
FAKE_PARAM(NVreg_EnableNonblockingOpen, int);
FAKE_PARAM(NVreg_ExcludeAllGpus, int);
FAKE_PARAM(NVreg_GpuInitOnProbe, int);
FAKE_PARAM(NVreg_CoherentGPUMemoryMode, charp);
FAKE_PARAM(NVreg_RegistryDwords, charp);
FAKE_PARAM(NVreg_RegistryDwordsPerDevice, charp);
FAKE_PARAM(NVreg_RmMsg, charp);
FAKE_PARAM(NVreg_GpuBlacklist, charp);
FAKE_PARAM(NVreg_TemporaryFilePath, charp);
FAKE_PARAM(NVreg_ExcludedGpus, charp);
FAKE_PARAM(NVreg_DmaRemapPeerMmio, int);
FAKE_PARAM(NVreg_RmNvlinkBandwidth, charp);
FAKE_PARAM(NVreg_RmNvlinkBandwidthLinkCount, int);
FAKE_PARAM(NVreg_ImexChannelCount, int);
FAKE_PARAM(NVreg_CreateImexChannel0, int);
FAKE_PARAM(NVreg_GrdmaPciTopoCheckOverride, int);
FAKE_PARAM(NVreg_EnableSystemMemoryPools, int);
FAKE_PARAM(NVreg_UseKernelSuspendNotifiers, int);
FAKE_PARAM(rm_firmware_active, charp);
FAKE_EXPORT(nvidia_get_rm_ops)
FAKE_EXPORT(nvidia_uvm_register)
