# gpu-persist and NVIDIA's nvidia-persistenced exclude each other as
# services (the unit's Conflicts=), not as packages: with a stand-in
# nvidia-persistenced.service enabled as NVIDIA's package enables it, the
# installed gpuinit leaves it running at boot; systemctl start gpu-persist
# stops it and holds the GPUs, starting nvidia-persistenced again stops
# gpu-persist (which releases them); once nvidia-persistenced is masked, its
# start fails and gpu-persist keeps the GPUs.
#
# vm-flavour: debian-systemd
. /scenario-common.sh
held() { awk '!/^#/ { print $5 }' /proc/driver/nvidia-test/counters | uniq -c | awk '{ $1 = $1; print }'; }
active() { systemctl is-active gpu-persist.service nvidia-persistenced.service | tr '\n' ' '; }

wait_for 'systemctl is-active -q nvidia-persistenced.service' 600
wait_for 'systemctl is-active -q gpu-restriction.service' 600
cat /proc/driver/nvidia-test/counters
[ "$(active)" = "inactive active " ] || fail "at boot: gpu-persist, nvidia-persistenced: $(active)"
[ "$(held)" = "2 0" ] || fail "a GPU is held before gpu-persist started"

systemctl start gpu-persist.service
[ "$(active)" = "active inactive " ] || fail "after starting gpu-persist: $(active)"
[ "$(systemctl show -p MainPID --value nvidia-persistenced.service)" = 0 ] ||
  fail "nvidia-persistenced's process is still there"
cat /proc/driver/nvidia-test/counters
[ "$(held)" = "2 1" ] || fail "gpu-persist does not hold both GPUs"

# Conflicts= works both ways: nvidia-persistenced's start stops gpu-persist.
systemctl start nvidia-persistenced.service
[ "$(active)" = "inactive active " ] || fail "after starting nvidia-persistenced: $(active)"
cat /proc/driver/nvidia-test/counters
[ "$(held)" = "2 0" ] || fail "gpu-persist's stop did not release the GPUs"

# The switch for good: nvidia-persistenced masked, its start fails and
# gpu-persist keeps the GPUs.
systemctl mask --now nvidia-persistenced.service
systemctl start gpu-persist.service
if systemctl start nvidia-persistenced.service; then fail "a masked nvidia-persistenced started"; fi
[ "$(active)" = "active inactive " ] || fail "after the masked start: $(active)"
[ "$(held)" = "2 1" ] || fail "gpu-persist does not hold both GPUs after the masked start"
