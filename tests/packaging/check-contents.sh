#!/usr/bin/env bash
# What the packages hold and promise, read from the .debs themselves: the
# static multi-call binary and its links, the dynamic NVML helper, the
# interposer on its one multiarch path, the conffiles, Built-Using, and
# maintainer scripts that never stop or restart gpu-persist or gpu-mig on
# an upgrade.
#   check-contents.sh DEB_DIR
set -euo pipefail
dir=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
tools=$(ls "$dir"/gpuinit_*.deb)
limit=$(ls "$dir"/gpuinit-libgpulimit_*.deb)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$tools" "$work/tools"
dpkg-deb -e "$tools" "$work/tools-control"
dpkg-deb -x "$limit" "$work/limit"

file "$work/tools/usr/sbin/gpuinit" | grep -q 'statically linked' ||
  fail "/usr/sbin/gpuinit is not statically linked"
for tool in gpu-mknod gpu-modload gpu-persist gpu-mig gpu-limit gpu-limit-runtime; do
  [[ $(readlink "$work/tools/usr/sbin/$tool") == gpuinit ]] || fail "/usr/sbin/$tool is not a link to gpuinit"
done
helper=$work/tools/usr/libexec/gpuinit/gpuinit-nvml
file "$helper" | grep -q 'dynamically linked' || fail "gpuinit-nvml is not the dynamic build"
[[ $(stat -c %a "$helper") == 755 ]] || fail "gpuinit-nvml is mode $(stat -c %a "$helper")"
[[ -f $work/limit/usr/lib/$multiarch/gpuinit/libgpulimit.so ]] ||
  fail "libgpulimit.so is not in /usr/lib/$multiarch/gpuinit"
# Every tool, static or helper, names that one path.
for binary in "$work/tools/usr/sbin/gpuinit" "$helper"; do
  grep -qa "/usr/lib/$multiarch/gpuinit/libgpulimit.so" "$binary" ||
    fail "$binary does not name /usr/lib/$multiarch/gpuinit/libgpulimit.so"
done
grep -qa "/usr/libexec/gpuinit/gpuinit-nvml" "$work/tools/usr/sbin/gpuinit" ||
  fail "the static gpuinit does not name its NVML helper"

grep -qx /etc/default/gpu-restriction "$work/tools-control/conffiles" ||
  fail "/etc/default/gpu-restriction is not a conffile"
[[ -f $work/tools/lib/udev/rules.d/71-gpu-restriction.rules ]] || fail "no udev rule"
[[ -f $work/tools/usr/share/initramfs-tools/hooks/gpu-restriction ]] || fail "no initramfs hook"
grep -q 'update-initramfs' "$work/tools-control/triggers" || fail "no update-initramfs trigger"
[[ -f $work/tools/usr/lib/sysusers.d/gpu-persist.conf ]] || fail "no sysusers entry"
for completion in gpuinit gpu-mknod gpu-modload gpu-persist gpu-mig gpu-limit gpu-limit-runtime; do
  [[ -e $work/tools/usr/share/bash-completion/completions/$completion ]] ||
    fail "no bash completion for $completion"
done

fields=$(dpkg-deb -f "$tools" Depends Built-Using)
grep -q 'gpuinit-libgpulimit (= ' <<<"$fields" || fail "gpuinit does not depend on its libgpulimit: $fields"
for source in kmod pciutils systemd libcap-ng glibc; do
  grep -q "$source (= " <<<"$fields" || fail "Built-Using lacks $source: $fields"
done
grep -qx 'Multi-Arch: same' < <(dpkg-deb -f "$limit" Multi-Arch | sed 's/^/Multi-Arch: /') ||
  fail "gpuinit-libgpulimit is not Multi-Arch: same"
if dpkg-deb -f "$tools" Conflicts Breaks | grep -q nvidia; then
  fail "a package-level Conflicts/Breaks with NVIDIA's packages"
fi

# An upgrade never stops or restarts gpu-persist or gpu-mig: no maintainer
# script names them in a stop, restart or try-restart.
for script in prerm postinst preinst postrm; do
  [[ -f $work/tools-control/$script ]] || continue
  if grep -E '(stop|restart).*gpu-(persist|mig)\.service|gpu-(persist|mig)\.service.*(stop|restart)' \
    "$work/tools-control/$script"; then
    fail "$script stops or restarts gpu-persist or gpu-mig"
  fi
done
grep -q 'gpu-restriction' "$work/tools-control/postinst" || fail "postinst does not register the SysV script"
echo "PASS: package contents"
