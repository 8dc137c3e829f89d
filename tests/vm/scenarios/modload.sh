# gpu-modload loads nvidia_uvm, and with it nvidia, through libkmod in the
# real kernel, with the options from modprobe.d and the command line.
. /scenario-common.sh
mkdir -p /etc/modprobe.d
cat >/etc/modprobe.d/gpu-restriction.conf <<'CONF'
options nvidia NVreg_DeviceFileUID=0 NVreg_DeviceFileGID=0 NVreg_DeviceFileMode=0660 NVreg_ModifyDeviceFiles=0
options nvidia gpus=2
options nvidia NVreg_EnableMSI=0 NVreg_PreserveVideoMemoryAllocations=1 NVreg_DynamicPowerManagement=2
options nvidia NVreg_ResmanDebugLevel=0 NVreg_EnableNonblockingOpen=0 NVreg_RegistryDwords=RMUseSwI2c=0x01;RMI2cSpeed=100
CONF
gpu-modload --dry-run nvidia_uvm
gpu-modload -v nvidia_uvm nvidia NVreg_DeviceFileGID=0
grep -E '^nvidia(_uvm)? ' /proc/modules
grep -q '^nvidia ' /proc/modules || fail "nvidia not loaded"
grep -q '^nvidia_uvm ' /proc/modules || fail "nvidia_uvm not loaded"
cat /proc/driver/nvidia/params
grep -q '^DeviceFileMode: 432$' /proc/driver/nvidia/params || fail "DeviceFileMode did not reach the driver"
grep -q '^ModifyDeviceFiles: 0$' /proc/driver/nvidia/params || fail "ModifyDeviceFiles"
for line in 'ResmanDebugLevel: 0' 'EnableMSI: 0' 'PreserveVideoMemoryAllocations: 1' \
  'DynamicPowerManagement: 2' 'RegistryDwords: "RMUseSwI2c=0x01;RMI2cSpeed=100"' 'ExcludedGpus: ""'; do
  grep -qxF "$line" /proc/driver/nvidia/params || fail "params has no '$line'"
done
[ "$(ls /proc/driver/nvidia/gpus | wc -l)" = 2 ] || fail "gpus=2 did not reach the driver"
gpu-modload --check || fail "--check on the shipped options"
gpu-modload -v | grep -q "already-loaded" || fail "a second load did not report loaded modules"
gpu-mknod -q
cat /proc/driver/nvidia/version
grep -q '^NVRM version: NVIDIA UNIX x86_64 Kernel Module  535\.129\.03  [A-Z][a-z][a-z] ' \
  /proc/driver/nvidia/version || fail "the version file's NVRM line"
grep -q '^GCC version:  gcc version [0-9]' /proc/driver/nvidia/version || fail "the GCC line"
# Reloaded with the driver's defaults for the device files (nvidia-modprobe
# resets every node; 0666 opens them to everyone), --check must refuse.
rmmod nvidia_uvm
rmmod nvidia
# Options are checked against the real module's .modinfo before it loads: a
# misspelt name, and ModifyDeviceFiles=1, are refused (exit 3), unless --force.
for option in NVreg_DeviceFileMod=0600 NVreg_DeviceFileMode=abc NVreg_ModifyDeviceFiles=1; do
  status=0
  gpu-modload nvidia "$option" 2>/tmp/load.err || status=$?
  cat /tmp/load.err
  [ "$status" = 3 ] || fail "a load with $option exited $status, want 3"
  grep -q "error: $option (command line): " /tmp/load.err || fail "no error line for $option"
  if grep -q '^nvidia ' /proc/modules; then fail "nvidia was loaded with $option"; fi
done
gpu-modload --force nvidia NVreg_ModifyDeviceFiles=1 NVreg_DeviceFileMode=0666 2>/tmp/load.err
cat /tmp/load.err
grep -q "warning: NVreg_ModifyDeviceFiles=1 (command line): .*(--force: loading anyway)" \
  /tmp/load.err || fail "--force did not warn"
status=0
gpu-modload --check 2>/tmp/check.err || status=$?
cat /tmp/check.err
[ "$status" = 4 ] || fail "--check exited $status on ModifyDeviceFiles=1 and mode 0666, want 4"
grep -q "ModifyDeviceFiles is 1" /tmp/check.err || fail "--check did not explain ModifyDeviceFiles"
grep -q "NVreg_DeviceFileMode=0666 lets every user" /tmp/check.err || fail "--check did not flag 0666"
