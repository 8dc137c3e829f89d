# gpu-mknod against the real kernel: every node with the rdev the guest's
# /proc/devices and the driver's minors give, and the per-GPU groups. The
# driver probes the GPUs in reverse PCI order and gives each the lowest free
# minor, so minors run against the listing order; one GPU is class 0x0380
# and there is an NVIDIA audio function. Then again with an older driver's
# single "nvidia-frontend" major.
. /scenario-common.sh
# A character major from the guest's /proc/devices, by exact name.
major_of() {
  awk -v name="$1" '/^Character devices:/ {c = 1} /^$/ {c = 0} c && $2 == name {print $1}' /proc/devices
}
# check_gpu_nodes NAME_OF_GPU_MAJOR NAME_OF_CTL_MAJOR GPUS: every GPU the
# driver bound has its node, group and /dev/char link, and nvidiactl is right.
check_gpu_nodes() {
  nv=$(major_of "$1") ctl=$(major_of "$2")
  [ -n "$nv" ] && [ -n "$ctl" ] || fail "no $1 or $2 major in /proc/devices"
  count=0
  for dir in /proc/driver/nvidia/gpus/*; do
    minor=$(sed -n 's/^Device Minor:[[:space:]]*//p' "$dir/information")
    gid=$(sed -n "s/^nvidia$minor:x:\([0-9]*\):.*/\1/p" /etc/group)
    got=$(stat -c '%F %t:%T %u:%g %a' "/dev/nvidia$minor")
    want="character special file $(printf %x:%x "$nv" "$minor") 0:$gid 660"
    [ "$got" = "$want" ] || fail "/dev/nvidia$minor is '$got', want '$want'"
    [ "$(readlink "/dev/char/$nv:$minor")" = "../nvidia$minor" ] || fail "/dev/char/$nv:$minor"
    count=$((count + 1))
  done
  [ "$count" = "$3" ] || fail "the driver bound $count GPUs, want $3"
  [ "$(stat -c '%t:%T %a' /dev/nvidiactl)" = "$(printf %x "$ctl"):ff 666" ] || fail "/dev/nvidiactl"
}
insmod $extra/nvidia.ko gpus=4 reverse_probe=1 class_0380=1 audio=1
insmod $extra/nvidia-uvm.ko
cat /proc/devices
ls -l /sys/bus/pci/devices/
gpu-mknod -v
ls -ln /dev/nvidia* /dev/char/ | grep -E 'nvidia|:'
# All 4 GPUs, the 0x0380 one included.
check_gpu_nodes nvidia nvidiactl 4
uvm=$(major_of nvidia-uvm)
[ "$(stat -c '%t:%T %a' /dev/nvidia-uvm)" = "$(printf %x "$uvm"):0 666" ] || fail "/dev/nvidia-uvm"
[ "$(stat -c '%t:%T %a' /dev/nvidia-uvm-tools)" = "$(printf %x "$uvm"):1 666" ] || fail "uvm-tools"
# Minors come from the driver's probe order, the reverse of the listing:
# the GPUs in PCI order have minors 3, 2, 1, 0, and the last one bound first.
dmesg | grep "bound as minor"
dmesg | grep "bound as minor" | head -1 | grep -q "00:03.0: fake-nvidia: bound as minor 0" ||
  fail "the last GPU in PCI order was not probed first"
want=3
for bdf in $(ls /proc/driver/nvidia/gpus | sort); do
  minor=$(sed -n 's/^Device Minor:[[:space:]]*//p' "/proc/driver/nvidia/gpus/$bdf/information")
  [ "$minor" = "$want" ] || fail "$bdf has minor $minor, want $want"
  want=$((want - 1))
done
[ "$(stat -c '%t:%T' /dev/nvidia3)" = "$(printf %x "$(major_of nvidia)"):3" ] || fail "/dev/nvidia3"
gpu-mknod | grep "nothing to do" || fail "a second run changed something"

# A GPU taken from the driver (as vfio-pci would) is reported. The walk
# finds it through the kernel's /proc/bus/pci/devices, which has no domains:
# the fake GPU 10000:00:00.0 and the guest's host bridge 0000:00:00.0 are
# both "0000" there, so neither may be ruled out unread.
cut -f1-2 /proc/bus/pci/devices
grep -q "$(printf '^0000\t10de')" /proc/bus/pci/devices || fail "no NVIDIA 0000 in /proc/bus/pci/devices"
[ "$(grep -c "$(printf '^0000\t')" /proc/bus/pci/devices)" -ge 2 ] || fail "00:00.0 not listed twice"
unbound=10000:00:00.0
echo "$unbound" >/sys/bus/pci/drivers/nvidia/unbind
[ ! -e "/proc/driver/nvidia/gpus/$unbound" ] || fail "$unbound still in the driver's view"
report=$(gpu-mknod 2>&1) || true
echo "$report"
echo "$report" | grep -q "$unbound.*not bound to the nvidia driver" || fail "$unbound not reported"
echo "$unbound" >/sys/bus/pci/drivers/nvidia/bind
[ -e "/proc/driver/nvidia/gpus/$unbound" ] || fail "$unbound not bound again"

# An older driver registers major 195 once, as "nvidia-frontend", for the
# GPUs and nvidiactl alike.
rmmod nvidia_uvm
rmmod nvidia
rm -rf /dev/nvidia* /dev/char/* # without udev, only gpu-mknod makes /dev/char links here
insmod $extra/nvidia.ko gpus=2 legacy_frontend=1
cat /proc/devices
[ -n "$(major_of nvidia-frontend)" ] || fail "no nvidia-frontend in /proc/devices"
[ -z "$(major_of nvidia)" ] && [ -z "$(major_of nvidiactl)" ] || fail "nvidia or nvidiactl registered"
gpu-mknod -v
ls -ln /dev/nvidia* /dev/char/ | grep -E 'nvidia|:'
check_gpu_nodes nvidia-frontend nvidia-frontend 2
[ ! -e /dev/nvidia-uvm ] || fail "/dev/nvidia-uvm without nvidia-uvm loaded"
gpu-mknod | grep "nothing to do" || fail "a second legacy run changed something"
