# shellcheck shell=bash
# The image for package-upgrade: the installed packages set up as the
# admin does under systemd (the stand-in driver loaded at boot with four
# GPUs, gpu-restriction and gpu-persist enabled; the package made the
# gpu-persist account), and newer packages to upgrade to in /debs-upgrade:
# the built ones with a higher version, as the next release would be.
# shellcheck disable=SC2154 # $tree and $here come from run-vm-test.sh
echo nvidia >"$tree/etc/modules-load.d/gpuinit-vm.conf"
echo 'options nvidia gpus=4 init_ms=300' >"$tree/etc/modprobe.d/gpuinit-vm.conf"
chroot "$tree" systemctl enable gpu-restriction.service gpu-persist.service
# The scenario starts once the boot is done, not merely after udev.
sed -i 's/^After=.*/& multi-user.target/' "$tree/etc/systemd/system/gpuinit-vmtest.service"

mkdir -p "$tree/debs-upgrade"
# The built packages with a higher version, as the next release would be.
"$here/../packaging/repack-upgrade.sh" "$GPUINIT_DEB_DIR" "$tree/debs-upgrade"
ls -l "$tree/debs-upgrade"
