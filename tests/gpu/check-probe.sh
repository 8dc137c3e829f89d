#!/usr/bin/env bash
# gpu.probe-on-standin: gpu_probe over the stand-in driver, alone and under
# libgpulimit.so with a 2 GiB memory cap, and the acceptance scripts parse
# and refuse a machine without NVIDIA's driver.
# Usage: check-probe.sh GPU_PROBE LIBGPULIMIT STANDIN_DIR SOURCE_DIR
set -u
probe=$1 library=$2 standin=$3 source=$4
status=0
fail() { echo "FAIL: $*"; status=1; }
export LD_LIBRARY_PATH=$standin
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT

out=$("$probe" info 2>&1) || fail "info: $out"
echo "$out"
grep -q 'total=17179869184 ' <<<"$out" || fail "info without the library: the stand-in's 16 GiB: $out"

capped=(env LD_PRELOAD="$library" AMP_VGPU_ENABLE=1 GPU_MEM_PER_DEVICE=2147483648
  GPU_LIMIT_STATE_DIR="$state" GPU_LIMIT_GROUP=probe-check)
out=$("${capped[@]}" "$probe" info 2>&1) || fail "capped info: $out"
echo "$out"
total=$(sed -n 's/.* total=\([0-9]*\).*/\1/p' <<<"$out")
((total > 0 && total <= 2147483648 && total >= 2147483648 - (64 << 20))) ||
  fail "capped info: total $total is not the 2 GiB cap: $out"
out=$("${capped[@]}" "$probe" mem 1536 1024 2>&1) || fail "capped mem: $out"
echo "$out"
grep -q 'mib=1536 result=ok' <<<"$out" || fail "1536 MiB under a 2 GiB cap: $out"
grep -q 'mib=1024 result=oom' <<<"$out" || fail "1024 MiB more past the cap: $out"

out=$(GPULIMIT_STANDIN_KERNEL_NS=2000000 "$probe" spin 0.5 2000 4 2>&1) || fail "spin: $out"
echo "$out"
share=$(sed -n 's/.* share=\([0-9.]*\).*/\1/p' <<<"$out")
python3 -c "import sys; sys.exit(0 if 0.5 < $share <= 1.05 else 1)" || fail "spin share $share: $out"
out=$("$probe" launch 2000 3 2>&1) || fail "launch: $out"
echo "$out"
grep -q 'median_ns=' <<<"$out" || fail "launch: $out"
"$probe" bogus >/dev/null 2>&1 && fail "an unknown command is accepted"

bash -n "$source/acceptance" || fail "acceptance does not parse"
bash -n "$source/stage" || fail "stage does not parse"
python3 -c "import ast,sys; ast.parse(open(sys.argv[1]).read())" "$source/gpu_checks.py" ||
  fail "gpu_checks.py does not parse"
# No NVIDIA driver here: the run refuses with status 2 and says why, rather
# than reporting rows.
if command -v nvidia-smi >/dev/null; then
  echo "nvidia-smi exists here: the refusal is not checked"
else
  stage=$(mktemp -d)
  touch "$stage/gpuinit" "$stage/gpu_probe" "$stage/libgpulimit.so"
  out=$(PATH=/usr/bin:/bin "$source/acceptance" --stage "$stage" --results "$stage/r.tsv" 2>&1)
  code=$?
  rm -rf "$stage"
  [[ $code == 2 && $out == *"no nvidia-smi"* ]] || [[ $(id -u) != 0 && $code == 2 ]] ||
    fail "acceptance without a driver: status $code: $out"
fi
exit $status
