# shellcheck shell=bash
# Sourced by run-vm-test.sh: its variables come from there, and it reads
# flavour_memory.
# shellcheck disable=SC2034,SC2154
# Image flavour "debian-slurm": debian-systemd's image plus Debian 12's own
# Slurm 22.05 (slurmctld, slurmd, slurm-client) and munge, with dbus so that
# slurmd's cgroup/v2 plugin asks systemd for its slurmstepd.scope as on a
# real node. Booted as an initramfs with systemd as PID 1, gpuinit installed
# by cmake --install --prefix /usr and the tools under test over the
# installed ones; a oneshot unit, after udev's coldplug, calls the shared
# runner. Unlike debian-systemd's, the initramfs keeps the owners the
# packages gave their files (munged refuses a key it does not own). The
# packages enable munge, slurmd and slurmctld; nothing is
# configured (their units need /etc/slurm/slurm.conf): a scenario's setup
# writes the configuration or leaves the start to the scenario. The
# interface is described in run-vm-test.sh and tests/vm/README.md.

flavour_memory=1024

# The Debian packages beyond minbase (build-debian-image.sh adds udev and
# kmod). A change here rebuilds the cached image (the stamp below).
# iproute2: Slurm resolves even 127.0.0.1 with AI_ADDRCONFIG, which glibc
# answers with nothing while no IPv4 address but 127.0.0.1 exists (the guest
# has no network driver), so a scenario adds one to lo.
slurm_image_packages=systemd,systemd-sysv,dbus,iproute2,slurmd,slurmctld,slurm-client,munge

flavour_needs() {
  debian_needs
}

# Its own cache directory, never $cache/debian (debian-systemd's, which CI
# caches). build-debian-image.sh keeps a finished image whatever list it is
# asked for, so the list is stamped here and a different one starts afresh.
flavour_base() {
  local image=$cache/debian-slurm
  if [[ -f $image/.complete && $(cat "$image.packages" 2>/dev/null) != "$slurm_image_packages" ]]; then
    echo "vm: the package list of $image changed; rebuilding it"
    rm -rf "$image"
  fi
  "$here/build-debian-image.sh" "$image" "$slurm_image_packages"
  echo "$slurm_image_packages" >"$image.packages"
}

flavour_tree() {
  local tree=$1
  debian_tree "$cache/debian-slurm" "$tree"
  ln -sf lib/systemd/systemd "$tree/init"
  cat >"$tree/etc/systemd/system/gpuinit-vmtest.service" <<UNIT
[Unit]
Description=gpuinit VM scenario
Wants=systemd-udevd.service systemd-udev-trigger.service
After=systemd-udevd.service systemd-udev-trigger.service

[Service]
Type=oneshot
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
ExecStart=/bin/sh $guest_runner $scenario
UNIT
  ln -sf /etc/systemd/system/gpuinit-vmtest.service \
    "$tree/etc/systemd/system/multi-user.target.wants/gpuinit-vmtest.service"
  # As in debian-systemd: serial-getty@ttyS0's TTYVHangup=yes would hang up
  # the line under the scenario.
  ln -sf /dev/null "$tree/etc/systemd/system/serial-getty@ttyS0.service"
}

# pack_initramfs makes every file root's; munge's key and directories, and
# slurm's state and log directories, must keep their owners (the tree is a
# root-made copy of the image, so its numeric owners are the image's).
flavour_boot() {
  (cd "$1" && find . -print0 | cpio --quiet --null -o -H newc | gzip -1) >"$work/initrd.gz"
  initrd=$work/initrd.gz
}
