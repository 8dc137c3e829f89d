# A GPU removed through sysfs and rescanned comes back with the same PCI
# address; gpu-mknod --remove and --device follow it. The GPU UUID belongs
# to the board, not to the minor.
. /scenario-common.sh
info() { sed -n "s/^$2:[[:space:]]*//p" "/proc/driver/nvidia/gpus/$1/information"; }
insmod $extra/nvidia.ko gpus=2 reverse_probe=1
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
# A rescan probes in listing order, the reverse of the module's first
# probe: with both GPUs removed the minors swap, and the UUIDs stay.
first=$(info 10000:00:00.0 "Device Minor") first_uuid=$(info 10000:00:00.0 "GPU UUID")
second_uuid=$(info 10000:00:01.0 "GPU UUID")
[ "$first" = 1 ] || fail "10000:00:00.0 has minor $first after reverse probing, want 1"
echo 1 >/sys/bus/pci/devices/10000:00:00.0/remove
echo 1 >/sys/bus/pci/devices/10000:00:01.0/remove
echo 1 >/sys/bus/pci/rescan
grep . /proc/driver/nvidia/gpus/*/information
[ "$(info 10000:00:00.0 "Device Minor")" = 0 ] || fail "10000:00:00.0 not minor 0 after rescan"
[ "$(info 10000:00:00.0 "GPU UUID")" = "$first_uuid" ] || fail "10000:00:00.0 changed its UUID"
[ "$(info 10000:00:01.0 "GPU UUID")" = "$second_uuid" ] || fail "10000:00:01.0 changed its UUID"
[ "$first_uuid" != "$second_uuid" ] || fail "two GPUs share $first_uuid"
