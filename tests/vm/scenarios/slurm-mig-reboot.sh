# A MIG layout that survives a reboot, on the Slurm node of slurm-mig: the
# layout is declared (gpu=* mig=on gi=1g.10gb*3) and gpu-mig.service enabled
# by the README's Slurm recipe, word for word (setup/);
# the stand-in driver loads with MIG on and no instances, as a reboot leaves
# a MIG GPU. The boot's gpu-mig.service makes the six instances through the
# guest's nvidia-smi (the stand-in, in its driver mode) and syncs (cap nodes,
# leases, names). slurmd starts with a gres.conf that gpu-mig gres --check
# accepts, and a job gets one instance's files and its MIG UUID. Then a
# reboot, as far as a module can have one: slurmd and the unit stopped, the
# driver reloaded (every instance lost, the MIG mode kept), /run/gpu-mig and
# /dev/nvidia-caps gone as a fresh /run and /dev would be; starting slurmd
# starts gpu-mig.service first (RequiredBy=), which makes the same instances
# again, and the job gets its instance and UUID again. A second gpu-mig
# apply changes nothing. A wrong gres.conf fails the unit with its line in
# the journal, and slurmd does not start; MIG_GRES_CONF= lets it go on.
#
# vm-flavour: debian-slurm
# vm-label: slurm
. /scenario-common.sh
caps=/proc/driver/nvidia/capabilities
ctl=/proc/driver/nvidia-test/mig
node=$(hostname)
access_minor() { awk '$1 == "DeviceFileMinor:" { print $2 }' "$1"; }
# "minor gi ci" of every compute instance, by GPU, GI and CI.
instances() {
  find $caps -path '*/gpu*/mig/gi*/ci*/access' |
    sed 's|.*/gpu\([0-9]*\)/mig/gi\([0-9]*\)/ci\([0-9]*\)/access|\1 \2 \3|' | sort -n -k1,1 -k2,2 -k3,3
}
# The MIG UUID nvidia-smi -L gives instance MINOR GI CI: its devices are
# listed by GI, then CI (the stand-in's NVML order), so the instance's rank
# among its GPU's compute instances is its device number.
expected_uuid() {
  rank=$(instances | awk -v g="$1" '$1 == g { print $2, $3 }' | grep -nx "$2 $3" | cut -d: -f1)
  [ -n "$rank" ] || fail "no instance gpu$1/gi$2/ci$3"
  nvidia-smi -L | awk -v gpu="GPU $1:" -v device="Device +$((rank - 1)):" '
    index($0, gpu) == 1 { on = 1; next }
    /^GPU / { on = 0 }
    on && $0 ~ device { sub(/.*UUID: /, ""); sub(/\).*/, ""); print }'
}
# The instance a gres.conf line is for: its "# MIG gpuN/giG/ciC" comment.
line_uuid() {
  key=${1##*# MIG gpu}
  expected_uuid "${key%%/*}" "$(echo "$key" | sed 's|^[0-9]*/gi\([0-9]*\)/.*|\1|')" "${key##*/ci}"
}
# What the boot (or the unit's start) must have made: the six instances,
# each cap node, each CI's lease, and every instance named with nvidia-smi's
# UUID in gpu-mig list.
check_made() {
  instances | tee /tmp/instances
  [ "$(wc -l </tmp/instances)" = 6 ] || fail "$1: $(wc -l </tmp/instances) compute instances, not 6"
  [ "$(awk '$1 == 0' /tmp/instances | wc -l)" = 3 ] || fail "$1: GPU 0 has not 3 instances"
  capsmajor=$(awk '$2 == "nvidia-caps" { print $1 }' /proc/devices)
  find $caps -path '*/gpu*' -name access >/tmp/access
  while read -r access; do
    minor=$(access_minor "$access")
    [ "$(stat -c '%t:%T' "/dev/nvidia-caps/nvidia-cap$minor")" = "$(printf %x:%x "$capsmajor" "$minor")" ] ||
      fail "$1: no /dev/nvidia-caps/nvidia-cap$minor $capsmajor:$minor for $access"
  done </tmp/access
  while read -r gpu gi ci; do
    [ -p "/run/gpu-mig/gpu$gpu-gi$gi-ci$ci" ] || fail "$1: no lease /run/gpu-mig/gpu$gpu-gi$gi-ci$ci"
  done </tmp/instances
  [ -f /run/gpu-mig/names ] || fail "$1: no names file"
  gpu-mig list | tee /tmp/list
  while read -r gpu gi ci; do
    uuid=$(expected_uuid "$gpu" "$gi" "$ci")
    [ -n "$uuid" ] || fail "$1: nvidia-smi -L has no UUID for gpu$gpu/gi$gi/ci$ci"
    awk -v g="$gpu" -v i="$gi" -v c="$ci" '$1 == g && $3 == i && $4 == c' /tmp/list | grep -qF "$uuid" ||
      fail "$1: gpu-mig list does not name gpu$gpu/gi$gi/ci$ci $uuid"
  done </tmp/instances
}
# Up to 60 s for slurmd to register and the node to become idle.
wait_idle() {
  start=$(now)
  until scontrol show node "$node" 2>/dev/null | grep -q 'State=IDLE'; do
    if [ $(($(now) - start)) -gt 6000 ] || systemctl is-failed -q slurmctld.service slurmd.service; then
      scontrol show node "$node" || true
      systemctl status -l --no-pager slurmctld.service slurmd.service || true
      tail -n 40 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log || true
      fail "$1: the node did not become idle"
    fi
    sleep 1
  done
}
# A job of one instance opens exactly that instance's files (one gres.conf
# line's) and has its MIG UUID from the TaskProlog.
check_job() {
  srun --gres="gpu:$type:1" sh /tmp/probe | tee /tmp/job
  grep '^OPEN' /tmp/job | cut -d' ' -f2 | sort >/tmp/opened
  found=
  while read -r line; do
    files=${line#*MultipleFiles=}
    if [ "$(echo "${files%% *}" | tr ',' '\n' | sort | paste -sd,)" = "$(paste -sd, /tmp/opened)" ]; then
      found=$line
    fi
  done </etc/slurm/gres.conf
  [ -n "$found" ] || fail "$1: the job opened $(paste -sd' ' /tmp/opened), not one instance's files"
  echo "the job got: $found"
  uuid=$(line_uuid "$found")
  [ -n "$uuid" ] || fail "$1: no UUID for $found"
  grep -qx "CUDA_VISIBLE_DEVICES=$uuid SLURM_STEP_GPUS=.*" /tmp/job ||
    fail "$1: the job's CUDA_VISIBLE_DEVICES is not $uuid: $(grep CUDA_VISIBLE /tmp/job)"
}

[ "$(readlink /proc/1/exe)" = /usr/lib/systemd/systemd ] || fail "PID 1 is $(readlink /proc/1/exe)"
systemctl is-active -q munge.service || fail "munge is not running"
cat /etc/gpu-mig-layout.conf
systemctl cat gpu-mig.service
systemd-analyze verify --man=no gpu-mig.service 2>&1 | tee /tmp/verify
[ ! -s /tmp/verify ] || fail "systemd-analyze verify complained about gpu-mig.service"
echo "BOOT scenario-start cs=$(now)"

# The boot: the driver came up with MIG on and no instances, gpu-mig.service
# made them.
systemctl status --no-pager gpu-mig.service || true
journalctl -b --no-pager -o cat -u gpu-mig.service | tee /tmp/journal-boot
systemctl is-active -q gpu-mig.service || fail "gpu-mig.service is not active after the boot"
cat $ctl
grep -qx 'gpu 0 mig 1 1' $ctl || fail "GPU 0's MIG mode is not on"
check_made boot

# gres.conf by the README's step (setup/slurm-mig-reboot.sh put it in
# /root), accepted by gpu-mig's check; the type is the driver's model and
# the profile.
sh -e /root/recipe-slurm-gres.sh || fail "the README's gres.conf step (recipe slurm-gres) failed"
cat /etc/slurm/gres.conf
[ "$(grep -c '^NodeName=.*MultipleFiles=' /etc/slurm/gres.conf)" = 6 ] || fail "gres.conf does not list 6 instances"
gpu-mig gres --check /etc/slurm/gres.conf || fail "gpu-mig gres --check finds its own gres.conf differs"
gres=$(gpu-mig gres --slurm-conf)
type=${gres#Gres=gpu:}
type=${type%:6}
[ "$gres" = "Gres=gpu:$type:6" ] || fail "the node's Gres is $gres, not six of one type"
sed -n 's/.*Files*=\([^ ]*\).*/\1/p' /etc/slurm/gres.conf | tr ',' '\n' | sort -u >/tmp/gres-files
printf '#!/bin/sh\nexec %s env\n' "$(command -v gpu-mig)" >/etc/slurm/task-prolog
chmod 0755 /etc/slurm/task-prolog
cat >/etc/slurm/slurm.conf <<CONF
ClusterName=gpuinit
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
DebugFlags=Gres
SlurmctldDebug=debug
SlurmdDebug=debug
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
ReturnToService=2
MpiDefault=none
TaskProlog=/etc/slurm/task-prolog
NodeName=$node NodeAddr=127.0.0.1 CPUs=1 $gres State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
cat >/etc/slurm/cgroup.conf <<'CONF'
CgroupPlugin=cgroup/v2
ConstrainDevices=yes
CONF
# Slurm resolves 127.0.0.1 with AI_ADDRCONFIG (see slurm-mig.sh).
ip address add 192.0.2.1/32 dev lo
cat >/tmp/probe <<'PROBE'
while read -r file; do
  if error=$(dd if="$file" of=/dev/null count=0 2>&1); then echo "OPEN $file"; else echo "DENIED $file: $error"; fi
done </tmp/gres-files
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} SLURM_STEP_GPUS=${SLURM_STEP_GPUS-unset}"
PROBE
systemctl start slurmctld.service slurmd.service
wait_idle boot
echo "BOOT node-idle cs=$(now)"
scontrol show node "$node" | grep -q "Gres=gpu:$type:6" || fail "scontrol does not report Gres=gpu:$type:6"
check_job boot
cp $ctl /tmp/state-boot

# The reboot: what a shutdown stops, the driver reloaded (its instances are
# lost, its MIG mode is the module's option), and what a reboot does not
# keep: /run (leases, names) and the cap nodes of /dev.
echo "BOOT reboot cs=$(now)"
systemctl stop slurmd.service gpu-mig.service
modprobe -r nvidia_uvm 2>/dev/null || true
modprobe -r nvidia
rm -rf /run/gpu-mig /dev/nvidia-caps
find /dev/char -lname '../nvidia-caps/*' -delete
modprobe nvidia
udevadm settle
cat $ctl
[ "$(cat $ctl)" = "$(printf 'gpu 0 mig 1 1\ngpu 1 mig 1 1')" ] || fail "the reload kept instances or lost the mode: $(cat $ctl)"
[ -z "$(instances)" ] || fail "instances survived the reload"
! nvidia-smi -L | grep -q MIG || fail "nvidia-smi still lists MIG devices"
# The boot's order: slurmd requires gpu-mig.service, which runs first.
systemctl start slurmd.service
systemctl is-active -q gpu-mig.service || fail "starting slurmd did not start gpu-mig.service"
journalctl --no-pager -o cat -u gpu-mig.service | tail -n 20
check_made reboot
[ "$(cat $ctl)" = "$(cat /tmp/state-boot)" ] || fail "after the reboot the instances differ: $(cat $ctl)"
gpu-mig gres --check /etc/slurm/gres.conf || fail "the boot's gres.conf no longer matches"
wait_idle reboot
echo "BOOT node-idle-again cs=$(now)"
check_job reboot

# A second apply has nothing to do: no command reaches the driver.
changes=$(dmesg | grep -c 'fake-nvidia: mig \(create\|destroy\)-' || true)
if ! gpu-mig apply >/tmp/apply2 2>&1; then cat /tmp/apply2; fail "a second apply failed"; fi
cat /tmp/apply2
[ "$(cat $ctl)" = "$(cat /tmp/state-boot)" ] || fail "a second apply changed the instances: $(cat $ctl)"
[ "$(dmesg | grep -c 'fake-nvidia: mig \(create\|destroy\)-' || true)" = "$changes" ] ||
  fail "a second apply created or destroyed instances: $(dmesg | grep 'fake-nvidia: mig' | tail -n 4)"
gpu-mig apply --check || fail "apply --check finds the machine differs from the layout"

# A wrong gres.conf (one instance's line lost): the unit fails with one
# line in the journal, and slurmd, which requires it, does not start.
systemctl stop slurmd.service gpu-mig.service
cp /etc/slurm/gres.conf /tmp/gres.conf.good
sed -i "$(grep -n 'MultipleFiles=' /etc/slurm/gres.conf | tail -n 1 | cut -d: -f1)d" /etc/slurm/gres.conf
if systemctl start slurmd.service; then fail "slurmd started with a wrong gres.conf"; fi
systemctl is-failed -q gpu-mig.service || fail "gpu-mig.service did not fail on a wrong gres.conf"
! systemctl is-active -q slurmd.service || fail "slurmd runs although gpu-mig.service failed"
journalctl --no-pager -o cat -u gpu-mig.service | tail -n 20 | tee /tmp/journal-wrong
[ "$(grep -c '^gpu-mig: error: /etc/slurm/gres.conf differs from the machine in [0-9]* ways; first: ' /tmp/journal-wrong)" = 1 ] ||
  fail "the journal does not have gres --check's one line"
! grep -q '^\(not-listed\|count-change\|missing-file\): ' /tmp/journal-wrong ||
  fail "gres --check -q printed its findings one by one"
# The admin's way on: MIG_GRES_CONF= skips the check.
cp /etc/default/gpu-restriction /tmp/default.saved 2>/dev/null || : >/tmp/default.saved
echo 'MIG_GRES_CONF=' >>/etc/default/gpu-restriction
systemctl reset-failed gpu-mig.service
systemctl start gpu-mig.service || fail "MIG_GRES_CONF= did not skip the gres.conf check"
cp /tmp/default.saved /etc/default/gpu-restriction
# Fixed, slurmd starts again.
systemctl stop gpu-mig.service
cp /tmp/gres.conf.good /etc/slurm/gres.conf
systemctl start slurmd.service || fail "slurmd does not start with the fixed gres.conf"

systemctl stop slurmd.service slurmctld.service
systemctl --failed --no-legend --plain | tee /tmp/failed
[ ! -s /tmp/failed ] || fail "failed units: $(cat /tmp/failed)"
