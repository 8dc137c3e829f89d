# The boot wiring under systemd: with the gpuinit packages installed,
# the stand-in driver loaded by systemd-modules-load, and gpu-restriction
# and gpu-persist enabled, a boot gives every node its policy's group and a
# gpu-persist that holds every GPU, with no failed unit; both units pass
# systemd-analyze verify. Hotplug goes through the udev rule: a GPU unbound
# or removed (after gpu-persist disable) loses its node, and bound again or
# rescanned gets it back, and gpu-persist holds it after enable. A policy
# naming a missing group fails gpu-restriction.service with gpu-mknod's
# exact line in the journal, and that GPU's node is root-only, not wider.
#
# vm-flavour: debian-systemd
. /scenario-common.sh
counter() { awk -v m="$1" -v c="$2" '$1 == m { print $c }' /proc/driver/nvidia-test/counters; }
state_of() { gpu-persist status | awk -v m="$1" '$1 == m { print $3 }'; }
node() { stat -c '%U:%G %a %t:%T' "$1"; }
bdf_of_minor() {
  grep -l "^Device Minor:[[:space:]]*$1\$" /proc/driver/nvidia/gpus/*/information | cut -d/ -f6
}

[ "$(readlink /proc/1/exe)" = /usr/lib/systemd/systemd ] || fail "PID 1 is $(readlink /proc/1/exe)"
systemctl is-enabled gpu-restriction.service gpu-persist.service
wait_for 'systemctl is-active -q gpu-persist.service' 600
systemctl status --no-pager gpu-restriction.service gpu-persist.service || true
[ "$(systemctl show -p ActiveState --value gpu-restriction.service)" = active ] ||
  fail "gpu-restriction.service is not active"
systemctl --failed --no-legend --plain | tee /tmp/failed
[ ! -s /tmp/failed ] || fail "failed units: $(cat /tmp/failed)"
systemd-analyze verify --man=no gpu-restriction.service gpu-persist.service 2>&1 | tee /tmp/verify
[ ! -s /tmp/verify ] || fail "systemd-analyze verify complained"
systemd-analyze critical-chain gpu-persist.service --no-pager || true
echo "BOOT userspace-ready cs=$(now)"

# Every node, with the default policy's groups; the driver loaded them.
lsmod | grep -q '^nvidia_uvm ' || fail "nvidia_uvm is not loaded"
for minor in 0 1 2 3; do
  [ "$(node /dev/nvidia$minor)" = "root:nvidia$minor 660 c3:$minor" ] ||
    fail "/dev/nvidia$minor is $(node /dev/nvidia$minor)"
done
[ "$(node /dev/nvidiactl)" = "root:root 666 c3:ff" ] || fail "/dev/nvidiactl is $(node /dev/nvidiactl)"
[ -c /dev/nvidia-uvm ] && [ -c /dev/nvidia-uvm-tools ] || fail "no nvidia-uvm nodes"
gpu-mknod --check -q || fail "gpu-mknod --check: the nodes differ from the policy after boot"

# gpu-persist (as its own user, from sysusers.d) holds every GPU, once.
gpu-persist status | tee /tmp/status
grep -q "running as uid" /tmp/status || fail "gpu-persist does not run as --user gpu-persist"
for minor in 0 1 2 3; do
  [ "$(state_of $minor)" = held ] || fail "GPU $minor is not held"
  [ "$(counter $minor 3)" = 1 ] && [ "$(counter $minor 4)" = 0 ] ||
    fail "GPU $minor: inits/deinits $(counter $minor 3)/$(counter $minor 4), not 1/0"
done

# Unbound after disable: the udev rule removes its node; bound again, the
# node is back (group nvidia1), and enable holds it again.
bdf=$(bdf_of_minor 1)
gpu-persist disable "$bdf"
echo "$bdf" >/sys/bus/pci/drivers/nvidia/unbind
udevadm settle --timeout=60
[ ! -e /dev/nvidia1 ] || fail "/dev/nvidia1 is still there after the unbind"
echo "$bdf" >/sys/bus/pci/drivers/nvidia/bind
udevadm settle --timeout=60
[ "$(node /dev/nvidia1)" = "root:nvidia1 660 c3:1" ] || fail "after the bind: /dev/nvidia1 $(node /dev/nvidia1 || true)"
gpu-persist enable "$bdf"
wait_for '[ "$(state_of 1)" = held ]' 100

# Removed after disable, then rescanned: the same through remove and add.
bdf=$(bdf_of_minor 2)
gpu-persist disable "$bdf"
echo 1 >"/sys/bus/pci/devices/$bdf/remove"
udevadm settle --timeout=60
[ ! -e /dev/nvidia2 ] || fail "/dev/nvidia2 is still there after the removal"
[ ! -e /dev/char/195:2 ] || fail "/dev/char/195:2 is still there after the removal"
echo 1 >/sys/bus/pci/rescan
udevadm settle --timeout=60
[ "$(node /dev/nvidia2)" = "root:nvidia2 660 c3:2" ] || fail "after the rescan: /dev/nvidia2 $(node /dev/nvidia2 || true)"
gpu-persist enable "$bdf"
wait_for '[ "$(state_of 2)" = held ]' 100
[ "$(counter 2 3)" = 2 ] || fail "GPU 2 was not initialized again after the rescan"

# A policy naming a missing group: the unit fails with gpu-mknod's line, and
# the GPU's node becomes root-only, never wider.
bdf=$(bdf_of_minor 3)
echo "gpu=$bdf group=nosuchgroup" >/etc/gpu-restriction.conf
if systemctl restart gpu-restriction.service; then fail "gpu-restriction.service started with a missing group"; fi
[ "$(systemctl show -p ActiveState --value gpu-restriction.service)" = failed ] ||
  fail "gpu-restriction.service is not failed"
journalctl -u gpu-restriction.service -o cat --no-pager | tee /tmp/journal
expected="gpu-mknod: error: group nosuchgroup does not exist (GPU 3 ($bdf), rule from /etc/gpu-restriction.conf:1): run 'groupadd nosuchgroup' and rerun; /dev/nvidia3 stays root-only 0600"
grep -qxF "$expected" /tmp/journal || fail "the journal lacks: $expected"
[ "$(node /dev/nvidia3)" = "root:root 600 c3:3" ] || fail "/dev/nvidia3 is $(node /dev/nvidia3)"
for minor in 0 1 2; do
  [ "$(node /dev/nvidia$minor)" = "root:nvidia$minor 660 c3:$minor" ] || fail "/dev/nvidia$minor changed"
done
# Fixed, the unit starts again and the node gets its group back.
rm /etc/gpu-restriction.conf
systemctl restart gpu-restriction.service
[ "$(node /dev/nvidia3)" = "root:nvidia3 660 c3:3" ] || fail "/dev/nvidia3 not repaired"
systemctl is-active -q gpu-persist.service || fail "gpu-persist stopped with gpu-restriction"

# The module rule: nvidia_uvm loaded by plain modprobe (not gpu-modload)
# gets its nodes from udev, on its new dynamic major.
rm /dev/nvidia-uvm /dev/nvidia-uvm-tools
rmmod nvidia_uvm
modprobe nvidia_uvm
udevadm settle --timeout=60
major=$(awk '$2 == "nvidia-uvm" { print $1 }' /proc/devices)
[ "$(stat -c '%U:%G %a %t' /dev/nvidia-uvm)" = "root:root 666 $(printf %x "$major")" ] ||
  fail "/dev/nvidia-uvm after modprobe: $(stat -c '%U:%G %a %t' /dev/nvidia-uvm || true)"
[ -c /dev/nvidia-uvm-tools ] || fail "no /dev/nvidia-uvm-tools after modprobe"

# Every event the rule ran gpu-mknod for (module adds, seen twice: loaded
# before udevd, then replayed at coldplug; binds, unbinds, removals) ran
# cleanly.
journalctl -b -u systemd-udevd -o cat --no-pager | tee /tmp/udevd
if grep -i "gpu-mknod.*failed\|failed.*gpu-mknod" /tmp/udevd; then fail "a gpu-mknod run by udev failed"; fi

start=$(now)
systemctl stop gpu-persist.service
echo "BENCH stop-4-gpus cs=$(($(now) - start))"
for minor in 0 1 2 3; do
  [ "$(counter $minor 5)" = 0 ] || fail "GPU $minor still held after systemctl stop"
done
