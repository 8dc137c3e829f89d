# The MIG step of the project's SysV script: in a Debian booting sysvinit,
# with a layout declared (gpu=* mig=on gi=1g.10gb*3) and the stand-in driver
# up with MIG on and no instances, rc's "gpu-restriction start" made the six
# instances after gpu-persist, with their cap nodes, leases and names. A
# reboot as far as a module can have one (stop, the driver unloaded, /run's
# leases and names and /dev's cap nodes removed) loses them; "start" loads
# the driver and makes the same instances again. A gres.conf that misses
# one instance fails the start with its line; MIG_GRES_CONF="" in
# /etc/default/gpu-restriction skips the check.
#
# vm-flavour: debian-sysvinit
. /scenario-common.sh
caps=/proc/driver/nvidia/capabilities
ctl=/proc/driver/nvidia-test/mig
# made WHEN: the six compute instances, a cap node for each access file, a
# lease for each CI and the names file.
made() {
	find $caps -path '*/gpu*/mig/gi*/ci*/access' | sort | tee /tmp/cis
	[ "$(wc -l </tmp/cis)" = 6 ] || fail "$1: $(wc -l </tmp/cis) compute instances, not 6"
	find $caps -path '*/gpu*' -name access >/tmp/access
	while read -r access; do
		minor=$(awk '$1 == "DeviceFileMinor:" { print $2 }' "$access")
		[ -c "/dev/nvidia-caps/nvidia-cap$minor" ] || fail "$1: no cap node $minor for $access"
	done </tmp/access
	[ "$(find /run/gpu-mig -type p | wc -l)" = 6 ] || fail "$1: not 6 leases in /run/gpu-mig"
	[ -f /run/gpu-mig/names ] || fail "$1: no names file"
	gpu-mig list
}
[ "$(readlink /proc/1/exe)" = /usr/sbin/init ] || fail "PID 1 is $(readlink /proc/1/exe)"
cat /etc/gpu-mig-layout.conf
service gpu-restriction status || fail "gpu-restriction did not start at boot"
cat $ctl
made boot
cp $ctl /tmp/state-boot
mkdir -p /etc/slurm
gpu-mig gres --node "$(hostname)" >/etc/slurm/gres.conf

# The reboot: the script stopped (gpu-persist lets the GPUs go), the driver
# unloaded, what a fresh /run and /dev would not have removed.
service gpu-restriction stop
modprobe -r nvidia_uvm 2>/dev/null || true
modprobe -r nvidia
rm -rf /run/gpu-mig /dev/nvidia-caps
find /dev/char -lname '../nvidia-caps/*' -delete
service gpu-restriction start >/tmp/start 2>&1 || { cat /tmp/start; fail "start after the reboot failed"; }
cat /tmp/start
made reboot
[ "$(cat $ctl)" = "$(cat /tmp/state-boot)" ] || fail "after the reboot the instances differ: $(cat $ctl)"

# A gres.conf missing an instance fails the start, naming gres.conf.
service gpu-restriction stop
sed -i "$(grep -n 'MultipleFiles=' /etc/slurm/gres.conf | tail -n 1 | cut -d: -f1)d" /etc/slurm/gres.conf
if service gpu-restriction start >/tmp/start 2>&1; then cat /tmp/start; fail "start passed with a wrong gres.conf"; fi
cat /tmp/start
grep -q 'gres.conf' /tmp/start || fail "the start's output does not name gres.conf"
echo 'MIG_GRES_CONF=""' >>/etc/default/gpu-restriction
service gpu-restriction stop
service gpu-restriction start >/tmp/start 2>&1 || { cat /tmp/start; fail "MIG_GRES_CONF=\"\" did not skip the check"; }
service gpu-restriction status
