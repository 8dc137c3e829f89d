#!/usr/bin/env bash
# gpu-mig apply's cost, against gpu-mig sync's in the same run: what
# gpu-mig.service adds to a boot beyond the sync it ends with. On a fixture
# root (gpuinit-make-fixture --mig-caps) with the stand-in nvidia-smi and
# driver (tests/fixture/standin_nvidia_smi.c), so nvidia-smi's own time is
# the stand-in's (a real one takes far longer per run; the figures are
# gpuinit's share). As root (sync makes cap nodes).
#   bench/mig-apply.sh [BUILD_DIR] [GPUS] [RUNS]   (default build, 8, 15)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
gpus=${2:-8}
runs=${3:-15}
bin=$build/tools/gpuinit
smi=$build/tests/fixture/standin-smi/nvidia-smi
[[ -x $bin && -x $smi && -x $build/tests/fixture/gpuinit-make-fixture ]] ||
  { echo "mig-apply.sh: build $build first (gpuinit, standin_nvidia_smi, gpuinit-make-fixture)" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "mig-apply.sh: run as root (sync makes cap nodes)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
"$build/tests/fixture/gpuinit-make-fixture" --gpus "$gpus" --mig-caps "$root"
mkdir -p "$root/etc" "$work/state"
echo 'gpu=* mig=on gi=1g.10gb*7' >"$root/etc/gpu-mig-layout.conf"
export GPUINIT_STANDIN_GPUS=$gpus GPUINIT_STANDIN_MIG=$work/state
export GPUINIT_STANDIN_CAPS=$root/proc/driver/nvidia/capabilities GPUINIT_STANDIN_CAPS_MODIFY=0
mig() { "$bin" mig "$@" --root "$root" -q; }
ms() { local start end; start=$(date +%s%N); "$@" >/dev/null; end=$(date +%s%N); echo $(((end - start) / 1000000)); }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

first=$(ms mig apply --reset-if-needed --nvidia-smi "$smi")
instances=$(find "$root/proc/driver/nvidia/capabilities" -path '*/ci*/access' | wc -l)
: >"$work/apply"; : >"$work/check"; : >"$work/sync"
for ((i = 0; i < runs; i++)); do
  ms mig apply --nvidia-smi "$smi" >>"$work/apply"
  ms mig apply --check --nvidia-smi "$smi" >>"$work/check"
  ms mig sync >>"$work/sync"
done
apply=$(median <"$work/apply"); check=$(median <"$work/check"); sync=$(median <"$work/sync")
echo "GPUs $gpus, instances made $instances, runs $runs (medians, ms)"
echo "apply from MIG off (one run): $first"
echo "apply, as declared:           $apply"
echo "apply --check:                $check"
echo "sync alone (baseline):        $sync"
awk -v a="$apply" -v c="$check" -v s="$sync" -v f="$first" 'BEGIN {
  if (s == 0) s = 1
  printf "ratios to sync: apply as declared %.2fx, --check %.2fx, first apply %.2fx\n", a / s, c / s, f / s }'
