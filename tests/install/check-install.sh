#!/usr/bin/env bash
# `cmake --install` into a DESTDIR, as a package build or the VM images do:
#
#   check-install.sh BUILD_DIR UNITDIR UDEVDIR SYSUSERSDIR static|dynamic LIBDIR
#
# Asserts the exact list of installed files with their types and modes (the
# static build installs one binary and links to it), that the boot files
# name the tools at the install's prefix, that a reinstall keeps an edited
# /etc/default/gpu-restriction, and that another prefix keeps everything
# under itself and says that the boot will not read it.
set -euo pipefail
build=$1 unitdir=$2 udevdir=$3 sysusersdir=$4 variant=$5 libdir=$6
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuinit-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "check-install: FAIL: $*" >&2; exit 1; }

dest=$work/dest
DESTDIR=$dest cmake --install "$build" --prefix /usr >"$work/log" 2>&1 ||
  { cat "$work/log"; fail "cmake --install failed"; }

tools=(gpu-mknod gpu-modload gpu-persist gpu-mig gpu-limit gpu-limit-runtime)
expected=(
  "f 644 /etc/default/gpu-restriction"
  "f 755 /etc/init.d/gpu-limit-daemon"
  "f 755 /etc/init.d/gpu-restriction"
  "f 644 $unitdir/gpu-limit-daemon.service"
  "f 644 $unitdir/gpu-mig.service"
  "f 644 $unitdir/gpu-persist.service"
  "f 644 $unitdir/gpu-restriction.service"
  "f 644 $unitdir/gpuinit-status.service"
  "f 644 $unitdir/gpuinit-status.timer"
  "f 644 /etc/cron.d/gpuinit-status"
  "f 644 $udevdir/rules.d/71-gpu-restriction.rules"
  "f 644 $sysusersdir/gpu-persist.conf"
  "f 644 /usr/lib/modprobe.d/gpu-restriction.conf"
  "f 755 /usr/sbin/gpuinit"
  "f 755 /usr/share/initramfs-tools/hooks/gpu-restriction"
  "f 644 /usr/share/containers/oci/hooks.d/gpu-limit-poststop.json"
  "f 644 /usr/share/containers/oci/hooks.d/gpu-limit-precreate.json"
  "f 644 /usr/share/gpuinit/containerd-runtime.toml"
  "f 644 /usr/share/gpuinit/docker-daemon.json"
  "f 644 /usr/share/gpuinit/runtimeclass.yaml"
  "f 644 /usr/share/man/man5/gpu-mig-layout.conf.5"
  "f 644 /usr/share/man/man5/gpu-restriction.conf.5"
  "f 644 /usr/share/man/man7/gpulimit.7"
  "f 644 /usr/share/man/man8/gpu-limit.8"
  "f 644 /usr/share/man/man8/gpu-limit-runtime.8"
  "f 644 /usr/share/man/man8/gpu-mig.8"
  "f 644 /usr/share/man/man8/gpu-mknod.8"
  "f 644 /usr/share/man/man8/gpu-modload.8"
  "f 644 /usr/share/man/man8/gpu-persist.8"
  "f 644 /usr/share/man/man8/gpu-restriction.8"
  "f 644 /usr/share/man/man8/gpuinit.8"
  "f 644 /usr/share/man/man8/gpuinit-status.8"
  "f 644 /usr/share/bash-completion/completions/gpuinit"
)
# The interposer gpu-limit run preloads: a shared object, so dynamic builds
# only; 0644 as Debian policy wants shared libraries (it is mapped, never run).
if [[ $variant == dynamic ]]; then
  expected+=("f 644 /usr/$libdir/gpuinit/libgpulimit.so")
fi
for tool in "${tools[@]}"; do
  expected+=("l 777 /usr/share/bash-completion/completions/$tool -> gpuinit")
  if [[ $variant == static ]]; then
    expected+=("l 777 /usr/sbin/$tool -> gpuinit")
  else
    expected+=("f 755 /usr/sbin/$tool")
  fi
done
printf '%s\n' "${expected[@]}" | sort >"$work/expected"
(cd "$dest" && find . ! -type d -printf '%y %m /%P\n') | while read -r type mode path; do
  if [[ $type == l ]]; then
    echo "$type $mode $path -> $(readlink "$dest$path")"
  else
    echo "$type $mode $path"
  fi
done | sort >"$work/actual"
diff -u "$work/expected" "$work/actual" || fail "the installed files differ from the list (- expected, + installed)"

# The boot files name the installed tools; no placeholder is left.
boot_files=("$dest/etc/init.d/gpu-restriction" "$dest/etc/default/gpu-restriction"
  "$dest$unitdir"/gpu-*.service "$dest$unitdir"/gpuinit-status.* "$dest/etc/cron.d/gpuinit-status"
  "$dest$udevdir/rules.d/71-gpu-restriction.rules"
  "$dest$sysusersdir/gpu-persist.conf" "$dest/usr/share/initramfs-tools/hooks/gpu-restriction")
grep -l '@[A-Z]*@' "${boot_files[@]}" && fail "a placeholder was not substituted"
grep -q '^ExecStart=/usr/sbin/gpu-mknod -q$' "$dest$unitdir/gpu-restriction.service" ||
  fail "gpu-restriction.service does not run /usr/sbin/gpu-mknod"
grep -q '^ExecStart=/usr/sbin/gpu-mig apply -q \$MIG_APPLY_ARGS$' "$dest$unitdir/gpu-mig.service" ||
  fail "gpu-mig.service does not run /usr/sbin/gpu-mig apply"
grep -q '^ExecStart=/usr/sbin/gpuinit status -q --prometheus /var/lib/prometheus/node-exporter/gpuinit.prom$' \
  "$dest$unitdir/gpuinit-status.service" || fail "gpuinit-status.service does not run /usr/sbin/gpuinit status"
grep -q ' || /usr/sbin/gpuinit status -q --prometheus ' "$dest/etc/cron.d/gpuinit-status" ||
  fail "the cron line does not run /usr/sbin/gpuinit status"
grep -q '^ConditionPathExists=/etc/gpu-mig-layout.conf$' "$dest$unitdir/gpu-mig.service" ||
  fail "gpu-mig.service does not wait for a declared layout"
grep -q '^MIG_LAYOUT=/etc/gpu-mig-layout.conf$' "$dest/etc/init.d/gpu-restriction" ||
  fail "the SysV script's MIG_LAYOUT"
grep -q '^SBIN=/usr/sbin$' "$dest/etc/init.d/gpu-restriction" || fail "the SysV script's SBIN"
grep -q '^DEFAULTS=/etc/default/gpu-restriction$' "$dest/etc/init.d/gpu-restriction" ||
  fail "the SysV script's DEFAULTS"
grep -q 'RUN+="/usr/sbin/gpu-mknod --quiet --device $kernel"' \
  "$dest$udevdir/rules.d/71-gpu-restriction.rules" || fail "the udev rule's gpu-mknod"
for script in /etc/init.d/gpu-restriction /usr/share/initramfs-tools/hooks/gpu-restriction; do
  dash -n "$dest$script" || fail "$script: dash -n"
done

# A reinstall keeps the admin's settings.
echo 'PERSIST=no # edited' >>"$dest/etc/default/gpu-restriction"
DESTDIR=$dest cmake --install "$build" --prefix /usr >"$work/log" 2>&1 || fail "reinstall failed"
grep -q 'PERSIST=no # edited' "$dest/etc/default/gpu-restriction" ||
  fail "a reinstall overwrote /etc/default/gpu-restriction"
grep -q 'Keeping: .*/etc/default/gpu-restriction' "$work/log" || fail "the reinstall did not say it kept it"

# Another prefix: everything under it, and a warning.
local_dest=$work/local
DESTDIR=$local_dest cmake --install "$build" --prefix /usr/local >"$work/log" 2>&1 ||
  fail "install to /usr/local failed"
outside=$(cd "$local_dest" && find . ! -type d ! -path './usr/local/*')
[[ -z $outside ]] || fail "with --prefix /usr/local, files outside it: $outside"
grep -q 'SBIN=/usr/local/sbin' "$local_dest/usr/local/etc/init.d/gpu-restriction" ||
  fail "the SysV script under /usr/local does not name /usr/local/sbin"
grep -q 'install with --prefix /usr for a working boot' "$work/log" ||
  fail "no warning that the boot does not read /usr/local"
echo "check-install: $(wc -l <"$work/actual") files as listed ($variant build)"
