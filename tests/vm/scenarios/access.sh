# A member of nvidia0 (a supplementary group) opens /dev/nvidia0; anyone
# else gets EACCES.
. /scenario-common.sh
insmod $extra/nvidia.ko gpus=2
gpu-mknod -q
# Their primary groups are their own (2000, 2001): su's initgroups gives them
# nvidia0 (1000) and nvidia1 (1001) as supplementary groups.
su -s /bin/sh alice -c id
[ "$(su -s /bin/sh alice -c 'id -g')" = 2000 ] || fail "alice's primary group is not 2000"
su -s /bin/sh alice -c 'id -G' | grep -qw 1000 || fail "alice is not in nvidia0 after su"
if su -s /bin/sh bob -c 'id -G' | grep -qw 1000; then fail "bob is in nvidia0"; fi
su -s /bin/sh alice -c 'exec 3</dev/nvidia0' || fail "alice (nvidia0) cannot open /dev/nvidia0"
if su -s /bin/sh bob -c 'exec 3</dev/nvidia0' 2>/tmp/bob.err; then
  fail "bob (nvidia1) opened /dev/nvidia0"
fi
cat /tmp/bob.err
grep -q "Permission denied" /tmp/bob.err || fail "bob's open failed, but not with EACCES"
su -s /bin/sh bob -c 'exec 3</dev/nvidia1' || fail "bob (nvidia1) cannot open /dev/nvidia1"
# NVreg_ExcludedGpus (by UUID): the driver binds the GPU but refuses to open
# it, and gpu-mknod makes no node for it.
rmmod nvidia
rm -f /dev/nvidia*
excluded=GPU-558ce122-5b8b-16a1-87d4-ce157bba0002
insmod $extra/nvidia.ko gpus=3 NVreg_ExcludedGpus=$excluded
grep -x "ExcludedGpus: \"$excluded\"" /proc/driver/nvidia/params || fail "ExcludedGpus in params"
info=/proc/driver/nvidia/gpus/10000:00:02.0/information
cat $info
grep -q "$excluded" $info || fail "the excluded GPU's UUID"
grep -q "^GPU Excluded:.*Yes" $info || fail "10000:00:02.0 is not marked excluded"
grep -q "^GPU Excluded:.*No" /proc/driver/nvidia/gpus/10000:00:01.0/information || fail "01.0 excluded"
gpu-mknod -v
[ -c /dev/nvidia1 ] || fail "no /dev/nvidia1"
[ ! -e /dev/nvidia2 ] || fail "gpu-mknod made a node for the excluded GPU"
mknod /tmp/nvidia2 c "$(awk '$2 == "nvidia" {print $1}' /proc/devices)" 2
if sh -c 'exec 3</tmp/nvidia2' 2>/tmp/root.err; then fail "root opened the excluded GPU"; fi
cat /tmp/root.err
grep -q "Operation not permitted" /tmp/root.err || fail "the excluded GPU's open did not fail with EPERM"
