#!/usr/bin/env bash
# Install, then dpkg --purge: every file of the system is as before, except
# the logs the admin keeps (lifecycle-lib.sh's snapshot says what is not
# compared, and why) and the gpu-persist account, which stays by Debian's
# convention (debian/gpuinit.postrm): it is checked to be the only change in
# /etc/passwd, /etc/group and their shadow files. Any other file left,
# removed or changed is a failure, each listed. On Debian 12 with systemd.
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/packaging/lifecycle-lib.sh
. "$here/lifecycle-lib.sh"

lifecycle_tree debian
lifecycle_deps "$tools_deb" "$limit_deb"
in_chroot getent passwd gpu-persist >/dev/null && die "the image has a gpu-persist account already"
snapshot "$work/before"
cp -a "$tree/etc" "$work/etc-before"

install_debs "$limit_deb" "$tools_deb"
installed gpuinit gpuinit-libgpulimit || die "the packages are not installed after apt-get install"
in_chroot getent passwd gpu-persist >/dev/null || fail "the install made no gpu-persist account"
[[ -f $tree/usr/sbin/gpuinit ]] || fail "the install left no /usr/sbin/gpuinit"
# Nothing enabled (no unit linked into a target), but deb-systemd-helper,
# offline, recorded the units, so that a purge can undo what an admin's
# enable does.
enabled=$(cd "$tree/etc/systemd/system" && find . -name 'gpu-*' -printf '%p ')
[[ -z $enabled ]] || fail "the install enabled units: $enabled"
[[ -e $tree/var/lib/systemd/deb-systemd-helper-enabled/gpu-persist.service.dsh-also ]] ||
  fail "deb-systemd-helper recorded no state for gpu-persist.service"

# What the admin and the services add in between, which the purge must
# take away too: the units enabled (systemctl works offline in a chroot)
# and gpu-persist's state (StateDirectory=gpu-persist, its state file).
in_chroot systemctl enable --quiet gpu-restriction.service gpu-persist.service
in_chroot install -d -o gpu-persist -g gpu-persist /var/lib/gpu-persist
in_chroot install -o gpu-persist -g gpu-persist -m 600 /dev/null /var/lib/gpu-persist/state

in_chroot dpkg --purge gpuinit gpuinit-libgpulimit >"$work/purge.log" 2>&1 ||
  { cat "$work/purge.log" >&2; die "dpkg --purge failed"; }
purged_from_dpkg gpuinit gpuinit-libgpulimit
snapshot "$work/after"

check_purged "$work/before" "$work/etc-before" "$work/after"
finish "install then dpkg --purge: $(wc -l <"$work/before") files compared, the only change is the gpu-persist account"
