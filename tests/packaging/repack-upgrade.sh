#!/usr/bin/env bash
# A newer version of the built packages, for the upgrade tests: the .debs
# of DEB_DIR repacked with Version VERSION (default: theirs + "+upgrade1")
# and gpuinit's Depends on gpuinit-libgpulimit (= VERSION), written into
# OUT_DIR as NAME_VERSION_ARCH.deb.
#
#   repack-upgrade.sh DEB_DIR OUT_DIR [VERSION]
#
# The new version changes conffiles as a real upgrade does: the SysV
# scripts in /etc/init.d and the cron line in /etc/cron.d get a comment line
# naming VERSION, so an upgrade must replace each one the admin did not edit.
# /etc/default/gpu-restriction stays as built: an admin's edit of it is
# kept without a question (dpkg asks only when both changed it).
set -euo pipefail
usage="usage: repack-upgrade.sh DEB_DIR OUT_DIR [VERSION]"
in=${1:?$usage}
out=${2:?$usage}
die() {
  echo "repack-upgrade.sh: $*" >&2
  exit 1
}

one() { # PATTERN: the one file matching it
  local found
  mapfile -t found < <(compgen -G "$1" || true)
  ((${#found[@]} == 1)) || die "${#found[@]} files match $1, want one"
  echo "${found[0]}"
}
tools=$(one "$in/gpuinit_*.deb")
limit=$(one "$in/gpuinit-libgpulimit_*.deb")
old=$(dpkg-deb -f "$tools" Version)
[[ $(dpkg-deb -f "$limit" Version) == "$old" ]] ||
  die "$limit is version $(dpkg-deb -f "$limit" Version), $tools $old"
version=${3:-$old+upgrade1}
dpkg --compare-versions "$version" gt "$old" || die "$version is not newer than $old"

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuinit-repack.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
for deb in "$limit" "$tools"; do
  name=$(dpkg-deb -f "$deb" Package)
  arch=$(dpkg-deb -f "$deb" Architecture)
  root=$work/$name
  dpkg-deb -R "$deb" "$root"
  control=$root/DEBIAN/control
  sed -i -E "s/^Version: .*/Version: $version/" "$control"
  # The exact-version dependency between the two (=, as built).
  sed -i -E "/^(Pre-)?Depends:/ s/(gpuinit-libgpulimit \\(= )[^)]*\\)/\\1$version)/" "$control"
  if [[ $name == gpuinit ]]; then
    grep -q "gpuinit-libgpulimit (= $version)" "$control" ||
      die "gpuinit's Depends names no gpuinit-libgpulimit (= ...): $(grep Depends "$control")"
  fi
  if [[ -f $root/DEBIAN/conffiles ]]; then
    while read -r conffile; do
      [[ $conffile == /etc/init.d/* || $conffile == /etc/cron.d/* ]] || continue
      echo "# $version (tests/packaging/repack-upgrade.sh)" >>"$root$conffile"
      # dh_md5sums leaves conffiles out (dpkg keeps their sums apart); a
      # line there would go stale.
      sum=$(md5sum <"$root$conffile" | cut -d' ' -f1)
      sed -i -E "s|^[0-9a-f]{32}  ${conffile#/}\$|$sum  ${conffile#/}|" "$root/DEBIAN/md5sums"
    done < <(sed 's/^remove-on-upgrade //' "$root/DEBIAN/conffiles")
  fi
  dpkg-deb -b --root-owner-group "$root" "$out/${name}_${version#*:}_$arch.deb" >/dev/null
done
echo "repack-upgrade.sh: $old -> $version in $out"
