#!/usr/bin/env bash
# What gpu-limit-runtime adds to a container's life: create, start, wait,
# delete of a busybox container that runs /bin/true, through runc directly
# (the baseline), through gpu-limit-runtime without the switch (it reads the
# config and passes it on), and with AMP_VGPU_ENABLE=1 (it also reads the
# host's GPUs from a fixture /proc/driver/nvidia/gpus, rewrites config.json
# and makes the group's state directory; delete removes it). Rounds
# interleave the three, so that drift of a noisy machine hits each alike;
# the medians and their ratios to the baseline are printed.
#   bench/containers/runtime-overhead.sh GPU_LIMIT_RUNTIME LIBGPULIMIT [ROUNDS]
# Root only (runc).
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "runtime-overhead: run as root" >&2; exit 2; }
shim=$(realpath -s "$1") library=$(realpath -s "$2") rounds=${3:-30}
runc=$(command -v runc) || { echo "runtime-overhead: no runc" >&2; exit 2; }
work=$(mktemp -d /tmp/gpu-limit-bench.XXXXXX)
trap 'rm -rf --one-file-system "$work"' EXIT
mkdir -p "$work"/rootfs/{bin,proc,sys,dev,tmp} "$work/host/proc/driver/nvidia/gpus/0000:3b:00.0"
cp /bin/busybox "$work/rootfs/bin/busybox"
ln -s busybox "$work/rootfs/bin/true"
printf 'GPU UUID: \t GPU-11111111-2222-3333-4444-555555555555\nBus Location: \t 0000:3b:00.0\nDevice Minor: \t 0\n' \
  >"$work/host/proc/driver/nvidia/gpus/0000:3b:00.0/information"
for kind in off on; do
  mkdir -p "$work/$kind"
  (cd "$work/$kind" && "$runc" spec)
  python3 - "$work/$kind/config.json" "$work/rootfs" "$kind" <<'PY'
import json, sys
path, rootfs, kind = sys.argv[1:]
spec = json.load(open(path))
spec["root"] = {"path": rootfs, "readonly": True}
spec["process"].update(terminal=False, args=["/bin/true"])
spec["process"]["env"] = ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"] + (["AMP_VGPU_ENABLE=1"] if kind == "on" else [])
spec["process"].pop("rlimits", None)
json.dump(spec, open(path, "w"))
PY
  cp "$work/$kind/config.json" "$work/$kind.json"
done
global=(--root "$work/runc-root")
one() { # NAME BUNDLE RUNTIME...
  local id=$1 bundle=$2
  shift 2
  local start end
  cp "$work/$(basename "$bundle").json" "$bundle/config.json"
  start=$(date +%s%N)
  "$@" "${global[@]}" create --bundle "$bundle" "$id" >/dev/null
  "$@" "${global[@]}" start "$id"
  while [[ $("$runc" "${global[@]}" state "$id" 2>/dev/null | grep -o '"status": *"[a-z]*"') != *stopped* ]]; do :; done
  "$@" "${global[@]}" delete "$id"
  end=$(date +%s%N)
  echo $(((end - start) / 1000))
}
shim_cmd=("$shim" --runtime-path "$runc" --library "$library" --state-root "$work/state" --host-root "$work/host")
: >"$work/runc.us"; : >"$work/off.us"; : >"$work/on.us"
for i in $(seq "$rounds"); do
  one "b-runc-$i" "$work/off" "$runc" >>"$work/runc.us"
  one "b-off-$i" "$work/off" "${shim_cmd[@]}" >>"$work/off.us"
  one "b-on-$i" "$work/on" "${shim_cmd[@]}" >>"$work/on.us"
done
[[ -z $(ls -A "$work/state" | grep -v ld.so.preload) ]] || { echo "runtime-overhead: groups left behind" >&2; exit 1; }
median() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
base=$(median "$work/runc.us")
printf '%-34s %10s %8s\n' "path ($rounds rounds, median)" "us" "ratio"
for kind in runc off on; do
  value=$(median "$work/$kind.us")
  label=$kind
  [[ $kind == runc ]] && label="runc directly (baseline)"
  [[ $kind == off ]] && label="gpu-limit-runtime, no switch"
  [[ $kind == on ]] && label="gpu-limit-runtime, AMP_VGPU_ENABLE=1"
  printf '%-34s %10s %8s\n' "$label" "$value" "$(awk -v v="$value" -v b="$base" 'BEGIN {printf "%.2fx", v / b}')"
done
