# shellcheck shell=bash
# The README's systemd set-up, done to the image before its boot: the
# packages are installed (flavour_tree; their postinst made the gpu-persist
# account with systemd-sysusers); the stand-in driver is loaded by
# systemd-modules-load with its options from modprobe.d, as a real driver
# package does it; then the admin's step: systemctl enable for both units.
# shellcheck disable=SC2154 # $tree comes from run-vm-test.sh
printf 'nvidia\nnvidia_uvm\n' >"$tree/etc/modules-load.d/gpuinit-vm.conf"
echo 'options nvidia gpus=4 init_ms=300' >"$tree/etc/modprobe.d/gpuinit-vm.conf"
chroot "$tree" systemctl enable gpu-restriction.service gpu-persist.service
# The scenario starts once the boot is done, not merely after udev.
sed -i 's/^After=.*/& multi-user.target/' "$tree/etc/systemd/system/gpuinit-vmtest.service"
