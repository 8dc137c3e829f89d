#!/usr/bin/env bash
# gpuinit beside NVIDIA's nvidia-persistenced package, as decided (issue 28,
# docs/packaging.md): no package-level Conflicts, so both install; the
# exclusion is the service's (gpu-persist.service: Conflicts=
# nvidia-persistenced.service); and removing or purging gpuinit leaves
# nvidia-persistenced installed, its unit and its enablement untouched. The
# stand-in package built here has what the exclusion touches: the unit
# (enabled by its postinst, as Debian's nvidia-persistenced does) and the
# daemon. On Debian 12 with systemd.
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/packaging/lifecycle-lib.sh
. "$here/lifecycle-lib.sh"

lifecycle_tree debian
lifecycle_deps "$tools_deb" "$limit_deb"

fake=$work/nvidia-persistenced
mkdir -p "$fake/DEBIAN" "$fake/lib/systemd/system" "$fake/usr/bin"
cat >"$fake/DEBIAN/control" <<'EOF'
Package: nvidia-persistenced
Version: 535.247.01-1~gpuinittest
Architecture: all
Maintainer: gpuinit tests <gpuinit@localhost.localdomain>
Section: non-free/utils
Priority: optional
Description: stand-in for NVIDIA's nvidia-persistenced (gpuinit's tests)
 Only its unit and daemon's paths, for tests/packaging/lifecycle-nvidia-persistenced.sh.
EOF
cat >"$fake/lib/systemd/system/nvidia-persistenced.service" <<'EOF'
[Unit]
Description=NVIDIA Persistence Daemon (stand-in)
Wants=syslog.target

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvpd
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced

[Install]
WantedBy=multi-user.target
EOF
printf '#!/bin/sh\nexit 0\n' >"$fake/usr/bin/nvidia-persistenced"
cat >"$fake/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
	deb-systemd-helper enable nvidia-persistenced.service
fi
EOF
chmod 755 "$fake/usr/bin/nvidia-persistenced" "$fake/DEBIAN/postinst"
dpkg-deb -b --root-owner-group "$fake" "$work/nvidia-persistenced.deb" >/dev/null
install_debs "$work/nvidia-persistenced.deb"
installed nvidia-persistenced || die "the stand-in nvidia-persistenced did not install"

unit=/lib/systemd/system/nvidia-persistenced.service
wants=/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service
[[ -L $tree$wants ]] || die "the stand-in's postinst did not enable its unit ($wants)"
# What gpuinit must leave alone: the unit, the daemon, the enablement (its
# link, and no mask in /etc/systemd/system), deb-systemd-helper's record.
nvpd_state() {
  (
    cd "$tree"
    sha256sum ."$unit" ./usr/bin/nvidia-persistenced
    find ./etc/systemd ./var/lib/systemd -name 'nvidia-persistenced*' -printf '%p %y %l\n' | sort
  )
}
nvpd_state >"$work/nvpd-before"

install_debs "$limit_deb" "$tools_deb"
installed gpuinit gpuinit-libgpulimit ||
  fail "gpuinit did not install beside nvidia-persistenced"
installed nvidia-persistenced || fail "installing gpuinit removed nvidia-persistenced"
# The service-level exclusion, in the unit as installed.
conflicts=$(sed -n 's/^Conflicts=//p' "$tree/lib/systemd/system/gpu-persist.service" | tr ' ' '\n')
grep -qx nvidia-persistenced.service <<<"$conflicts" ||
  fail "the installed gpu-persist.service has no Conflicts=nvidia-persistenced.service"
diff "$work/nvpd-before" <(nvpd_state) >&2 || fail "installing gpuinit changed nvidia-persistenced's files (above)"

in_chroot dpkg --remove gpuinit gpuinit-libgpulimit >"$work/remove.log" 2>&1 ||
  { cat "$work/remove.log" >&2; die "dpkg --remove gpuinit failed"; }
installed nvidia-persistenced || fail "removing gpuinit removed nvidia-persistenced"
diff "$work/nvpd-before" <(nvpd_state) >&2 || fail "removing gpuinit changed nvidia-persistenced's files (above)"
in_chroot dpkg --purge gpuinit gpuinit-libgpulimit >"$work/purge.log" 2>&1 ||
  { cat "$work/purge.log" >&2; die "dpkg --purge gpuinit failed"; }
installed nvidia-persistenced || fail "purging gpuinit removed nvidia-persistenced"
diff "$work/nvpd-before" <(nvpd_state) >&2 || fail "purging gpuinit changed nvidia-persistenced's files (above)"
verify=$(in_chroot dpkg --verify nvidia-persistenced || true)
[[ -z $verify ]] || fail "dpkg --verify nvidia-persistenced after gpuinit's purge:"$'\n'"$verify"
finish "gpuinit installed beside nvidia-persistenced (Conflicts= only in gpu-persist.service), and its removal and purge left nvidia-persistenced as it was"
