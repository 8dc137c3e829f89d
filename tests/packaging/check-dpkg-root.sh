#!/usr/bin/env bash
# The maintainer scripts under DPKG_ROOT (dpkg --force-script-chrootless,
# which runs them outside the tree it installs into): a purge removes the
# run-time state under DPKG_ROOT, never the running system's. Run in a mount
# namespace whose /run and /var/lib are empty tmpfs, so that "the running
# system's" files are stand-ins.
#   check-dpkg-root.sh SOURCE_DIR
set -euo pipefail
src=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "SKIPPED LOUDLY: needs root (a mount namespace)" >&2; exit 77; }
unshare -m true 2>/dev/null || { echo "SKIPPED LOUDLY: unshare -m does not work here" >&2; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src/debian/gpuinit.postrm" "$work/postrm"
state=(var/lib/gpu-persist/state run/gpu-persist/socket run/gpu-mig/lease run/gpu-limit/daemon.pid
  run/gpuinit/nodes)
export work
# shellcheck disable=SC2016 # expanded by the inner bash
unshare -m --propagation private bash -euc '
  mount -t tmpfs tmpfs /run
  mount -t tmpfs tmpfs /var/lib
  for path in "$@"; do
    mkdir -p "/$(dirname "$path")" "$work/target/$(dirname "$path")"
    touch "/$path" "$work/target/$path"
  done
  DPKG_ROOT=$work/target sh "$work/postrm" purge
  for path in "$@"; do
    [[ -e /$path ]] || { echo "a purge under DPKG_ROOT removed the running system'"'"'s /$path" >&2; exit 1; }
    [[ ! -e $work/target/${path%/*} ]] || { echo "a purge under DPKG_ROOT left ${path%/*}" >&2; exit 1; }
  done
  sh "$work/postrm" purge
  for path in "$@"; do
    [[ ! -e /${path%/*} ]] || { echo "a purge left /${path%/*}" >&2; exit 1; }
  done
' check-dpkg-root "${state[@]}" || fail "postrm purge: see above"

# postinst configure under DPKG_ROOT makes the account in that tree: a
# stand-in systemd-sysusers says what it was asked.
mkdir -p "$work/bin" "$work/target"
cat >"$work/bin/systemd-sysusers" <<'SH'
#!/bin/sh
echo "$*" >"$WORK/sysusers"
SH
chmod 755 "$work/bin/systemd-sysusers"
cp "$src/debian/gpuinit.postinst" "$work/postinst"
WORK=$work DPKG_ROOT=$work/target PATH="$work/bin:$PATH" sh "$work/postinst" configure ||
  fail "postinst configure under DPKG_ROOT failed"
[[ $(cat "$work/sysusers") == "--root=$work/target gpu-persist.conf" ]] ||
  fail "postinst ran systemd-sysusers $(cat "$work/sysusers"), not under DPKG_ROOT"
echo "PASS: check-dpkg-root"
