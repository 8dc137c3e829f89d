#!/usr/bin/env bash
# The packages on Debian 12 with SysV init and no systemd-sysusers: the
# install makes the gpu-persist account (the postinst's useradd), registers
# /etc/init.d/gpu-restriction and gpu-limit-daemon disabled (K links only,
# no S link in runlevels 2-5: the admin enables them) and asks for no start
# of gpu-restriction; the purge removes the scripts and their links and,
# but for the account, leaves the system as before the install.
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/packaging/lifecycle-lib.sh
. "$here/lifecycle-lib.sh"

lifecycle_tree debian-sysvinit
in_chroot sh -c 'command -v systemd-sysusers' >/dev/null &&
  die "the SysV image has systemd-sysusers: it cannot show the postinst's own account creation"
lifecycle_deps "$tools_deb" "$limit_deb"
in_chroot sh -c 'command -v systemd-sysusers' >/dev/null &&
  die "the packages' dependencies brought systemd-sysusers into the SysV image"
in_chroot getent passwd gpu-persist >/dev/null && die "the image has a gpu-persist account already"
snapshot "$work/before"
cp -a "$tree/etc" "$work/etc-before"
: >"$tree/tmp/policy-rc.d.log"

install_debs "$limit_deb" "$tools_deb"
installed gpuinit gpuinit-libgpulimit || die "the packages are not installed after apt-get install"
in_chroot sh -c 'command -v systemd-sysusers' >/dev/null &&
  fail "installing gpuinit brought systemd-sysusers into the SysV image"

# The account, as the sysusers.d entry declares it.
entry=$(in_chroot getent passwd gpu-persist) || fail "the install made no gpu-persist account"
if [[ $entry ]]; then
  IFS=: read -r _ _ uid gid _ home shell <<<"$entry"
  ((uid < 1000)) || fail "gpu-persist is no system account: uid $uid ($entry)"
  [[ $home == / && $shell == /usr/sbin/nologin ]] || fail "gpu-persist's home or shell: $entry"
  group=$(in_chroot getent group gpu-persist) || fail "no gpu-persist group"
  [[ ${group:-} == gpu-persist:*:"$gid":* ]] || fail "gpu-persist's primary group is not gpu-persist: $entry / ${group:-}"
  [[ ! -e $tree/home/gpu-persist ]] || fail "the install made a home directory /home/gpu-persist"
fi

scripts=(gpu-restriction gpu-limit-daemon)
rc_links() { # NAME: the script's links in every /etc/rc?.d
  (
    cd "$tree/etc"
    compgen -G "rc?.d/[SK][0-9][0-9]$1" || true
  )
}
for script in "${scripts[@]}"; do
  [[ -x $tree/etc/init.d/$script ]] || fail "/etc/init.d/$script is not installed executable"
  links=$(rc_links "$script")
  [[ $links ]] || fail "/etc/init.d/$script is not registered: no link in /etc/rc?.d"
  started=$(grep -E '^rc[2-5]\.d/S' <<<"$links" || true)
  [[ -z $started ]] || fail "/etc/init.d/$script is enabled by the install: $started"
  for level in 2 3 4 5; do
    grep -q "^rc$level\.d/K" <<<"$links" || fail "/etc/init.d/$script has no K link in rc$level.d: $links"
  done
done
# invoke-rc.d asks policy-rc.d (lifecycle-lib.sh) before any start or stop.
echo "lifecycle: invoke-rc.d asked policy-rc.d for: $(paste -sd';' "$tree/tmp/policy-rc.d.log")"
asked=$(grep -E '^gpu-restriction ' "$tree/tmp/policy-rc.d.log" || true)
[[ -z $asked ]] || fail "the install asked invoke-rc.d to act on gpu-restriction: $asked"

in_chroot dpkg --purge gpuinit gpuinit-libgpulimit >"$work/purge.log" 2>&1 ||
  { cat "$work/purge.log" >&2; die "dpkg --purge failed"; }
purged_from_dpkg gpuinit gpuinit-libgpulimit
for script in "${scripts[@]}"; do
  [[ ! -e $tree/etc/init.d/$script ]] || fail "the purge left /etc/init.d/$script"
  links=$(rc_links "$script")
  [[ -z $links ]] || fail "the purge left the links of $script: $links"
done
snapshot "$work/after"
check_purged "$work/before" "$work/etc-before" "$work/after"
finish "SysV: useradd made gpu-persist, ${scripts[*]} registered disabled, the purge removed them and their links"
