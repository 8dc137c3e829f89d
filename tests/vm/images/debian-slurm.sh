# shellcheck shell=bash
# Sourced by run-vm-test.sh: its variables come from there, and it reads
# flavour_memory.
# shellcheck disable=SC2034,SC2154
# Image flavour "debian-slurm": debian-systemd's image plus Debian 12's own
# Slurm 22.05 (slurmctld, slurmd, slurm-client) and munge, with dbus so that
# slurmd's cgroup/v2 plugin asks systemd for its slurmstepd.scope as on a
# real node. Booted as an initramfs with systemd as PID 1, the built gpuinit
# packages installed with apt (lib.sh's debian_tree: the tools under test
# are the package's); a oneshot unit, after udev's coldplug, calls the
# shared runner. Unlike debian-systemd's, the initramfs keeps the owners the
# packages gave their files (munged refuses a key it does not own). The
# packages enable munge, slurmd and slurmctld; nothing is
# configured (their units need /etc/slurm/slurm.conf): a scenario's setup
# writes the configuration or leaves the start to the scenario. The
# interface is described in run-vm-test.sh and tests/vm/README.md.

flavour_memory=1024

# The Debian packages beyond minbase (build-debian-image.sh adds udev and
# kmod). A change here rebuilds the cached image (build-debian-image.sh
# stamps each image with its list).
# iproute2: Slurm resolves even 127.0.0.1 with AI_ADDRCONFIG, which glibc
# answers with nothing while no IPv4 address but 127.0.0.1 exists (the guest
# has no network driver), so a scenario adds one to lo.
slurm_image_packages=systemd,systemd-sysv,dbus,iproute2,slurmd,slurmctld,slurm-client,munge

flavour_needs() {
  debian_needs
}

# Its own cache directory, never $cache/debian (debian-systemd's, which CI
# caches).
flavour_base() {
  "$here/build-debian-image.sh" "$cache/debian-slurm" "$slurm_image_packages"
}

flavour_tree() {
  local tree=$1
  debian_tree "$cache/debian-slurm" "$tree"
  systemd_test_init "$tree"
}

# Unlike the default boot media, the files keep their owners: munged
# refuses a key it does not own, and slurm's state and log directories are
# slurm's.
flavour_boot() {
  pack_initramfs "$1" "$work/initrd.gz" keep-owners
  initrd=$work/initrd.gz
}
