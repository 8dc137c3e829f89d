# shellcheck shell=bash
# The README's systemd set-up, done to the image before its boot: the
# packages are installed (flavour_tree; their postinst made the gpu-persist
# account with systemd-sysusers); the stand-in driver is loaded by
# systemd-modules-load with its options from modprobe.d, as a real driver
# package does it; then the admin's step, the README's workstation recipe
# for systemd (<!-- recipe: workstation-systemd -->) word for word.
# shellcheck disable=SC2154 # $tree comes from run-vm-test.sh, $here too
printf 'nvidia\nnvidia_uvm\n' >"$tree/etc/modules-load.d/gpuinit-vm.conf"
echo 'options nvidia gpus=4 init_ms=300' >"$tree/etc/modprobe.d/gpuinit-vm.conf"
"$here/../readme/check-readme.sh" extract "$here/../../README.md" workstation-systemd \
  >"$tree/root/recipe.sh"
chroot "$tree" sh -e /root/recipe.sh
rm "$tree/root/recipe.sh"
# The scenario starts once the boot is done, not merely after udev.
sed -i 's/^After=.*/& multi-user.target/' "$tree/etc/systemd/system/gpuinit-vmtest.service"
