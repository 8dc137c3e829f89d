# MIG capability files as the real driver numbers them: every possible
# instance in mig-minors, the existing ones under capabilities/; as the real
# ones (open-gpu-kernel-modules 580.142 kernel-open/nvidia/nv-caps.c) they
# are 0444, so only root writes them (CAP_DAC_OVERRIDE), and a write is
# buffered per open file (127 bytes at most) and applied when it is closed.
#
# vm-label: vm-driver
. /scenario-common.sh
insmod $extra/nvidia.ko gpus=2 mig=2
minors=/proc/driver/nvidia-caps/mig-minors
head -4 $minors
[ "$(wc -l <$minors)" = 4322 ] || fail "mig-minors has $(wc -l <$minors) lines, want 2 + 32*15*9"
grep -qx "gpu2/gi7/access 336" $minors || fail "gpu2/gi7/access"
grep -qx "gpu2/gi7/ci0/access 337" $minors || fail "gpu2/gi7/ci0/access"
caps=/proc/driver/nvidia/capabilities
cat $caps/mig/config
grep -qx "DeviceFileMinor: 1" $caps/mig/config || fail "config minor"
grep -qx "DeviceFileMode: 256" $caps/mig/config || fail "config mode (0400 in decimal)"
find $caps -name access | sort
for g in 0 1; do
  for i in 1 2; do
    gi=$(awk -v k="gpu$g/gi$i/access" '$1 == k {print $2}' $minors)
    ci=$(awk -v k="gpu$g/gi$i/ci0/access" '$1 == k {print $2}' $minors)
    grep -qx "DeviceFileMinor: $gi" $caps/gpu$g/mig/gi$i/access || fail "gpu$g gi$i"
    grep -qx "DeviceFileMinor: $ci" $caps/gpu$g/mig/gi$i/ci0/access || fail "gpu$g gi$i ci0"
    grep -qx "DeviceFileMode: 292" $caps/gpu$g/mig/gi$i/ci0/access || fail "mode 0444"
  done
done
[ ! -e $caps/gpu0/mig/gi3 ] || fail "an instance that does not exist"
access=$caps/gpu0/mig/gi1/access
for file in $access $caps/gpu0/mig/gi1/ci0/access $caps/mig/config $caps/mig/monitor; do
  [ "$(stat -c %a $file)" = 444 ] || fail "$file is $(stat -c %a $file), not 0444"
done
grep -qx "DeviceFileModify: 1" $access || fail "NVreg_ModifyDeviceFiles' default 1"
exec 5>$access
printf 'DeviceFile' >&5
printf 'Modify: 0\n' >&5
grep -qx "DeviceFileModify: 1" $access || fail "a write applied before its file was closed"
exec 5>&-
grep -qx "DeviceFileModify: 0" $access || fail "the write was not applied at the close"
grep -qx "DeviceFileModify: 1" $caps/gpu0/mig/gi1/ci0/access || fail "another cap changed"
if dd if=/dev/zero of=$access bs=200 count=1 conv=notrunc 2>/tmp/nospc; then
  fail "a 200-byte write"
fi
grep -q "No space left" /tmp/nospc || fail "200 bytes: $(cat /tmp/nospc)"
printf 'DeviceFileModify: 1\n' >$access
grep -qx "DeviceFileModify: 1" $access || fail "root's write"
if su -s /bin/sh alice -c "printf 'DeviceFileModify: 0\n' >$access" 2>/tmp/alice.err; then
  fail "alice wrote a cap file"
fi
grep -q "Permission denied" /tmp/alice.err || fail "alice: $(cat /tmp/alice.err)"
grep -q "nvidia-caps" /proc/devices || fail "no nvidia-caps major"
rmmod nvidia
[ ! -e /proc/driver/nvidia-caps ] || fail "rmmod left /proc/driver/nvidia-caps"
# More GPU instances than a GPU has are refused, not numbered into the next GPU.
if insmod $extra/nvidia.ko gpus=2 mig=8; then fail "mig=8 was accepted"; fi
dmesg | grep "fake-nvidia: mig=8 is out of range 0-7" || fail "no error for mig=8"
[ ! -e /proc/driver/nvidia ] || fail "a refused load left /proc/driver/nvidia"
