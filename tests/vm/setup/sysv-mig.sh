# shellcheck shell=bash
# The image for sysv-mig: the project's SysV script, which the package
# registered disabled, enabled as the admin does (the gpu-persist account its
# PERSIST_ARGS name is the postinst's), two stand-in GPUs that come up with MIG on and no instances (mig_on=1: what a
# reboot leaves of a MIG GPU), a declared layout, and the stand-in
# nvidia-smi in its driver mode as the machine's nvidia-smi.
# shellcheck disable=SC2154 # $tree comes from run-vm-test.sh
chroot "$tree" update-rc.d gpu-restriction enable
echo 'options nvidia gpus=2 mig_on=1' >"$tree/etc/modprobe.d/gpuinit-vm.conf"
add_standin_nvidia_smi "$tree"
printf 'gpu=* mig=on gi=1g.10gb*3\n' >"$tree/etc/gpu-mig-layout.conf"
