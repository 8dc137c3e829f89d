# A GPU removed through sysfs and rescanned comes back with the same PCI
# address; gpu-mknod --remove and --device follow it.
. /scenario-common.sh
insmod $extra/nvidia.ko gpus=2
gpu-mknod -q
bdf=$(ls /proc/driver/nvidia/gpus | sort | head -1)
minor=$(sed -n 's/^Device Minor:[[:space:]]*//p' "/proc/driver/nvidia/gpus/$bdf/information")
echo 1 >"/sys/bus/pci/devices/$bdf/remove"
[ ! -e "/sys/bus/pci/devices/$bdf" ] || fail "$bdf still in sysfs"
[ ! -e "/proc/driver/nvidia/gpus/$bdf" ] || fail "$bdf still in the driver's view"
gpu-mknod --remove --device "$bdf"
[ ! -e "/dev/nvidia$minor" ] || fail "/dev/nvidia$minor not removed"
echo 1 >/sys/bus/pci/rescan
[ -e "/sys/bus/pci/devices/$bdf" ] || fail "$bdf did not come back"
[ "$(basename "$(readlink "/sys/bus/pci/devices/$bdf/driver")")" = nvidia ] || fail "not rebound"
[ -e "/proc/driver/nvidia/gpus/$bdf/information" ] || fail "not in the driver's view"
gpu-mknod -q --device "$bdf"
[ -c "/dev/nvidia$minor" ] || fail "/dev/nvidia$minor not recreated"
