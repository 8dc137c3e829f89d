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
# gpuinit status's textfile: the timer, and for SysV the cron line (a
# conffile, its line commented out until the admin wants it).
for unit in gpuinit-status.service gpuinit-status.timer; do
  [[ -f $work/tools/lib/systemd/system/$unit ]] || fail "no $unit"
done
grep -qx /etc/cron.d/gpuinit-status "$work/tools-control/conffiles" ||
  fail "/etc/cron.d/gpuinit-status is not a conffile"
grep -q '^#\* \* \* \* \* root ' "$work/tools/etc/cron.d/gpuinit-status" ||
  fail "the cron line is not there, or not commented out"
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

# The maintainer scripts, run for an upgrade and for a removal with every
# service manager call recorded (stubs first on PATH, /run/systemd/system
# present in a mount namespace of their own): an upgrade never stops or
# restarts gpu-persist or gpu-mig; a removal stops gpu-persist, never gpu-mig.
stubs=$work/stubs
mkdir -p "$stubs"
for stub in deb-systemd-invoke deb-systemd-helper invoke-rc.d update-rc.d systemctl udevadm \
  systemd-sysusers useradd getent update-initramfs; do
  printf '#!/bin/sh\necho "%s $*" >>"%s"\nexit 0\n' "$stub" "$work/calls" >"$stubs/$stub"
  chmod 755 "$stubs/$stub"
done
run_scripts() { # run_scripts LABEL SCRIPT ARGS... [; SCRIPT ARGS...]
  : >"$work/calls"
  unshare -m sh -c 'mount -t tmpfs none /run && mkdir -p /run/systemd/system && shift && eval "$0"' \
    "$1" _ >/dev/null 2>&1 || fail "the maintainer scripts failed: $1"
}
control=$work/tools-control
run_scripts "PATH=$stubs:\$PATH; $control/prerm upgrade 0.1.0+new && $control/preinst upgrade 0.1.0 && $control/postinst configure 0.1.0"
if grep -E '(stop|restart|try-restart|reload).*gpu-(persist|mig)' "$work/calls"; then
  fail "an upgrade stops or restarts gpu-persist or gpu-mig (calls above)"
fi
grep -q 'deb-systemd-invoke restart gpu-limit-daemon.service gpu-restriction.service' "$work/calls" ||
  fail "an upgrade does not restart gpu-limit-daemon and gpu-restriction: $(cat "$work/calls")"
run_scripts "PATH=$stubs:\$PATH; $control/prerm remove"
grep -q 'deb-systemd-invoke stop gpu-persist.service' "$work/calls" ||
  fail "a removal does not stop gpu-persist: $(cat "$work/calls")"
if grep -E 'stop.*gpu-mig' "$work/calls"; then
  fail "a removal stops gpu-mig.service, and with it slurmd"
fi
echo "PASS: package contents"
