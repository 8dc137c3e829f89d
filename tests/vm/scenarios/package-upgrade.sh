# An upgrade of the installed packages while gpu-persist holds the GPUs
# keeps them held: gpu-persist.service (from the package, enabled as the
# admin does) holds 4 stand-in GPUs; dpkg -i of newer packages (the built
# ones repacked with a higher version, in /debs-upgrade) leaves its main
# process running the old, now deleted, binary and the unit active, the
# driver counts no teardown and no second init of any GPU, and dpkg reports
# the new version; the new gpu-persist talks to the old daemon.
#
# vm-flavour: debian-systemd
. /scenario-common.sh
# held_as INITS DEINITS OPENS: each of the 4 GPUs has seen INITS inits and
# DEINITS teardowns, and OPENS files hold it.
held_as() {
  cat /proc/driver/nvidia-test/counters
  [ "$(awk '!/^#/ { print $3, $4, $5 }' /proc/driver/nvidia-test/counters | uniq -c |
    awk '{ $1 = $1; print }')" = "4 $1 $2 $3" ]
}
main_pid() { systemctl show -p MainPID --value gpu-persist.service; }

# The scenario runs after multi-user.target, which waited for the start.
if ! systemctl is-active -q gpu-persist.service; then
  systemctl status --no-pager gpu-persist.service || true
  journalctl -b -u gpu-persist.service --no-pager || true
  fail "gpu-persist.service did not start at boot"
fi
held_as 1 0 1 || fail "gpu-persist does not hold each GPU once"
old=$(dpkg-query -W -f='${Version}' gpuinit)
new=$(dpkg-deb -f /debs-upgrade/gpuinit_*.deb Version)
echo "upgrading gpuinit $old -> $new"
dpkg --compare-versions "$new" gt "$old" || fail "/debs-upgrade has $new, not newer than $old"
pid=$(main_pid)
[ "$pid" -gt 0 ] || fail "gpu-persist.service has no main process"
[ "$(readlink "/proc/$pid/exe")" = /usr/sbin/gpuinit ] ||
  fail "gpu-persist runs $(readlink "/proc/$pid/exe"), not the package's /usr/sbin/gpuinit"

# As an admin upgrades: both packages at once (gpuinit depends on its own
# version of gpuinit-libgpulimit), the maintainer scripts acting on the
# running systemd.
dpkg -i /debs-upgrade/gpuinit-libgpulimit_*.deb /debs-upgrade/gpuinit_*.deb
dpkg -s gpuinit | tee /tmp/status
grep -qx "Version: $new" /tmp/status || fail "dpkg -s gpuinit does not show $new"
grep -qx "Status: install ok installed" /tmp/status || fail "gpuinit is not installed ok"
[ "$(dpkg-query -W -f='${Version}' gpuinit-libgpulimit)" = "$new" ] || fail "gpuinit-libgpulimit is not $new"

held_as 1 0 1 || fail "a GPU was torn down or initialized again during the upgrade"
systemctl status --no-pager gpu-persist.service || true
systemctl is-active -q gpu-persist.service || fail "gpu-persist.service is not active after the upgrade"
[ "$(main_pid)" = "$pid" ] || fail "gpu-persist's main pid changed from $pid to $(main_pid): the upgrade restarted it"
# Still the old process: dpkg replaced the binary under it.
readlink "/proc/$pid/exe"
[ "$(readlink "/proc/$pid/exe")" = "/usr/sbin/gpuinit (deleted)" ] ||
  fail "gpu-persist's binary is $(readlink "/proc/$pid/exe"), not the replaced /usr/sbin/gpuinit"
[ "$(systemctl show -p NeedDaemonReload --value gpu-persist.service)" = no ] ||
  fail "the upgrade left systemd with the old unit file (no daemon-reload)"
journalctl -u gpu-persist.service -o cat --no-pager | tee /tmp/journal
if grep -q "^Stopping\|^Stopped" /tmp/journal; then fail "systemd stopped gpu-persist during the upgrade"; fi

# The upgraded client and the daemon still running the old binary.
gpu-persist status | tee /tmp/persist
[ "$(awk '$3 == "held"' /tmp/persist | wc -l)" = 4 ] || fail "gpu-persist status does not show 4 held GPUs"
