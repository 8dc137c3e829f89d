#!/usr/bin/env bash
# gpu-limit in real containers: a busybox-static rootfs bundle run by a real
# OCI runtime, through `gpu-limit runtime` (runc, crun) or podman with
# `gpu-limit oci-hook` in a hooks directory of the test's own.
#   containers.sh RUNTIME GPU_LIMIT LIBGPULIMIT STANDIN_DIR CUDART_PROBE
# RUNTIME: runc, crun or podman. Without AMP_VGPU_ENABLE=1 config.json is
# byte for byte what it was; with it the container has /etc/ld.so.preload
# naming the library, the library read-only, its group's state directory
# writable and the variables set, and a CUDA program in it runs through the
# interposer over the stand-in driver with the memory cap enforced. The
# group's directory is gone after delete.
#
# Exit 77 (ctest: skipped) when this host cannot run the test at all: not
# root, no busybox-static, or a runtime that cannot start even a trivial
# container here (said on stderr, with the runtime's own error).
set -euo pipefail
runtime=$1 tool=$2 library=$3 standin=$4 probe=$5

fail() { echo "containers[$runtime]: FAIL: $*" >&2; exit 1; }
skip() { echo "containers[$runtime]: SKIPPED: $*" >&2; exit 77; }
expect_line() { # OUTPUT PATTERN WHAT
  grep -Eq -- "$2" <<<"$1" || fail "$3: no line matching '$2' in:"$'\n'"$1"
}

[[ $(id -u) -eq 0 ]] || skip "needs root (OCI runtimes create namespaces and mounts)"
busybox=/bin/busybox
file -L "$busybox" 2>/dev/null | grep -q 'statically linked' ||
  skip "$busybox is not busybox-static (apt-get install busybox-static)"
case $runtime in
  runc) runtime_path=$(command -v runc || true) ;;
  crun) runtime_path=$(command -v crun || true) ;;
  podman) runtime_path=$(command -v podman || true) ;;
  *) fail "unknown runtime $runtime" ;;
esac
[[ -n $runtime_path ]] || skip "$runtime is not installed (scripts/install-build-deps)"

work=$(mktemp -d /tmp/gpu-limit-containers.XXXXXX)
chmod 755 "$work"
state=$work/state # the state root: the same path inside the containers
ids=()
cleanup() {
  for id in "${ids[@]}"; do
    if [[ $runtime == podman ]]; then
      podman rm -f "$id" >/dev/null 2>&1 || true
    else
      "$runtime_path" delete -f "$id" >/dev/null 2>&1 || true
    fi
  done
  rm -rf "$work"
}
trap cleanup EXIT

# A rootfs: busybox-static, and for the CUDA program its libraries and the
# stand-in driver (in /standin), copied to the same paths.
rootfs=$work/rootfs
mkdir -p "$rootfs"/{bin,standin,tmp,proc,sys,dev,etc}
cp "$busybox" "$rootfs/bin/busybox"
for applet in sh cat ls touch env grep md5sum echo true; do
  ln -s busybox "$rootfs/bin/$applet"
done
cp "$probe" "$rootfs/bin/cudart_probe"
cp "$standin"/libcuda.so.1 "$standin"/libnvidia-ml.so.1 "$rootfs/standin/"
for object in "$probe" "$library" "$standin"/libcuda.so.1 "$standin"/libnvidia-ml.so.1; do
  ldd "$object" | grep -oE '/[^ ]+' | while read -r lib; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done
done

# bundle NAME ENV... -- ARGS...: a bundle whose config.json runs ARGS.
bundle() {
  local name=$1
  shift
  local env=() args=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  args=("$@")
  mkdir -p "$work/$name"
  (cd "$work/$name" && "$runtime_path" spec >/dev/null 2>&1) || true
  [[ $runtime == podman ]] && (cd "$work/$name" && runc spec)
  python3 - "$work/$name/config.json" "$rootfs" "${#env[@]}" "${env[@]}" "${args[@]}" <<'PY'
import json, sys
path, rootfs, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
env, args = sys.argv[4:4 + count], sys.argv[4 + count:]
spec = json.load(open(path))
spec["root"] = {"path": rootfs, "readonly": False}
spec["process"]["terminal"] = False
spec["process"]["args"] = args
spec["process"]["env"] = ["PATH=/bin"] + env
spec["process"].pop("rlimits", None)
# Weird but valid whitespace: the unchanged case must keep it byte for byte.
text = json.dumps(spec, indent="\t", separators=(" ,", " : ")) + "\r\n\n"
open(path, "w").write(text)
PY
}

# run_shim NAME ID: create, start, wait, delete through gpu-limit runtime.
run_shim() {
  local name=$1 id=$2
  ids+=("$id")
  "$tool" runtime --runtime-path "$runtime_path" --library "$library" --state-root "$state" \
    create --bundle "$work/$name" "$id" >"$work/$name.out" 2>"$work/$name.err" ||
    return 1
  "$tool" runtime --runtime-path "$runtime_path" start "$id" 2>>"$work/$name.err" || return 1
  for _ in $(seq 100); do
    "$runtime_path" state "$id" 2>/dev/null | grep -q '"status": *"stopped"' && break
    sleep 0.1
  done
  "$tool" runtime --runtime-path "$runtime_path" --state-root "$state" delete "$id" \
    2>>"$work/$name.err" || return 1
}

# run_podman NAME ID ENV... -- ARGS...: podman with our hooks (and one that
# drops rlimits, which some sandboxes refuse to set even to their own values).
hooks=$work/hooks.d
mkdir -p "$hooks"
cat >"$work/no-rlimits.sh" <<'SH'
#!/bin/sh
exec python3 -c 'import json,sys; d=json.load(sys.stdin); d["process"].pop("rlimits",None); print(json.dumps(d))'
SH
chmod 755 "$work/no-rlimits.sh"
cat >"$hooks/00-no-rlimits.json" <<JSON
{"version":"1.0.0","hook":{"path":"$work/no-rlimits.sh"},"when":{"always":true},"stages":["precreate"]}
JSON
cat >"$hooks/10-gpu-limit.json" <<JSON
{"version":"1.0.0","hook":{"path":"$tool","args":["gpu-limit","oci-hook","--library","$library","--state-root","$state","precreate"]},"when":{"always":true},"stages":["precreate"]}
JSON
cat >"$hooks/10-gpu-limit-poststop.json" <<JSON
{"version":"1.0.0","hook":{"path":"$tool","args":["gpu-limit","oci-hook","--state-root","$state","poststop"]},"when":{"always":true},"stages":["poststop"]}
JSON
run_podman() {
  local name=$1
  shift
  local env=()
  while [[ $1 != -- ]]; do env+=(-e "$1"); shift; done
  shift
  podman --runtime runc --hooks-dir "$hooks" run --rm --name "gl-$name-$$" "${env[@]}" \
    --rootfs "$rootfs" "$@" >"$work/$name.out" 2>"$work/$name.err"
}

# The probe: can this runtime start any container here?
if [[ $runtime == podman ]]; then
  run_podman probe -- /bin/true || skip "podman cannot start a container here: $(cat "$work/probe.err")"
else
  bundle probe -- /bin/true
  if ! run_shim probe "gl-probe-$$"; then
    skip "$runtime cannot start a container here: $(cat "$work/probe.err")"
  fi
fi

# 1. Without the switch: config.json as it was, byte for byte, and nothing on the host.
if [[ $runtime != podman ]]; then
  bundle off AMP_VGPU_ENABLE=0 -- /bin/sh -c 'cat /etc/ld.so.preload 2>&1; echo done'
  cp "$work/off/config.json" "$work/off.before"
  run_shim off "gl-off-$$" || fail "a container without the switch: $(cat "$work/off.err")"
  cmp "$work/off.before" "$work/off/config.json" || fail "config.json changed without the switch"
  out=$(cat "$work/off.out")
  expect_line "$out" "^done$" "the container without the switch ran"
  [[ ! -e $state/gl-off-$$ ]] || fail "a state directory for a container without the switch"
fi

# 2. With it.
script='cat /etc/ld.so.preload
md5sum /usr/lib/gpuinit/libgpulimit.so
touch /usr/lib/gpuinit/libgpulimit.so 2>/dev/null && echo library-writable
echo x >/etc/ld.so.preload 2>/dev/null && echo preload-writable
env | grep "^GPU_LIMIT_"
touch "$GPU_LIMIT_STATE_DIR/$GPU_LIMIT_GROUP/from-inside" && echo state-writable
ls -ld "$GPU_LIMIT_STATE_DIR/$GPU_LIMIT_GROUP"
LD_LIBRARY_PATH=/standin /bin/cudart_probe meminfo malloc 2147483648 malloc 536870912 meminfo
echo done'
on_env=(AMP_VGPU_ENABLE=1 GPU_MEM_PER_DEVICE=1073741824 GPU_LIMIT_GROUP=not-mine)
if [[ $runtime == podman ]]; then
  run_podman on "${on_env[@]}" -- /bin/sh -c "$script" ||
    fail "podman with the switch: $(cat "$work/on.err")"
  group=$(grep -oE '^GPU_LIMIT_GROUP=.*' "$work/on.out" | cut -d= -f2)
  [[ $group =~ ^[0-9a-f]{64}$ ]] || fail "the group is not podman's container id: '$group'"
else
  group=gl-on-$$
  bundle on "${on_env[@]}" -- /bin/sh -c "$script"
  ids+=("$group")
  "$tool" runtime --runtime-path "$runtime_path" --library "$library" --state-root "$state" \
    create --bundle "$work/on" "$group" >"$work/on.out" 2>"$work/on.err" ||
    fail "create with the switch: $(cat "$work/on.err")"
  [[ -d $state/$group ]] || fail "no state directory $state/$group after create"
  [[ $(stat -c %a "$state/$group") == 700 ]] || fail "the state directory is not 0700"
  "$runtime_path" start "$group"
  for _ in $(seq 100); do
    "$runtime_path" state "$group" 2>/dev/null | grep -q '"status": *"stopped"' && break
    sleep 0.1
  done
  [[ -e $state/$group/from-inside ]] || fail "the container's file is not in $state/$group"
fi
out=$(cat "$work/on.out")
expect_line "$out" "^/usr/lib/gpuinit/libgpulimit.so$" "/etc/ld.so.preload names the library"
expect_line "$out" "^$(md5sum <"$library" | cut -d' ' -f1)  /usr/lib/gpuinit/libgpulimit.so$" \
  "the library in the container is the host's"
! grep -q library-writable <<<"$out" || fail "the library is writable in the container"
! grep -q preload-writable <<<"$out" || fail "/etc/ld.so.preload is writable in the container"
expect_line "$out" "^GPU_LIMIT_STATE_DIR=$state$" "GPU_LIMIT_STATE_DIR"
expect_line "$out" "^GPU_LIMIT_GROUP=$group$" "GPU_LIMIT_GROUP is the container, not the user's"
expect_line "$out" "^state-writable$" "the group's state directory is writable"
cap=$((1024 * 1024 * 1024 - 10 * 1024 * 1024))
expect_line "$out" "^step=meminfo err=0 .*free=$cap total=$cap$" \
  "cudaMemGetInfo in the container shows the cap"
expect_line "$out" "^step=malloc err=2 .*bytes=2147483648" \
  "an allocation over the cap fails in the container"
expect_line "$out" "^step=malloc err=0 .*bytes=536870912" "an allocation under the cap succeeds"
expect_line "$out" "^done$" "the container ran to the end"

# 3. Cleanup: the group's directory goes with the container.
if [[ $runtime != podman ]]; then
  "$tool" runtime --runtime-path "$runtime_path" --state-root "$state" delete "$group" ||
    fail "delete"
fi
[[ ! -e $state/$group ]] || fail "$state/$group is still there after the container is gone"
[[ -f $state/ld.so.preload ]] || fail "the shared preload file went too"
echo "containers[$runtime]: ok"
