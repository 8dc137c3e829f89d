# shellcheck shell=bash
# Sourced by run-vm-test.sh after flavour_tree: $tree is the image sysvinit
# boots.
# shellcheck disable=SC2154
# The project's SysV script, which the package registered disabled, enabled
# as the README's workstation recipe for SysV init says, word for word
# (<!-- recipe: workstation-sysv -->; the account its PERSIST_ARGS name is
# the postinst's), and four stand-in GPUs that take 300 ms each to
# initialize, from modprobe.d as a machine would set them.
# shellcheck disable=SC2154 # $here comes from run-vm-test.sh
"$here/../readme/check-readme.sh" extract "$here/../../README.md" workstation-sysv \
  >"$tree/root/recipe.sh"
chroot "$tree" sh -e /root/recipe.sh
rm "$tree/root/recipe.sh"
echo "options nvidia gpus=4 init_ms=300" >"$tree/etc/modprobe.d/gpuinit-vm.conf"
# A stand-in for Slurm's node daemon, with slurmd's own LSB dependencies: it
# records what a job scheduler would find at its start.
cat >"$tree/etc/init.d/slurmd" <<'SCRIPT'
#!/bin/sh
### BEGIN INIT INFO
# Provides:          slurmd
# Required-Start:    $remote_fs $syslog
# Required-Stop:     $remote_fs $syslog
# Default-Start:     2 3 4 5
# Default-Stop:      0 1 6
# Short-Description: stand-in for Slurm's node daemon
### END INIT INFO
case "$1" in
start)
	{
		for n in 0 1 2 3; do
			if [ -c /dev/nvidia$n ]; then
				echo "nvidia$n $(stat -c '%t:%T %U:%G %a' /dev/nvidia$n)"
			else
				echo "nvidia$n missing"
			fi
		done
		pid=$(cat /run/gpu-persist/gpu-persist.pid 2>/dev/null) || pid=none
		if [ "$(cat /proc/$pid/comm 2>/dev/null)" = gpu-persist ]; then
			echo "gpu-persist running"
		else
			echo "gpu-persist not running"
		fi
		cat /proc/driver/nvidia-test/counters
	} >/run/slurmd.saw 2>&1
	;;
esac
exit 0
SCRIPT
chmod 755 "$tree/etc/init.d/slurmd"
chroot "$tree" update-rc.d slurmd defaults
