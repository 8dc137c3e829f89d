# A real Slurm against the stand-in driver's MIG instances: Debian 12's own
# slurmctld and slurmd 22.05 on this one node (munge, systemd's units, dbus,
# cgroup v2), two GPUs of three instances each, whose cap nodes gpu-mknod
# made. slurmd accepts a gres.conf that gives every instance MultipleFiles=
# of its GPU's node and its GI and CI cap nodes; its DebugFlags=Gres log shows each file's major:minor, and
# scontrol reports the six instances. A job given one instance with
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

# gres_conf: a gres.conf line per MIG instance (GI and CI), MultipleFiles=
# of its GPU's node and both cap nodes, and a File= line per GPU without
# instances. Types as Slurm 22.05's NVML autodetect names them: the model
# lowercased, spaces to _, cut at its first -, plus the profile for MIG; the
# whole name for a GPU. /proc has no profile names: the stand-in's instances
# are taken as 1g.10gb.
# Replace with `gpu-mig gres` (its gres.conf lines and the Gres= fragment)
# once it lands; the stand-in has no nvidia-smi or NVML, so give it the
# instances' profile (nvidia-smi output written here, or a type map).
gres_conf() {
  for information in /proc/driver/nvidia/gpus/*/information; do
    minor=$(awk -F: '$1 == "Device Minor" { gsub(/[ \t]/, "", $2); print $2 }' "$information")
    type=$(sed -n 's/^Model:[[:space:]]*//p' "$information" | tr 'A-Z ' 'a-z_')
    instances=$(find "$caps/gpu$minor/mig" -path '*/gi*/ci*/access' 2>/dev/null | sort)
    if [ -z "$instances" ]; then
      echo "Name=gpu Type=$type File=/dev/nvidia$minor"
      continue
    fi
    for ci in $instances; do
      gi=${ci%/ci*}/access
      echo "Name=gpu Type=${type%%-*}_1g.10gb MultipleFiles=/dev/nvidia$minor,/dev/nvidia-caps/nvidia-cap$(access_minor "$gi"),/dev/nvidia-caps/nvidia-cap$(access_minor "$ci")"
    done
  done
}
gres_conf >/etc/slurm/gres.conf
cat /etc/slurm/gres.conf
[ "$(grep -c MultipleFiles= /etc/slurm/gres.conf)" = 6 ] || fail "gres.conf does not list 6 instances"
type=nvidia_a100_80gb_pcie_1g.10gb
gres=$(sed -n 's/.*Type=\([^ ]*\).*/\1/p' /etc/slurm/gres.conf | sort | uniq -c |
  awk '{ printf "%sgpu:%s:%s", sep, $2, $1; sep = "," }')
[ "$gres" = "gpu:$type:6" ] || fail "the node's Gres is $gres, not gpu:$type:6"
# Every file gres.conf names, one a line.
sed -n 's/.*Files*=//p' /etc/slurm/gres.conf | tr ',' '\n' | sort -u >/tmp/gres-files

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
NodeName=$node NodeAddr=127.0.0.1 CPUs=1 Gres=$gres State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
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
  if [ "$(echo "${line#*MultipleFiles=}" | tr ',' '\n' | sort | paste -sd,)" = "$(paste -sd, /tmp/opened)" ]; then
    found=$line
  fi
done </etc/slurm/gres.conf
[ -n "$found" ] || fail "the job opened $(paste -sd' ' /tmp/opened), not one instance's files"
echo "the job got: $found"
[ "$(grep -c '^DENIED.*Operation not permitted$' /tmp/job)" = "$(($(wc -l </tmp/gres-files) - 3))" ] ||
  fail "not every other file was denied with EPERM"

srun sh /tmp/probe | tee /tmp/nogpu
[ "$(grep -c '^DENIED.*Operation not permitted$' /tmp/nogpu)" = "$(wc -l </tmp/gres-files)" ] ||
  fail "a job given no GPU opened a file gres.conf names"

systemctl stop slurmd.service slurmctld.service
systemctl --failed --no-legend --plain | tee /tmp/failed
[ ! -s /tmp/failed ] || fail "failed units: $(cat /tmp/failed)"
