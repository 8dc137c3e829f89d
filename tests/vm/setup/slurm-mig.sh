# shellcheck shell=bash
# The image for slurm-mig: the stand-in driver loaded at boot by
# systemd-modules-load with two GPUs of three MIG instances each; a munge
# key of this tree's own; the node named gpunode, resolving to localhost.
# munge starts at boot; slurmctld and slurmd are disabled, as the scenario
# starts them once the cap nodes and gres.conf exist (slurmd reads gres.conf
# only at start).
# shellcheck disable=SC2154 # $tree comes from run-vm-test.sh
echo nvidia >"$tree/etc/modules-load.d/gpuinit-vm.conf"
echo 'options nvidia gpus=2 mig=3' >"$tree/etc/modprobe.d/gpuinit-vm.conf"
# The package's postinst made a key in the cached image; every tree gets its
# own, owned by munge (the flavour keeps owners in the initramfs).
rm -f "$tree/etc/munge/munge.key"
chroot "$tree" su munge -s /bin/sh -c 'mungekey --create --keyfile /etc/munge/munge.key'
echo gpunode >"$tree/etc/hostname"
printf '127.0.0.1\tlocalhost gpunode\n' >"$tree/etc/hosts"
chroot "$tree" systemctl disable --quiet slurmctld.service slurmd.service
# The scenario starts once the boot is done (munge up), not merely after udev.
sed -i 's/^After=.*/& multi-user.target/' "$tree/etc/systemd/system/gpuinit-vmtest.service"
