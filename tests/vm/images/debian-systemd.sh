# shellcheck shell=bash
# Sourced by run-vm-test.sh: its variables come from there, and it reads
# flavour_memory.
# shellcheck disable=SC2034,SC2154
# Image flavour "debian-systemd": a debootstrapped Debian 12 (minbase with
# systemd, systemd-sysv, udev and kmod), booted as an initramfs with systemd
# as PID 1, the built gpuinit packages installed with apt (lib.sh's
# debian_tree: the tools under test are the package's). A oneshot unit,
# after udev's coldplug, calls the shared runner. The interface is described in run-vm-test.sh and
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
  systemd_test_init "$tree"
}
