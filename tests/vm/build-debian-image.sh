#!/usr/bin/env bash
# Builds, once, a minimal Debian 12 with systemd, udev and kmod for the
# boot-wiring VM tests, and caches it:
#
#   build-debian-image.sh IMAGE_DIR
#
# IMAGE_DIR/.complete marks a finished image; a rerun with it present does
# nothing. Docs, man pages and locales are trimmed (about 120 MB left).
set -euo pipefail

image=${1:?usage: build-debian-image.sh IMAGE_DIR}
if [[ -f $image/.complete ]]; then
  echo "vm: Debian image cached in $image"
  exit 0
fi
rm -rf "${image:?}"
mkdir -p "$image"
echo "vm: debootstrapping a minimal Debian 12 with systemd, udev and kmod into $image"
debootstrap --variant=minbase --include=systemd,systemd-sysv,udev,kmod \
  bookworm "$image" http://deb.debian.org/debian >"$image.log" 2>&1 ||
  { tail -30 "$image.log" >&2; exit 1; }
rm -rf "$image"/usr/share/{doc,man,info,locale}/* "$image"/var/cache/apt/archives/*.deb \
  "$image"/var/lib/apt/lists/*
# No getty or network waits on a serial test console.
rm -f "$image"/etc/systemd/system/getty.target.wants/* \
  "$image"/etc/systemd/system/multi-user.target.wants/{e2scrub_reap.service,remote-fs.target}
touch "$image/.complete"
echo "vm: Debian image ready ($(du -sh "$image" | cut -f1))"
