# shellcheck shell=bash
# Sourced by run-vm-test.sh: its variables come from there, and it reads
# flavour_memory.
# shellcheck disable=SC2034,SC2154
# Image flavour "debian-systemd": a debootstrapped Debian 12 (minbase with
# systemd, systemd-sysv, udev and kmod), booted as an initramfs with systemd
# as PID 1, gpuinit installed by cmake --install --prefix /usr and the tools
# under test over the installed ones. A oneshot unit, after udev's coldplug,
# calls the shared runner. The interface is described in run-vm-test.sh and
# tests/vm/README.md.

flavour_memory=1024

flavour_needs() {
  debian_needs
}

# The image is cached in $cache/debian (CI caches that path; keep the name).
flavour_base() {
  "$here/build-debian-image.sh" "$cache/debian"
}

flavour_tree() {
  local tree=$1
  debian_tree "$cache/debian" "$tree"
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
  # With console=ttyS0 the getty generator starts serial-getty@ttyS0, whose
  # TTYVHangup=yes hangs up the line under the scenario: from then on its
  # output is lost, at a different point each boot.
  ln -sf /dev/null "$tree/etc/systemd/system/serial-getty@ttyS0.service"
}
