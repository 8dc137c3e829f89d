# shellcheck shell=bash
# Sourced by run-vm-test.sh after flavour_tree: $tree is the system that
# mkinitramfs runs in.
# shellcheck disable=SC2154
# The stand-in's GPU count as a machine would set a module option, in
# /etc/modprobe.d: the initramfs must carry it for gpu-modload to use there.
echo "options nvidia gpus=2" >"$tree/etc/modprobe.d/gpuinit-vm.conf"
