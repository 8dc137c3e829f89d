# shellcheck shell=bash
# Sourced by run-vm-test.sh: its variables come from there, and it reads
# flavour_memory.
# shellcheck disable=SC2034,SC2154
# Image flavour "debian-sysvinit": a debootstrapped Debian 12 (minbase with
# sysvinit-core, udev and kmod), booted as an initramfs with sysvinit as
# PID 1, the built gpuinit packages installed with apt (lib.sh's
# debian_tree: the tools under test are the package's). An LSB script,
# started last in runlevel 2, calls the shared runner. The interface is described in
# run-vm-test.sh and tests/vm/README.md.

flavour_memory=1024

flavour_needs() {
  debian_needs
}

# Its own directory: $cache/debian is debian-systemd's (and CI caches it), and
# a finished image is never rebuilt for another init.
flavour_base() {
  "$here/build-debian-image.sh" "$cache/debian-sysvinit" sysvinit-core
}

flavour_tree() {
  local tree=$1
  debian_tree "$cache/debian-sysvinit" "$tree"
  ln -sf sbin/init "$tree/init"
  # $all: insserv orders it after every other script of the runlevel, and
  # rc's startpar runs scripts of one level in parallel, so only that lets
  # a scenario see the finished boot (the daemons a setup/ script enabled).
  cat >"$tree/etc/init.d/gpuinit-vmtest" <<SCRIPT
#!/bin/sh
### BEGIN INIT INFO
# Provides:          gpuinit-vmtest
# Required-Start:    \$local_fs udev \$all
# Required-Stop:
# Default-Start:     2 3 4 5
# Default-Stop:
# Short-Description: gpuinit VM scenario
### END INIT INFO
case "\$1" in
start)
	: >/run/gpuinit-vmtest.started
	sh $guest_runner $scenario >/dev/ttyS0 2>&1 </dev/null
	;;
esac
SCRIPT
  # startpar shows a script's output only once it ends: a script that hangs
  # the boot would leave nothing but the harness's timeout. This one, started
  # first, ends such a boot itself and names what still runs.
  cat >"$tree/etc/init.d/gpuinit-vmwatch" <<'SCRIPT'
#!/bin/sh
### BEGIN INIT INFO
# Provides:          gpuinit-vmwatch
# Required-Start:    mountkernfs
# Required-Stop:
# Default-Start:     S
# Default-Stop:
# Short-Description: fails a gpuinit VM boot that never reaches the scenario
### END INIT INFO
watch_boot() {
	sleep 150
	[ -e /run/gpuinit-vmtest.started ] && exit 0
	# The line opened at the start was hung up since (rc's runlevel change).
	exec >/dev/ttyS0 2>&1
	echo "=== the boot did not reach the scenario in 150 s; its processes:"
	for dir in /proc/[0-9]*; do
		command=$(tr '\0' ' ' <"$dir/cmdline" 2>/dev/null) || continue
		[ -z "$command" ] || echo "${dir#/proc/} $command"
	done
	echo "=== FAIL (the boot hung)"
	stty -F /dev/ttyS0 "$(stty -F /dev/ttyS0 -g)"
	printf '\002' | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
}
case "$1" in
# A session of its own: startpar runs a script on a pty, whose hangup at the
# script's end would kill a mere background job.
start) setsid "$0" watch </dev/null >/dev/null 2>&1 & ;;
watch) watch_boot ;;
esac
SCRIPT
  chmod 755 "$tree/etc/init.d/gpuinit-vmtest" "$tree/etc/init.d/gpuinit-vmwatch"
  chroot "$tree" update-rc.d gpuinit-vmtest defaults >/dev/null
  chroot "$tree" update-rc.d gpuinit-vmwatch defaults >/dev/null
  # No serial getty: inittab's T0 line (ttyS0) stays commented out, so
  # nothing else opens, or hangs up, the line under the scenario.
}
