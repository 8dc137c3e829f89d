# gpu-mknod against the real kernel: every node with the rdev the guest's
# /proc/devices and the driver's minors give, and the per-GPU groups. The
# driver hands out minors in reverse PCI order; one GPU is class 0x0380 and
# there is an NVIDIA audio function.
. /scenario-common.sh
insmod $extra/nvidia.ko gpus=4 reverse_minors=1 class_0380=1 audio=1
insmod $extra/nvidia-uvm.ko
cat /proc/devices
ls -l /sys/bus/pci/devices/
gpu-mknod -v
ls -ln /dev/nvidia* /dev/char/ | grep -E 'nvidia|195|:'
count=0
for dir in /proc/driver/nvidia/gpus/*; do
  minor=$(sed -n 's/^Device Minor:[[:space:]]*//p' "$dir/information")
  gid=$(sed -n "s/^nvidia$minor:x:\([0-9]*\):.*/\1/p" /etc/group)
  got=$(stat -c '%F %t:%T %u:%g %a' "/dev/nvidia$minor")
  want="character special file c3:$(printf %x "$minor") 0:$gid 660"
  [ "$got" = "$want" ] || fail "/dev/nvidia$minor is '$got', want '$want'"
  [ "$(readlink "/dev/char/195:$minor")" = "../nvidia$minor" ] || fail "/dev/char/195:$minor"
  count=$((count + 1))
done
[ "$count" = 4 ] || fail "the driver bound $count GPUs, want 4 (the 0x0380 one included)"
uvm=$(awk '$2 == "nvidia-uvm" {print $1}' /proc/devices)
[ "$(stat -c '%t:%T %a' /dev/nvidia-uvm)" = "$(printf %x "$uvm"):0 666" ] || fail "/dev/nvidia-uvm"
[ "$(stat -c '%t:%T %a' /dev/nvidia-uvm-tools)" = "$(printf %x "$uvm"):1 666" ] || fail "uvm-tools"
[ "$(stat -c '%t:%T %a' /dev/nvidiactl)" = "c3:ff 666" ] || fail "/dev/nvidiactl"
# Minors come from the driver: the first GPU in PCI order has minor 3.
first=$(ls /proc/driver/nvidia/gpus | sort | head -1)
grep -q "Device Minor:.*3" "/proc/driver/nvidia/gpus/$first/information" || fail "minor order"
[ "$(stat -c '%t:%T' /dev/nvidia3)" = "c3:3" ] || fail "/dev/nvidia3"
gpu-mknod | grep "nothing to do" || fail "a second run changed something"
