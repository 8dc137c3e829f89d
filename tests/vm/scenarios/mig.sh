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

# Instances made and destroyed at run time, as RM registers and unregisters
# their capabilities: mig_on=1 is a GPU whose MIG mode survived a reboot and
# whose instances did not; the root-only test file nvidia-test/mig creates
# them, each access file with mig-minors' minor, and a reload loses them.
ctl=/proc/driver/nvidia-test/mig
mig_error() { # COMMAND ERROR-TEXT: the command fails with that error
  if echo "$1" >$ctl 2>/tmp/mig.err; then fail "'$1' was accepted"; fi
  grep -q "$2" /tmp/mig.err || fail "'$1': $(cat /tmp/mig.err), not $2"
}
insmod $extra/nvidia.ko gpus=2 mig_on=1
[ "$(stat -c %a $ctl)" = 600 ] || fail "$ctl is $(stat -c %a $ctl), not 0600"
[ -d $caps/gpu1/mig ] || fail "no $caps/gpu1/mig"
[ -z "$(find $caps -name access -path '*/gpu*')" ] || fail "instances before any was created"
[ "$(cat $ctl)" = "$(printf 'gpu 0 mig 1 1\ngpu 1 mig 1 1')" ] || fail "state: $(cat $ctl)"
echo "create-gi 1 7 19 6" >$ctl
echo "create-ci 1 7 0 1" >$ctl
echo "create-gi 1 1" >$ctl
cat $ctl
grep -qx "gi 1 7 19 6" $ctl || fail "GI 7's record"
grep -qx "ci 1 7 0 1" $ctl || fail "CI 0's record"
grep -qx "gi 1 1" $ctl || fail "GI 1's record without a profile"
grep -qx "DeviceFileMinor: $((3 + 135 + 9 * 7))" $caps/gpu1/mig/gi7/access || fail "GI 7's minor"
grep -qx "DeviceFileMinor: $((4 + 135 + 9 * 7))" $caps/gpu1/mig/gi7/ci0/access || fail "CI 0's minor"
grep -qx "DeviceFileMode: 292" $caps/gpu1/mig/gi7/ci0/access || fail "CI 0's mode"
grep -qx "DeviceFileModify: 1" $caps/gpu1/mig/gi7/access || fail "a new cap's DeviceFileModify"
[ "$(stat -c %a $caps/gpu1/mig/gi7)" = 555 ] || fail "gi7 is $(stat -c %a $caps/gpu1/mig/gi7), not 0555"
mig_error "create-gi 1 7" "File exists"
mig_error "create-gi 1 15" "Invalid argument"
mig_error "create-ci 1 7 8" "Invalid argument"
mig_error "create-ci 1 3 0" "No such file"
mig_error "create-gi 5 1" "No such device"
mig_error "destroy-gi 1 7" "busy"
mig_error "mode 1 0 0" "busy"
mig_error "frobnicate 1 7" "Invalid argument"
if su -s /bin/sh alice -c "echo 'destroy-gi 1 1' >$ctl" 2>/tmp/alice.err; then fail "alice wrote $ctl"; fi
echo "destroy-ci 1 7 0" >$ctl
[ ! -e $caps/gpu1/mig/gi7/ci0 ] || fail "a destroyed CI's directory stayed"
mig_error "destroy-ci 1 7 0" "No such file"
echo "destroy-gi 1 7" >$ctl
echo "destroy-gi 1 1" >$ctl
[ ! -e $caps/gpu1/mig/gi7 ] || fail "a destroyed GI's directory stayed"
echo "mode 0 0 1" >$ctl
grep -qx "gpu 0 mig 0 1" $ctl || fail "GPU 0's mode"
mig_error "create-gi 0 1" "not supported"
# Held open while its instance is destroyed, an access file is run down by
# procfs; the same instance created again reads as new.
echo "create-gi 1 3" >$ctl
exec 6<$caps/gpu1/mig/gi3/access
echo "destroy-gi 1 3" >$ctl
exec 6<&-
echo "create-gi 1 3" >$ctl
grep -qx "DeviceFileMinor: $((3 + 135 + 27))" $caps/gpu1/mig/gi3/access || fail "GI 3 again"
rmmod nvidia
# A reboot: the mode is the module's option again, every instance is gone.
insmod $extra/nvidia.ko gpus=2 mig_on=1
[ "$(cat $ctl)" = "$(printf 'gpu 0 mig 1 1\ngpu 1 mig 1 1')" ] || fail "after the reload: $(cat $ctl)"
[ -z "$(find $caps -name access -path '*/gpu*')" ] || fail "instances survived the reload"
rmmod nvidia
# mig=N's instances are in the state too, without profiles.
insmod $extra/nvidia.ko gpus=1 mig=2
[ "$(cat $ctl)" = "$(printf 'gpu 0 mig 1 1\ngi 0 1\nci 0 1 0\ngi 0 2\nci 0 2 0')" ] || fail "mig=2: $(cat $ctl)"
rmmod nvidia
