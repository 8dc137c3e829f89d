# A member of nvidia0 opens /dev/nvidia0; anyone else gets EACCES.
. /scenario-common.sh
insmod $extra/nvidia.ko gpus=2
gpu-mknod -q
su -s /bin/sh alice -c 'exec 3</dev/nvidia0' || fail "alice (nvidia0) cannot open /dev/nvidia0"
if su -s /bin/sh bob -c 'exec 3</dev/nvidia0' 2>/tmp/bob.err; then
  fail "bob (nvidia1) opened /dev/nvidia0"
fi
cat /tmp/bob.err
grep -q "Permission denied" /tmp/bob.err || fail "bob's open failed, but not with EACCES"
su -s /bin/sh bob -c 'exec 3</dev/nvidia1' || fail "bob (nvidia1) cannot open /dev/nvidia1"
