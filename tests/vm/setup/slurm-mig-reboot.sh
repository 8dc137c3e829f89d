# shellcheck shell=bash
# The image for slurm-mig-reboot: slurm-mig's node (a munge key of its own,
# the node named gpunode, slurmctld and slurmd disabled until the scenario
# configures them), set up as the README's Slurm recipe does: the layout
# declared in /etc/gpu-mig-layout.conf, gpu-restriction.service and
# gpu-mig.service enabled (gpu-mig.service's RequiredBy=slurmd.service).
# The stand-in driver loads with MIG on and no instances (mig_on=1: what a
# reboot leaves of a MIG GPU), so the boot itself must make them. The
# guest's nvidia-smi is the stand-in nvidia-smi (tests/fixture) in its
# driver mode: it creates and destroys instances through the driver's
# nvidia-test/mig and keeps no state of its own, so whatever the driver
# loses, nvidia-smi has lost too.
# shellcheck disable=SC2154 # $tree comes from run-vm-test.sh
echo nvidia >"$tree/etc/modules-load.d/gpuinit-vm.conf"
echo 'options nvidia gpus=2 mig_on=1' >"$tree/etc/modprobe.d/gpuinit-vm.conf"
rm -f "$tree/etc/munge/munge.key"
chroot "$tree" su munge -s /bin/sh -c 'mungekey --create --keyfile /etc/munge/munge.key'
echo gpunode >"$tree/etc/hostname"
printf '127.0.0.1\tlocalhost gpunode\n' >"$tree/etc/hosts"
chroot "$tree" systemctl disable --quiet slurmctld.service slurmd.service
# The scenario starts once the boot is done (munge up), not merely after udev.
sed -i 's/^After=.*/& multi-user.target/' "$tree/etc/systemd/system/gpuinit-vmtest.service"

add_standin_nvidia_smi "$tree"

# The README's Slurm recipe, word for word: its layout and gpu-mig.service
# enabled here (slurm-layout), its gres.conf step (slurm-gres) run by the
# scenario once the boot has made the instances.
# shellcheck disable=SC2154 # $here comes from run-vm-test.sh
"$here/../readme/check-readme.sh" extract "$here/../../README.md" slurm-layout >"$tree/root/recipe.sh"
chroot "$tree" sh -e /root/recipe.sh
rm "$tree/root/recipe.sh"
"$here/../readme/check-readme.sh" extract "$here/../../README.md" slurm-gres \
  >"$tree/root/recipe-slurm-gres.sh"
chroot "$tree" systemctl enable gpu-restriction.service
