# shellcheck shell=bash
# The image for persistenced-conflict: two stand-in GPUs loaded at boot,
# gpu-restriction enabled (gpu-persist is not: the admin starts it), and a
# stand-in for NVIDIA's nvidia-persistenced.service, a sleep loop under the
# unit name NVIDIA's package installs, enabled as that package enables it.
# shellcheck disable=SC2154 # $tree comes from run-vm-test.sh
echo nvidia >"$tree/etc/modules-load.d/gpuinit-vm.conf"
echo 'options nvidia gpus=2 init_ms=300' >"$tree/etc/modprobe.d/gpuinit-vm.conf"
cat >"$tree/lib/systemd/system/nvidia-persistenced.service" <<'UNIT'
[Unit]
Description=stand-in for NVIDIA Persistence Daemon (gpuinit VM test)

[Service]
ExecStart=/bin/sh -c 'while :; do sleep 1; done'

[Install]
WantedBy=multi-user.target
UNIT
chroot "$tree" systemctl enable gpu-restriction.service nvidia-persistenced.service
# The scenario starts once the boot is done, not merely after udev.
sed -i 's/^After=.*/& multi-user.target/' "$tree/etc/systemd/system/gpuinit-vmtest.service"
