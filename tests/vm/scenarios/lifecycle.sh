# Opening and closing /dev/nvidia0 twice: two inits and two deinits.
#
# vm-label: vm-driver
. /scenario-common.sh
insmod $extra/nvidia.ko gpus=1
gpu-mknod -q
for round in 1 2; do
  exec 3</dev/nvidia0
  exec 3<&-
done
cat /proc/driver/nvidia-test/counters
set -- $(grep '^0 ' /proc/driver/nvidia-test/counters)
[ "$3" = 2 ] && [ "$4" = 2 ] && [ "$5" = 0 ] || fail "counters: $*"
[ "$(dmesg | grep -c 'fake-nvidia: gpu 0 .* init$')" = 2 ] || fail "dmesg init count"
[ "$(dmesg | grep -c 'fake-nvidia: gpu 0 .* deinit$')" = 2 ] || fail "dmesg deinit count"
