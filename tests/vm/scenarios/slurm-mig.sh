# A real Slurm against the stand-in driver's MIG instances: Debian 12's own
# slurmctld and slurmd 22.05 on this one node (munge, systemd's units, dbus,
# cgroup v2), two GPUs of three instances each, whose cap nodes gpu-mknod
# made. slurmd accepts a gres.conf that gives every instance MultipleFiles=
# of its GPU's node and its GI and CI cap nodes; its DebugFlags=Gres log shows each file's major:minor, and
# scontrol reports the six instances. gpu-mig sync names them (through a
# stand-in nvidia-smi), gpu-mig gres writes gres.conf and the Gres=
# fragment, and gpu-mig env, as the TaskProlog, gives each job its
# instances' MIG UUIDs (also as a job user, for two instances). A job given one instance with
# ConstrainDevices=yes (cgroup v2, eBPF) opens exactly that instance's three
# nodes; every other file gres.conf names fails with EPERM, which root
# outside any job opens; a job given no GPU opens none of them.
#
# vm-flavour: debian-slurm
# vm-label: slurm
. /scenario-common.sh
caps=/proc/driver/nvidia/capabilities
node=$(hostname)
access_minor() { awk '$1 == "DeviceFileMinor:" { print $2 }' "$1"; }

[ "$(readlink /proc/1/exe)" = /usr/lib/systemd/systemd ] || fail "PID 1 is $(readlink /proc/1/exe)"
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || fail "/sys/fs/cgroup is not cgroup v2"
slurmd -V
systemctl is-active -q munge.service || fail "munge is not running"
munge -n | unmunge | grep -q 'STATUS: *Success' || fail "munge cannot decode its own credential"
lsmod | grep -q '^nvidia ' || fail "nvidia is not loaded"
find $caps -name access | sort

# The nodes: gpu-mknod (run by the udev rule when the module loaded, and
# here again) makes /dev/nvidiaN, nvidiactl and a cap node per access file,
# with the nvidia-caps major of /proc/devices.
echo "BOOT scenario-start cs=$(now)"
gpu-mknod
capsmajor=$(awk '$2 == "nvidia-caps" { print $1 }' /proc/devices)
for access in $(find $caps -name access); do
  minor=$(access_minor "$access")
  [ "$(stat -c '%t:%T' "/dev/nvidia-caps/nvidia-cap$minor")" = "$(printf %x:%x "$capsmajor" "$minor")" ] ||
    fail "gpu-mknod made no /dev/nvidia-caps/nvidia-cap$minor $capsmajor:$minor for $access"
done
ls -l /dev/nvidia* /dev/nvidia-caps

# The stand-in has no nvidia-smi: this one prints -L, -q -x and mig -lci
# in nvidia-smi's formats from the driver's files, with MIG UUIDs made from
# (minor, GI, CI) and every instance a 1g.10gb, so gpu-mig sync runs it as
# it would run the real one (found on PATH, its output bounded).
cat >/usr/local/sbin/nvidia-smi <<'SMI'
#!/bin/sh
caps=/proc/driver/nvidia/capabilities
field() { sed -n "s/^$1:[[:space:]]*//p" "$2"; }
mig_uuid() { printf 'MIG-%08x-%04x-4%03x-8%03x-%012x' $((0x3c4c5a27 + $1)) $((0x1000 + $2)) "$1" "$3" $(($1 * 1000 + $2 * 10 + $3)); }
# "minor gi ci" of every compute instance of GPU minor $1, by GI and CI.
instances() {
  find "$caps/gpu$1/mig" -path '*/gi*/ci*/access' 2>/dev/null |
    sed 's|.*/gi\([0-9]*\)/ci\([0-9]*\)/access|\1 \2|' | sort -n -k1,1 -k2,2
}
gpus() {
  for information in /proc/driver/nvidia/gpus/*/information; do
    echo "$(field 'Device Minor' "$information") $information"
  done | sort -n
}
index=0
case "$*" in
-L)
  gpus | while read -r minor information; do
    echo "GPU $index: $(field Model "$information") (UUID: $(field 'GPU UUID' "$information"))"
    device=0
    instances "$minor" | while read -r gi ci; do
      printf '  MIG %-12s Device %2u: (UUID: %s)\n' 1g.10gb "$device" "$(mig_uuid "$minor" "$gi" "$ci")"
      device=$((device + 1))
    done
    index=$((index + 1))
  done ;;
"-q -x")
  echo '<?xml version="1.0" ?>'
  echo '<nvidia_smi_log>'
  gpus | while read -r minor information; do
    echo "	<gpu id=\"$(field 'Bus Location' "$information")\">"
    echo "		<product_name>$(field Model "$information")</product_name>"
    echo "		<mig_devices>"
    device=0
    instances "$minor" | while read -r gi ci; do
      printf '\t\t\t<mig_device>\n\t\t\t\t<index>%u</index>\n\t\t\t\t<gpu_instance_id>%u</gpu_instance_id>\n\t\t\t\t<compute_instance_id>%u</compute_instance_id>\n\t\t\t</mig_device>\n' "$device" "$gi" "$ci"
      device=$((device + 1))
    done
    echo "		</mig_devices>"
    echo "		<uuid>$(field 'GPU UUID' "$information")</uuid>"
    echo "		<minor_number>$minor</minor_number>"
    echo "	</gpu>"
  done
  echo '</nvidia_smi_log>' ;;
*) echo "nvidia-smi (stand-in): $* is not supported" >&2; exit 2 ;;
esac
SMI
chmod 0755 /usr/local/sbin/nvidia-smi
nvidia-smi -L
# The UUID the stand-in nvidia-smi gives the instance of gres.conf's line.
expected_uuid() {
  key=${1##*# MIG gpu}
  minor=${key%%/*}; gi=${key#*/gi}; gi=${gi%%/*}; ci=${key##*/ci}
  printf 'MIG-%08x-%04x-4%03x-8%03x-%012x' $((0x3c4c5a27 + minor)) $((0x1000 + gi)) "$minor" "$ci" $((minor * 1000 + gi * 10 + ci))
}

# gpu-mig sync: the cap nodes again (nothing to do), the leases and the
# names file, from the nvidia-smi above; the job's TaskProlog reads them.
gpu-mig sync --verbose | tee /tmp/sync
grep -q "names: 6 of 6 instances named from /usr/local/sbin/nvidia-smi" /tmp/sync || fail "sync did not name the 6 instances"
[ "$(stat -c '%U %a' /run/gpu-mig/names)" = "root 444" ] || fail "/run/gpu-mig/names is $(stat -c '%U %a' /run/gpu-mig/names)"
gpu-mig list

# gres.conf by gpu-mig gres: a line per MIG instance, MultipleFiles= of its
# GPU's node and its GI and CI cap nodes; types as Slurm 22.05's NVML
# autodetect names them (the model lowercased, spaces to _, cut at its
# first -, then the profile).
gpu-mig gres --node "$node" >/etc/slurm/gres.conf
cat /etc/slurm/gres.conf
[ "$(grep -c '^NodeName=.*MultipleFiles=' /etc/slurm/gres.conf)" = 6 ] || fail "gres.conf does not list 6 instances"
gpu-mig gres --check /etc/slurm/gres.conf || fail "gpu-mig gres --check finds its own gres.conf differs"
type=nvidia_a100_80gb_pcie_1g.10gb
gres=$(gpu-mig gres --slurm-conf)
[ "$gres" = "Gres=gpu:$type:6" ] || fail "the node's Gres is $gres, not Gres=gpu:$type:6"
# Every file gres.conf names, one a line.
sed -n 's/.*Files*=\([^ ]*\).*/\1/p' /etc/slurm/gres.conf | tr ',' '\n' | sort -u >/tmp/gres-files
# The TaskProlog: CUDA_VISIBLE_DEVICES with the instances' MIG UUIDs.
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
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:2
CONF
cat >/etc/slurm/cgroup.conf <<'CONF'
CgroupPlugin=cgroup/v2
ConstrainDevices=yes
CONF
# Slurm resolves every address with AI_ADDRCONFIG, which glibc answers with
# nothing while 127.0.0.1 is the only IPv4 address (slurmctld: "get_addr_info:
# getaddrinfo() failed: Name or service not known", then "Unable to resolve
# "127.0.0.1""); a real node has its network, this guest no network driver.
ip address add 192.0.2.1/32 dev lo
systemctl start slurmctld.service slurmd.service
# Up to 60 s: slurmd registers with slurmctld, which then marks it idle.
echo "BOOT slurm-start cs=$(now)"
start=$(now)
until scontrol show node "$node" 2>/dev/null | grep -q 'State=IDLE'; do
  echo "waiting for the node: $(($(now) - start)) cs"
  if [ $(($(now) - start)) -gt 6000 ] || systemctl is-failed -q slurmctld.service slurmd.service; then
    scontrol show node "$node" || true
    systemctl status -l --no-pager slurmctld.service slurmd.service || true
    tail -n 40 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log || true
    fail "the node did not become idle"
  fi
  sleep 1
done
echo "BOOT node-idle cs=$(now)"
scontrol show node "$node" | tee /tmp/node
grep -q "Gres=gpu:$type:6" /tmp/node || fail "scontrol does not report Gres=gpu:$type:6"
grep -i 'gres\|device' /var/log/slurm/slurmd.log | tee /tmp/slurmd-gres

# slurmd recorded each file's major:minor, as the device cgroup will allow
# it: "gpu device number 12(/dev/nvidia-caps/nvidia-cap12):c 246:12 rwm".
while read -r file; do
  rdev=$(stat -c '%t %T' "$file" | awk '{ printf "%d:%d", "0x" $1, "0x" $2 }')
  grep -qF "($file):c $rdev rwm" /tmp/slurmd-gres || fail "slurmd's log has no c $rdev for $file"
done </tmp/gres-files

# The probe a job runs: open every file gres.conf names.
cat >/tmp/probe <<'PROBE'
while read -r file; do
  if error=$(dd if="$file" of=/dev/null count=0 2>&1); then echo "OPEN $file"; else echo "DENIED $file: $error"; fi
done </tmp/gres-files
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} SLURM_STEP_GPUS=${SLURM_STEP_GPUS-unset}"
cat /proc/self/cgroup
PROBE
# Outside any job, root opens them all.
sh /tmp/probe | tee /tmp/outside
[ "$(grep -c '^OPEN' /tmp/outside)" = "$(wc -l </tmp/gres-files)" ] || fail "root outside a job cannot open every file"

srun --gres=gpu:$type:1 sh /tmp/probe | tee /tmp/job
grep '^OPEN' /tmp/job | cut -d' ' -f2 | sort >/tmp/opened
# Exactly one instance's files: one gres.conf line's.
found=
while read -r line; do
  files=${line#*MultipleFiles=}
  if [ "$(echo "${files%% *}" | tr ',' '\n' | sort | paste -sd,)" = "$(paste -sd, /tmp/opened)" ]; then
    found=$line
  fi
done </etc/slurm/gres.conf
[ -n "$found" ] || fail "the job opened $(paste -sd' ' /tmp/opened), not one instance's files"
echo "the job got: $found"
[ "$(grep -c '^DENIED.*Operation not permitted$' /tmp/job)" = "$(($(wc -l </tmp/gres-files) - 3))" ] ||
  fail "not every other file was denied with EPERM"
# The TaskProlog gave the job that instance's MIG UUID, not an index.
grep -qx "CUDA_VISIBLE_DEVICES=$(expected_uuid "$found") SLURM_STEP_GPUS=.*" /tmp/job ||
  fail "the job's CUDA_VISIBLE_DEVICES is not $(expected_uuid "$found"): $(grep CUDA_VISIBLE /tmp/job)"

# A job user's job of two instances: two UUIDs, those of the two instances
# whose cap nodes it can open (/dev/nvidiaN needs the GPU's group, which
# nobody lacks), in gres.conf's order; the TaskProlog runs as the user and
# reads the names file sync wrote.
runuser -u nobody -- srun --chdir=/tmp --gres=gpu:$type:2 sh /tmp/probe | tee /tmp/job2
grep '^OPEN /dev/nvidia-caps/' /tmp/job2 | cut -d' ' -f2 | sort >/tmp/opened2
[ "$(wc -l </tmp/opened2)" = 4 ] || fail "the two-instance job opened the cap nodes $(paste -sd' ' /tmp/opened2)"
want=
while read -r line; do
  case "$line" in
  *MultipleFiles=*) files=${line#*MultipleFiles=} ;;
  *) continue ;;
  esac
  if [ -z "$(echo "${files%% *}" | tr ',' '\n' | grep nvidia-caps | grep -vxFf /tmp/opened2)" ]; then
    want=$want${want:+,}$(expected_uuid "$line")
  fi
done </etc/slurm/gres.conf
grep -qx "CUDA_VISIBLE_DEVICES=$want SLURM_STEP_GPUS=.*" /tmp/job2 ||
  fail "the two-instance job's CUDA_VISIBLE_DEVICES is not $want: $(grep CUDA_VISIBLE /tmp/job2)"

# Slurm's index past the first GPU: while a job holds five instances (the
# partition lets two jobs share the one CPU), the next job gets the sixth,
# device 5, gpu1/gi3/ci0, and its UUID.
srun --gres=gpu:$type:5 sleep 120 &
holder=$!
wait_for 'squeue -h -t R | grep -q .' 600 || fail "the five-instance job did not start"
srun --gres=gpu:$type:1 sh /tmp/probe | tee /tmp/job3
last=$(grep MultipleFiles= /etc/slurm/gres.conf | tail -n 1)
grep -qx "CUDA_VISIBLE_DEVICES=$(expected_uuid "$last") SLURM_STEP_GPUS=5" /tmp/job3 ||
  fail "the sixth instance's job has $(grep CUDA_VISIBLE /tmp/job3), not $(expected_uuid "$last") and device 5"
scancel --quiet "$(squeue -h -o %i | head -n 1)"
wait "$holder" || true

# No names (no names file, no nvidia-smi): env cannot name the instance, so
# the task does not start, and the job's output says why.
mv /run/gpu-mig/names /tmp/names.saved
chmod 0 /usr/local/sbin/nvidia-smi
if srun --gres=gpu:$type:1 sh /tmp/probe >/tmp/job4 2>&1; then
  cat /tmp/job4
  fail "a job ran although gpu-mig env could not name its instance"
fi
cat /tmp/job4
grep -q '^gpu-mig env: .*has no known MIG UUID' /tmp/job4 || fail "the job's output does not say why gpu-mig env failed"
! grep -q '^OPEN' /tmp/job4 || fail "the task ran"
chmod 0755 /usr/local/sbin/nvidia-smi
mv /tmp/names.saved /run/gpu-mig/names

srun sh /tmp/probe | tee /tmp/nogpu
[ "$(grep -c '^DENIED.*Operation not permitted$' /tmp/nogpu)" = "$(wc -l </tmp/gres-files)" ] ||
  fail "a job given no GPU opened a file gres.conf names"

systemctl stop slurmd.service slurmctld.service
systemctl --failed --no-legend --plain | tee /tmp/failed
[ ! -s /tmp/failed ] || fail "failed units: $(cat /tmp/failed)"
