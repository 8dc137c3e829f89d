# shellcheck shell=bash
# Sourced by run-vm-test.sh: its variables come from there, and it reads
# flavour_memory.
# shellcheck disable=SC2034,SC2154
# Image flavour "busybox" (the default): an initramfs of busybox-static's
# applets with a tiny /init that mounts /proc, /sys and /dev and calls the
# shared runner. No udev, no kmod tools: scenarios insmod the modules.
# About 6 s from qemu start to the verdict on an idle machine. The interface
# (flavour_memory, flavour_needs, flavour_base, flavour_tree, optional
# flavour_boot) is described in run-vm-test.sh and tests/vm/README.md.

flavour_memory=512

flavour_needs() {
  if ! { [[ -x /bin/busybox ]] && file -b /bin/busybox | grep -q "statically linked"; }; then
    skip "a static /bin/busybox (busybox-static) is missing"
  fi
}

# Nothing to cache: the tree is a few MB, made per scenario.
flavour_base() { :; }

flavour_tree() {
  local tree=$1 applet
  mkdir -p "$tree"/{bin,sbin,etc,proc,sys,dev,tmp,run,usr/sbin}
  cp /bin/busybox "$tree/bin/busybox"
  # Not busybox itself: a self-link gives ELOOP at /init.
  for applet in $("$tree/bin/busybox" --list); do
    [[ $applet == busybox ]] || ln -sf busybox "$tree/bin/$applet"
  done
  add_modules "$tree"
  copy_tools "$tree" "${tools[@]}"
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$tree/etc/passwd"
  printf 'root:x:0:\n' >"$tree/etc/group"
  add_accounts "$tree"
  cat >"$tree/init" <<INIT
#!/bin/sh
export PATH=/usr/sbin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
sh $guest_runner $scenario
poweroff -f
INIT
  chmod +x "$tree/init"
}
