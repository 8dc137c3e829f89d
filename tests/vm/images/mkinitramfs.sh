# shellcheck shell=bash
# Sourced by run-vm-test.sh: its variables come from there, and it reads
# flavour_memory and flavour_append.
# shellcheck disable=SC2034,SC2154
# Image flavour "mkinitramfs": the guest boots only an initramfs that
# Debian's own mkinitramfs made, as a real machine's is, from a debootstrapped
# Debian 12 (minbase with initramfs-tools, busybox, udev and kmod) with
# the built gpuinit packages installed with apt (lib.sh's debian_tree: the
# tools under test are the package's). The tree is never booted: it is the system
# mkinitramfs runs in (a chroot), so the project's own initramfs-tools hook
# decides what of gpuinit reaches the guest. A boot script in init-premount
# calls the shared runner before any root filesystem is looked for. The
# interface is described in run-vm-test.sh and tests/vm/README.md.

flavour_memory=512
# No such disk: the runner ends qemu in init-premount, before the root is
# waited for. rootdelay bounds that wait, should the runner ever return.
flavour_append="root=UUID=00000000-0000-0000-0000-000000000000 rootdelay=5"

flavour_needs() {
  debian_needs
  # mkinitramfs refuses to compress for a kernel whose config it cannot
  # read; the headers carry the very kernel's .config.
  [[ -f /lib/modules/$release/build/.config ]] ||
    skip "/lib/modules/$release/build/.config (linux-headers-$release) is missing"
}

# No init system: the image only runs mkinitramfs. Its own directory, as
# each flavour's package list makes a different image.
flavour_base() {
  "$here/build-debian-image.sh" "$cache/debian-initramfs" initramfs-tools,busybox
}

flavour_tree() {
  local tree=$1
  debian_tree "$cache/debian-initramfs" "$tree"
  mkdir -p "$tree/boot"
  cp "/lib/modules/$release/build/.config" "$tree/boot/config-$release"
  # The harness's files only. The accounts, the policy, the modprobe.d files
  # and the modules are the project hook's job (gpu-restriction, from the
  # package), which is what the scenarios test. /etc hooks run after all of
  # /usr/share's, so this one sees what that hook copied of /usr/sbin, where
  # the package put the tools under test: it keeps each copy that is the
  # tool under test, so the scenario sees the layout the project hook made
  # (a multi-call link must stay a link), and copies any other tool itself
  # (copy_file never overwrites). The tree's layout goes in as tools.layout,
  # for the scenario to compare.
  cat >"$tree/etc/initramfs-tools/hooks/gpuinit-vm" <<'HOOK'
#!/bin/sh
PREREQ=""
prereqs() { echo "$PREREQ"; }
case $1 in
prereqs) prereqs; exit 0 ;;
esac
. /usr/share/initramfs-tools/hook-functions
lib=/usr/local/lib/gpuinit-vm
for file in /scenario.sh /scenario-common.sh $lib/run-scenario $lib/tools; do
  copy_file harness "$file" || [ $? -eq 1 ] || { echo "E: gpuinit-vm: cannot copy $file" >&2; exit 1; }
done
tools=$(cat $lib/tools)
for tool in $tools; do
  echo "$tool $(readlink "/usr/sbin/$tool")"
done >"$DESTDIR$lib/tools.layout"
for tool in $tools; do
  cmp -s "/usr/sbin/$tool" "$DESTDIR/usr/sbin/$tool" 2>/dev/null && continue
  echo "W: gpuinit-vm: the initramfs has no /usr/sbin/$tool or another one: copying the tool under test" >&2
  rm -f "$DESTDIR/usr/sbin/$tool" "$DESTDIR$(readlink -f "/usr/sbin/$tool")"
  copy_exec "/usr/sbin/$tool" || { echo "E: gpuinit-vm: cannot copy /usr/sbin/$tool" >&2; exit 1; }
done
HOOK
  cat >"$tree/etc/initramfs-tools/scripts/init-premount/gpuinit-vm" <<SCRIPT
#!/bin/sh
PREREQ=""
prereqs() { echo "\$PREREQ"; }
case \$1 in
prereqs) prereqs; exit 0 ;;
esac
sh $guest_runner $scenario >/dev/ttyS0 2>&1 </dev/null
SCRIPT
  chmod 755 "$tree/etc/initramfs-tools/hooks/gpuinit-vm" \
    "$tree/etc/initramfs-tools/scripts/init-premount/gpuinit-vm"
}

# mkinitramfs in the tree, as update-initramfs would run it there: its hooks
# see the tree's files as / (the runner and scenario the harness added
# included).
flavour_boot() {
  local status=0
  chroot "$1" mkinitramfs -o /boot/initrd.img "$release" >"$work/mkinitramfs.log" 2>&1 || status=$?
  # The harness extracts no firmware: those warnings are expected noise.
  grep -v '^W: Possible missing firmware' "$work/mkinitramfs.log" >&2 || true
  [[ $status -eq 0 && -s $1/boot/initrd.img ]] || die "mkinitramfs failed (exit $status)"
  initrd=$1/boot/initrd.img
}
