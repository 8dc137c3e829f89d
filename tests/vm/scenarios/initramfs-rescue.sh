# gpuinit at the initramfs rescue prompt: an initramfs made by Debian's own
# mkinitramfs with the project's hook (gpu-restriction), booted with no root
# filesystem. The hook brought the static tools with their multi-call links,
# the GPU groups, modprobe.d and the modules, so gpu-modload and gpu-mknod
# alone set the GPUs up there with the per-GPU groups.
#
# vm-flavour: mkinitramfs
. /scenario-common.sh
cat /proc/cmdline
# initramfs-tools' init, on the initramfs itself: no root was mounted.
[ -f /conf/initramfs.conf ] && [ -d /scripts/init-premount ] || fail "not initramfs-tools' initramfs"
[ "$(awk '$2 == "/" { print $3 }' /proc/mounts)" = rootfs ] || fail "/ is not the initramfs"
! grep -q ' /root ' /proc/mounts || fail "a root filesystem is mounted on /root"
# The tools keep the layout they were installed with: with the static
# build, one gpuinit binary and every tool a relative link to it.
ls -l /usr/sbin/gpu* /usr/local/lib/gpuinit-vm
cat /usr/local/lib/gpuinit-vm/tools.layout
while read -r tool target; do
  [ "$(readlink "/usr/sbin/$tool")" = "$target" ] ||
    fail "/usr/sbin/$tool is '$(readlink "/usr/sbin/$tool")' in the initramfs, installed as '$target'"
  if [ -n "$target" ]; then
    [ -f "/usr/sbin/$target" ] && [ ! -L "/usr/sbin/$target" ] || fail "/usr/sbin/$target is not the binary"
  fi
done </usr/local/lib/gpuinit-vm/tools.layout
# The accounts the nodes need, with the tree's GIDs, and no others.
cat /etc/group /etc/passwd
for n in 0 1 2 3; do
  grep -qx "nvidia$n:x:100$n:" /etc/group || fail "no nvidia$n:x:100$n: in the initramfs's /etc/group"
done
! grep -qE '^(alice|bob):' /etc/group /etc/passwd || fail "accounts the policy does not name were copied"
# modprobe.d: initramfs-tools' own copy of /etc and /lib, the project's file
# (NVreg_ModifyDeviceFiles=0) among them.
cat /etc/modprobe.d/gpuinit-vm.conf
grep -q '^options nvidia gpus=2' /etc/modprobe.d/gpuinit-vm.conf || fail "no gpus=2 in modprobe.d"
grep -qs 'NVreg_ModifyDeviceFiles=0' /usr/lib/modprobe.d/gpu-restriction.conf /lib/modprobe.d/gpu-restriction.conf ||
  fail "no modprobe.d/gpu-restriction.conf in the initramfs"
find /lib/modules -name 'nvidia*.ko*'
! grep -q '^nvidia ' /proc/modules || fail "nvidia was loaded before the scenario"

# No arguments: nvidia, then nvidia_uvm, from the initramfs's own modules,
# with modprobe.d's options.
gpu-modload
grep -E '^nvidia(_uvm)? ' /proc/modules
ls /proc/driver/nvidia/gpus
[ "$(ls /proc/driver/nvidia/gpus | wc -l)" = 2 ] || fail "the driver did not get gpus=2 from modprobe.d"
grep ModifyDeviceFiles /proc/driver/nvidia/params
gpu-modload --check
gpu-mknod -v
ls -ln /dev/nvidia*
for n in 0 1; do
  got=$(stat -c '%F %t:%T %U:%G %a' "/dev/nvidia$n")
  [ "$got" = "character special file c3:$n root:nvidia$n 660" ] || fail "/dev/nvidia$n is '$got'"
done
[ ! -e /dev/nvidia2 ] || fail "/dev/nvidia2 for a GPU that is not there"
[ -c /dev/nvidiactl ] && [ -c /dev/nvidia-uvm ] || fail "no nvidiactl or nvidia-uvm"
gpu-mknod | grep "nothing to do" || fail "a second gpu-mknod changed something"
