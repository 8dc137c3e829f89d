# gpu-persist as a systemd Type=notify service on a real systemd and udev:
# with 16 GPUs that take 500 ms each to initialize, the start job completes
# (READY=1) only once every GPU is held, and well before the serial sum;
# STATUS= is what systemctl shows; a GPU removed and rescanned is held again
# through udev's bind event; systemctl stop releases every GPU in bounded
# time and the journal has the daemon's lines.
#
# vm-flavour: debian-systemd
. /scenario-common.sh
counter() { awk -v m="$1" -v c="$2" '$1 == m { print $c }' /proc/driver/nvidia-test/counters; }
state_of() { gpu-persist status | awk -v m="$1" '$1 == m { print $3 }'; }

echo 'gpupersist:x:990:990:gpu-persist:/:/usr/sbin/nologin' >>/etc/passwd
echo 'gpupersist:x:990:' >>/etc/group
for n in 4 5 6 7 8 9 10 11 12 13 14 15; do echo "nvidia$n:x:10$((n + 10)):" >>/etc/group; done
modprobe nvidia gpus=16 init_ms=500
udevadm settle --timeout=60
gpu-mknod -q
[ -e /run/udev/control ] || fail "udevd is not running"

start=$(now)
systemd-run --unit=gpu-persist-vmtest -p Type=notify -p KillMode=mixed \
  /usr/sbin/gpu-persist --user gpupersist
took=$(($(now) - start))
echo "BENCH start-to-ready-16-gpus cs=$took serial-cs=800"
for minor in $(seq 0 15); do
  [ "$(counter $minor 3)" = 1 ] && [ "$(counter $minor 5)" = 1 ] ||
    fail "GPU $minor not held when the start job completed (READY=1 too early)"
done
[ "$took" -ge 50 ] || fail "READY=1 after ${took} cs: before the 500 ms inits could finish"
[ "$took" -lt 400 ] || fail "16 inits took ${took} cs: not in parallel"
systemctl show -p StatusText gpu-persist-vmtest | tee /tmp/status
grep -q "StatusText=holding 16 of 16 GPU(s)" /tmp/status || fail "STATUS= not shown"
gpu-persist status | grep -q "hotplug udev" || fail "not listening to udev"

# Removed after disable, then rescanned: udev's bind event (the node was
# kept) gets it held again without a restart.
gpu-persist disable 10000:00:05.0
echo 1 >/sys/bus/pci/devices/10000:00:05.0/remove
gpu-persist enable 10000:00:05.0
echo 1 >/sys/bus/pci/rescan
udevadm settle --timeout=60
wait_for '[ "$(state_of 5)" = held ]' 100
[ "$(counter 5 5)" = 1 ] || fail "GPU 5 not held after the rescan"

start=$(now)
systemctl stop gpu-persist-vmtest
echo "BENCH stop-16-gpus cs=$(($(now) - start))"
for minor in $(seq 0 15); do
  [ "$(counter $minor 5)" = 0 ] || fail "GPU $minor still held after systemctl stop"
done
journalctl -u gpu-persist-vmtest --no-pager | tail -40 | tee /tmp/journal
grep -q "holding 16 of 16 GPU(s)" /tmp/journal || fail "no daemon lines in the journal"
if grep -q "helper exited" /tmp/journal; then fail "the helper died before the daemon"; fi
