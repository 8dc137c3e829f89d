# gpu-mknod on the stand-in's MIG capabilities (2 GPUs x 2 GPU instances,
# NVreg_ModifyDeviceFiles=1): /dev/nvidia-caps/nvidia-cap<minor> for config,
# monitor and every GI and CI, with mig-minors' minors and the driver's
# modes, and the policy's group for GPU 0's GI 1 and its CI (alice's
# nvidia0, 0440); every access file says DeviceFileModify: 0 afterwards;
# alice opens her instance's cap nodes, bob gets EACCES there; a second run
# has nothing to do; reloaded with one instance per GPU, the destroyed
# instances' nodes and links are removed.
. /scenario-common.sh
insmod $extra/nvidia.ko gpus=2 mig=2 NVreg_ModifyDeviceFiles=1
echo "gpu=0 gi=1 group=nvidia0" >/etc/gpu-restriction.conf
grep -h DeviceFileModify /proc/driver/nvidia/capabilities/mig/config
gpu-mknod
major=$(awk '$2 == "nvidia-caps" { print $1 }' /proc/devices)
minor_of() { awk -v k="$1" '$1 == k { print $2 }' /proc/driver/nvidia-caps/mig-minors; }
expect_cap() {
  got=$(stat -c '%t:%T %U:%G %a' "/dev/nvidia-caps/nvidia-cap$1")
  [ "$got" = "$(printf '%x:%x' "$major" "$1") $2" ] || fail "nvidia-cap$1 is '$got', want $2"
  [ "$(readlink "/dev/char/$major:$1")" = "../nvidia-caps/nvidia-cap$1" ] || fail "no /dev/char/$major:$1"
}
ls -ln /dev/nvidia-caps
[ "$(stat -c '%U:%G %a' /dev/nvidia-caps)" = "root:root 755" ] || fail "/dev/nvidia-caps"
expect_cap 1 "root:root 400"
expect_cap 2 "root:root 444"
for g in 0 1; do
  for i in 1 2; do
    want="root:root 444"
    [ "$g$i" = 01 ] && want="root:nvidia0 440"
    expect_cap "$(minor_of "gpu$g/gi$i/access")" "$want"
    expect_cap "$(minor_of "gpu$g/gi$i/ci0/access")" "$want"
  done
done
[ "$(ls /dev/nvidia-caps | wc -l)" = 10 ] || fail "not 10 cap nodes"
# nvidia-modprobe leaves the nodes alone now.
find /proc/driver/nvidia/capabilities -name access -o -name config -o -name monitor |
  while read -r file; do
    grep -qx "DeviceFileModify: 0" "$file" || fail "$file still has DeviceFileModify 1"
  done
gi=$(minor_of gpu0/gi1/access)
ci=$(minor_of gpu0/gi1/ci0/access)
su -s /bin/sh alice -c "exec 3</dev/nvidia-caps/nvidia-cap$gi 4</dev/nvidia-caps/nvidia-cap$ci" ||
  fail "alice (nvidia0) cannot open her instance's caps"
if su -s /bin/sh bob -c "exec 3</dev/nvidia-caps/nvidia-cap$ci" 2>/tmp/bob.err; then
  fail "bob opened alice's instance"
fi
grep -q "Permission denied" /tmp/bob.err || fail "bob: $(cat /tmp/bob.err)"
gpu-mknod | grep "nothing to do" || fail "a second run changed something"
gpu-mknod --check

# GI 2 of each GPU destroyed (the stand-in reloaded with mig=1): pruned.
rmmod nvidia
insmod $extra/nvidia.ko gpus=2 mig=1 NVreg_ModifyDeviceFiles=0
gpu-mknod -v | tee /tmp/prune
for g in 0 1; do
  for key in "gpu$g/gi2/access" "gpu$g/gi2/ci0/access"; do
    minor=$(minor_of "$key")
    [ ! -e "/dev/nvidia-caps/nvidia-cap$minor" ] || fail "nvidia-cap$minor ($key) was not removed"
    [ ! -L "/dev/char/$major:$minor" ] || fail "/dev/char/$major:$minor was not removed"
  done
done
[ "$(ls /dev/nvidia-caps | wc -l)" = 6 ] || fail "not 6 cap nodes after the reload"
expect_cap "$gi" "root:nvidia0 440"
