# The project's SysV script in a Debian booting sysvinit, enabled with
# update-rc.d: rc starts it in LSB order, after udev and before slurmd, and
# slurmd finds every /dev/nvidiaN with its per-GPU group and gpu-persist
# holding the GPUs. service's status, stop (gpu-persist releases the GPUs,
# the nodes stay) and a second start (nothing to redo, the GPUs held again)
# give the LSB answers, and a killed gpu-persist is "dead, pidfile remains".
#
# vm-flavour: debian-sysvinit
. /scenario-common.sh
# held_as INITS DEINITS: each of the 4 GPUs has seen INITS inits and
# DEINITS teardowns.
held_as() {
	cat /proc/driver/nvidia-test/counters
	[ "$(awk '!/^#/ { print $3, $4 }' /proc/driver/nvidia-test/counters | uniq -c | awk '{ $1 = $1; print }')" = "4 $1 $2" ]
}
nodes() { stat -c '%n %F %t:%T %U:%G %a inode %i' /dev/nvidia0 /dev/nvidia1 /dev/nvidia2 /dev/nvidia3; }
status() {
	rc=0
	service gpu-restriction status || rc=$?
	echo "status: $rc"
	[ "$rc" = "$1" ] || fail "service gpu-restriction status exited $rc, want $1"
}
[ "$(readlink /proc/1/exe)" = /usr/sbin/init ] || fail "PID 1 is $(readlink /proc/1/exe)"
runlevel

# LSB order: update-rc.d put gpu-restriction after udev and before slurmd;
# rc's makefile-style concurrency starts slurmd only after it.
ls /etc/rcS.d /etc/rc2.d
# place NAME: where rc starts NAME, as a number that sorts like rc's order.
place() {
	for link in /etc/rcS.d/S??"$1" /etc/rc2.d/S??"$1"; do
		[ -e "$link" ] || continue
		number=${link##*/S}
		number=${number%"$1"}
		case $link in /etc/rcS.d/*) echo $((100 + ${number#0})) ;; *) echo $((200 + ${number#0})) ;; esac
		return 0
	done
	fail "$1 is not started in rcS or runlevel 2"
}
udev=$(place udev) gpu=$(place gpu-restriction) slurmd=$(place slurmd)
echo "udev $udev, gpu-restriction $gpu, slurmd $slurmd"
[ "$udev" -lt "$gpu" ] && [ "$gpu" -lt "$slurmd" ] || fail "gpu-restriction is not between udev and slurmd"
grep -E '^slurmd:' /etc/init.d/.depend.start
grep -qE '^slurmd:.* gpu-restriction( |$)' /etc/init.d/.depend.start || fail "slurmd does not wait for gpu-restriction"

# What slurmd found at its start.
cat /run/slurmd.saw
for n in 0 1 2 3; do
	grep -qx "nvidia$n c3:$n root:nvidia$n 660" /run/slurmd.saw || fail "slurmd found no good /dev/nvidia$n"
done
grep -qx "gpu-persist running" /run/slurmd.saw || fail "slurmd started before gpu-persist"
for n in 0 1 2 3; do
	grep -qE "^$n 10000:00:0$n.0 1 0 1 " /run/slurmd.saw || fail "GPU $n was not held when slurmd started"
done

# Now: the nodes, the status, every GPU held once.
nodes | tee /tmp/nodes.boot
for n in 0 1 2 3; do
	grep -q "^/dev/nvidia$n character special file c3:$n root:nvidia$n 660 " /tmp/nodes.boot || fail "/dev/nvidia$n"
done
status 0
held_as 1 0 || fail "a GPU is not held once by gpu-persist"
pid=$(cat /run/gpu-persist/gpu-persist.pid)
[ "$(cat "/proc/$pid/comm")" = gpu-persist ] || fail "the pidfile names $pid, not gpu-persist"

# stop: gpu-persist releases every GPU (each torn down once) and exits; the
# nodes stay as they are; status then says not running (3).
service gpu-restriction stop
held_as 1 1 || fail "stop did not release every GPU"
[ ! -d "/proc/$pid" ] || fail "gpu-persist (pid $pid) still runs after stop"
! pidof gpu-persist || fail "a gpu-persist still runs after stop"
nodes | cmp /tmp/nodes.boot - || fail "stop changed the nodes"
status 3

# start again: nothing to redo on the nodes, and the GPUs are held again.
service gpu-restriction start
nodes | cmp /tmp/nodes.boot - || fail "a second start changed the nodes"
held_as 2 1 || fail "the second start did not hold every GPU again"
status 0

# Killed: status says dead with a pidfile (1); start holds the GPUs again.
pid=$(cat /run/gpu-persist/gpu-persist.pid)
kill -9 "$pid"
wait_for "[ ! -d /proc/$pid ]" 50
[ -e /run/gpu-persist/gpu-persist.pid ] || fail "the pidfile went with kill -9"
status 1
service gpu-restriction start
status 0
