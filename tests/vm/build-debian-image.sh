#!/usr/bin/env bash
# Builds, once, a minimal Debian 12 with an init system, udev and kmod for
# the boot-wiring VM tests, and caches it:
#
#   build-debian-image.sh IMAGE_DIR [INIT_PACKAGES]
#
# INIT_PACKAGES (comma-separated, default systemd,systemd-sysv) picks the
# init: sysvinit-core gives a SysV one. Each image flavour keeps its own
# IMAGE_DIR, as a finished image is not rebuilt for another list.
#
# Every image also has what the gpuinit packages depend on (debian/control's
# Depends, from their shlibs): the flavours install the built .debs with apt
# in the image, which has no package lists and no network, so apt finds no
# dependency it would have to download.
#
# It debootstraps from the host's own Debian mirror (its apt sources), else
# from deb.debian.org. IMAGE_DIR/.complete marks a finished image and holds
# its whole package list: a rerun for the same list does nothing, one for
# another list (or for an image stamped before the list was kept) builds it
# afresh.
# Docs, man pages and locales are trimmed (about 120 MB left).
set -euo pipefail

image=${1:?usage: build-debian-image.sh IMAGE_DIR [INIT_PACKAGES]}
init_packages=${2:-systemd,systemd-sysv}
# The gpuinit packages' Depends (their shlibs, as dpkg-deb -f shows them)
# that minbase lacks: libpci3 (which brings pci.ids, their Recommends). The
# rest are listed so that a leaner minbase cannot drop them unnoticed.
package_depends=libpci3,libkmod2,libcap-ng0,libudev1,libstdc++6,libgcc-s1,init-system-helpers,passwd
# The account gpu-persist comes from systemd-sysusers where systemd is, else
# from useradd (passwd, in minbase): an image without systemd gets nothing
# more, so the SysV scenarios test that path.
packages=$init_packages,udev,kmod,$package_depends
if [[ -f $image/.complete ]]; then
  if [[ $(<"$image/.complete") == "$packages" ]]; then
    echo "vm: Debian image cached in $image"
    exit 0
  fi
  echo "vm: $image was built for another package list; rebuilding it"
fi
suite=bookworm

# The mirror the host's apt uses for the main archive of $suite (the stanza
# or line whose suite is exactly $suite: not -updates, not -security), so a
# host behind a local mirror or a snapshot debootstraps from the same place.
host_mirror() {
  local file
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -f $file ]] || continue
    awk -v suite="$suite" 'BEGIN { RS = ""; FS = "\n" } {
      types = uris = suites = ""; enabled = "yes"
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^#/) continue
        split($i, kv, ":"); key = tolower(kv[1]); value = substr($i, length(kv[1]) + 2)
        if (key == "types") types = " " value " "
        else if (key == "uris") uris = value
        else if (key == "suites") suites = " " value " "
        else if (key == "enabled") enabled = value
      }
      gsub(/[ \t]+/, " ", types); gsub(/[ \t]+/, " ", suites)
      if (enabled ~ /no/ || types !~ / deb / || suites !~ " " suite " ") next
      if (split(uris, list, " ") > 0) { print list[1]; exit }
    }' "$file"
  done
  [[ -f /etc/apt/sources.list ]] &&
    awk -v suite="$suite" '$1 == "deb" {
      i = 2
      if ($i ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
      if ($(i + 1) == suite) { print $i; exit }
    }' /etc/apt/sources.list
  return 0
}
mirror=$(host_mirror | head -1)
mirror=${mirror:-http://deb.debian.org/debian}

rm -rf "${image:?}"
mkdir -p "$image"
echo "vm: debootstrapping a minimal Debian 12 with $packages into $image from $mirror"
debootstrap --variant=minbase --include="$packages" \
  "$suite" "$image" "$mirror" >"$image.log" 2>&1 ||
  { tail -30 "$image.log" >&2; exit 1; }
rm -rf "$image"/usr/share/{doc,man,info,locale}/* "$image"/var/cache/apt/archives/*.deb \
  "$image"/var/lib/apt/lists/*
# No getty or network waits on a serial test console.
rm -f "$image"/etc/systemd/system/getty.target.wants/* \
  "$image"/etc/systemd/system/multi-user.target.wants/{e2scrub_reap.service,remote-fs.target}
echo "$packages" >"$image/.complete"
echo "vm: Debian image ready ($(du -sh "$image" | cut -f1))"
