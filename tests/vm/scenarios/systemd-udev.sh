# A minimal Debian booting systemd as init, the gpuinit packages installed:
# udev sees the fake GPUs' add and bind uevents, and the installed
# tools work there.
#
# vm-flavour: debian-systemd
. /scenario-common.sh
[ "$(readlink /proc/1/exe)" = /usr/lib/systemd/systemd ] || fail "PID 1 is $(readlink /proc/1/exe)"
systemctl is-active systemd-udevd
udevadm monitor --kernel --udev --subsystem-match=pci >/tmp/uevents 2>&1 &
monitor=$!
sleep 1
modprobe nvidia gpus=2
udevadm settle --timeout=60
sleep 1
kill $monitor
cat /tmp/uevents
for source in KERNEL UDEV; do
  for action in add bind; do
    grep -qE "^$source.* $action +/devices/pci10000:00/10000:00:00.0 \(pci\)" /tmp/uevents ||
      fail "no $source $action uevent for 10000:00:00.0"
  done
done
udevadm info -q property -p /sys/bus/pci/devices/10000:00:01.0 | tee /tmp/props
grep -qx "DRIVER=nvidia" /tmp/props || fail "udev has no DRIVER=nvidia"
grep -q "^USEC_INITIALIZED=" /tmp/props || fail "udev did not process the device"
[ -x /usr/sbin/gpu-mknod ] && [ -x /usr/sbin/gpu-modload ] || fail "the tools are not installed"
[ -f /usr/lib/modprobe.d/gpu-restriction.conf ] || [ -f /lib/modprobe.d/gpu-restriction.conf ] ||
  fail "modprobe.d/gpu-restriction.conf is not installed"
gpu-mknod
[ "$(stat -c '%t:%T %G %a' /dev/nvidia1)" = "c3:1 nvidia1 660" ] || fail "/dev/nvidia1"
