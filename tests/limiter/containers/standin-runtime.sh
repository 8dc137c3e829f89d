#!/usr/bin/env bash
# The NVIDIA container runtime stand-in (standin-nvidia-container-runtime)
# with a real runc and a busybox-static rootfs, and its CDI spec with podman:
#   standin-runtime.sh [STANDIN]
# A fixture host root with two GPUs (the stand-in devices' default list:
# CUDA order differs from PCI order, so NVML index 1 = minor 1 = the GPU at
# 0000:3b:00.0 = GPU-11111111-...), then per mode:
#   legacy   NVIDIA_VISIBLE_DEVICES=1: the prestart hook in config.json; in the
#            container /dev/nvidia1 (c 195:1) and /dev/nvidiactl, no
#            /dev/nvidia0, the device cgroup lets open() through (ENXIO, not
#            EPERM), the variable unchanged; =void: no nodes at all.
#   jit-cdi  =1 and =GPU-11111111-...: the same nodes from linux.devices and
#            allow rules, NVIDIA_VISIBLE_DEVICES=void in the container (appended
#            in config.json after the user's entry); =void: nothing.
#   cdi      =nvidia.com/gpu=1 with the generated spec in the config's spec dir.
#   auto     =1 resolves to jit-cdi.
# `nvidia-ctk cdi generate`: devices 0, 1, both UUIDs and all, hostPath only
# when the dev root is not /. podman (when it can run a container here):
# --device nvidia.com/gpu=1 with the spec in /var/run/cdi, in a mount
# namespace of its own with a tmpfs there, so the host's specs are neither
# read nor touched.
# Exit 77 (skipped) when not root, without runc, python3 or busybox-static.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/limiter/containers/common.sh
. "$here/common.sh"
standin=${1:-$here/standin-nvidia-container-runtime}

test_name='standin-runtime'
expect_no_line() { # OUTPUT PATTERN WHAT
  ! grep -Eq -- "$2" <<<"$1" || fail "$3: a line matches '$2' in:"$'\n'"$1"
}

need_root_and_busybox "mknod, runc, mount namespaces"
runc=$(command -v runc || true)
[[ -n $runc ]] || skip "runc is not installed (scripts/install-test-deps)"
command -v python3 >/dev/null || skip "python3 is not installed"
[[ -x $standin ]] || fail "$standin is not executable"

work=$(mktemp -d /tmp/standin-runtime.XXXXXX)
chmod 755 "$work"
ids=()
created_run_cdi=
cleanup() {
  for id in "${ids[@]}"; do
    "$runc" --root "$work/runtime-root" delete -f "$id" >/dev/null 2>&1 || true
  done
  [[ -z $created_run_cdi ]] || rmdir /run/cdi 2>/dev/null || true
  unmount_below "$work"
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

# The host: the driver's procfs and /dev nodes for the default stand-in GPUs.
host=$work/host
env -u GPULIMIT_STANDIN_DEVICES "$standin" fixture "$host" >"$work/fixture.out" ||
  fail "fixture: $(cat "$work/fixture.out")"
expect_line "$(cat "$work/fixture.out")" \
  "^GPU 1: GPU-11111111-2222-3333-4444-555555555555 at 0000:3b:00.0 \(CUDA ordinal 0\) /dev/nvidia1$" \
  "fixture: PCI order gives the CUDA ordinal 0 device index and minor 1"
[[ $(stat -c '%F %t:%T' "$host/dev/nvidia1") == "character special file c3:1" ]] ||
  fail "fixture: $host/dev/nvidia1 is not c 195:1"
export GPULIMIT_STANDIN_HOST_ROOT=$host
unset NVIDIA_VISIBLE_DEVICES XDG_CONFIG_HOME GPULIMIT_STANDIN_DEVICES

bin=$work/bin
mkdir -p "$bin"
for name in nvidia-container-runtime nvidia-container-runtime-hook nvidia-ctk; do
  ln -s "$standin" "$bin/$name"
done

rootfs=$work/rootfs
mkdir -p "$rootfs"/{bin,dev,proc,sys,tmp,etc}
cp /bin/busybox "$rootfs/bin/busybox"
for applet in sh cat ls env grep stat head echo true; do ln -s busybox "$rootfs/bin/$applet"; done
probe='for n in 0 1 ctl; do
  if [ -e /dev/nvidia$n ]; then stat -c "node /dev/nvidia$n %F %t:%T" /dev/nvidia$n
  else echo "node /dev/nvidia$n absent"; fi
done
[ -e /dev/nvidia1 ] && cat /dev/nvidia1 2>&1 | head -1
env | grep "^NVIDIA_VISIBLE_DEVICES="
echo done'

# 1. nvidia-ctk cdi generate.
spec_dir=$work/cdi
"$bin/nvidia-ctk" cdi generate --output "$spec_dir/nvidia.json" 2>"$work/generate.err" ||
  fail "nvidia-ctk cdi generate: $(cat "$work/generate.err")"
python3 - "$spec_dir/nvidia.json" "$host" <<'PY' || fail "the generated spec (above)"
import json, sys
path, host = sys.argv[1:]
spec = json.load(open(path))
def node(path, minor):
    n = {"path": path, "hostPath": host + path, "major": 195, "fileMode": 0o666,
         "permissions": "rwm"}
    if minor:
        n["minor"] = minor
    return n
want = {
    "cdiVersion": "0.5.0",
    "kind": "nvidia.com/gpu",
    "devices": [
        {"name": "0", "containerEdits": {"deviceNodes": [node("/dev/nvidia0", 0)]}},
        {"name": "1", "containerEdits": {"deviceNodes": [node("/dev/nvidia1", 1)]}},
        {"name": "GPU-11111111-2222-3333-4444-555555555555",
         "containerEdits": {"deviceNodes": [node("/dev/nvidia1", 1)]}},
        {"name": "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa",
         "containerEdits": {"deviceNodes": [node("/dev/nvidia0", 0)]}},
        {"name": "all", "containerEdits": {"deviceNodes": [node("/dev/nvidia0", 0),
                                                           node("/dev/nvidia1", 1)]}},
    ],
    "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"],
                       "deviceNodes": [node("/dev/nvidiactl", 255)]},
}
if spec != want:
    print(json.dumps(spec, indent=1), file=sys.stderr)
    sys.exit(1)
PY
# With the dev root /: the nodes are where the container gets them, no hostPath.
# (Our nodes bound over /dev in a mount namespace of its own.)
unshare --mount --propagation private -- sh -c \
  'mount --bind "$1/dev" /dev && exec "$2" cdi generate --dev-root / --format json' \
  sh "$host" "$bin/nvidia-ctk" >"$work/root.json" 2>"$work/root.err" ||
  fail "nvidia-ctk cdi generate --dev-root /: $(cat "$work/root.err")"
grep -q hostPath "$work/root.json" && fail "hostPath with the dev root /: $(cat "$work/root.json")"
grep -q '"path":"/dev/nvidia1","major":195,"minor":1' "$work/root.json" ||
  fail "no /dev/nvidia1 node with the dev root /: $(cat "$work/root.json")"

# 2. The runtime with runc, per mode.
for mode in legacy jit-cdi cdi auto; do
  cat >"$work/config-$mode.toml" <<TOML
[nvidia-container-runtime]
mode = "$mode"
runtimes = ["$runc"]

[nvidia-container-runtime.modes.cdi]
spec-dirs = ["$spec_dir"]

[nvidia-container-runtime-hook]
path = "$bin/nvidia-container-runtime-hook"
TOML
done

# run_case NAME MODE VISIBLE_DEVICES: a container through the stand-in
# (create with containerd's global options, start, delete); its output in
# $work/NAME.out, the bundle's config.json after create in $work/NAME.json.
run_case() {
  local name=$1 mode=$2 visible=$3 id=standin-$1-$$
  mkdir -p "$work/b-$name"
  (cd "$work/b-$name" && "$runc" spec)
  python3 - "$work/b-$name/config.json" "$rootfs" "$visible" "$probe" <<'PY'
import json, sys
path, rootfs, visible, probe = sys.argv[1:]
spec = json.load(open(path))
spec["root"] = {"path": rootfs, "readonly": False}
spec["process"]["terminal"] = False
spec["process"]["args"] = ["/bin/sh", "-c", probe]
spec["process"]["env"] = ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=" + visible]
spec["process"].pop("rlimits", None)
json.dump(spec, open(path, "w"), indent=2)
PY
  ids+=("$id")
  local global=(--root "$work/runtime-root" --log "$work/$name.log" --log-format json)
  NVIDIA_CTK_CONFIG_FILE_PATH=$work/config-$mode.toml "$bin/nvidia-container-runtime" \
    "${global[@]}" create --bundle "$work/b-$name" "$id" >"$work/$name.out" 2>"$work/$name.err" ||
    fail "$name: create: $(cat "$work/$name.err" "$work/$name.log")"
  cp "$work/b-$name/config.json" "$work/$name.json"
  NVIDIA_CTK_CONFIG_FILE_PATH=$work/config-$mode.toml "$bin/nvidia-container-runtime" \
    "${global[@]}" start "$id" || fail "$name: start"
  for _ in $(seq 100); do
    "$runc" --root "$work/runtime-root" state "$id" 2>/dev/null |
      grep -q '"status": *"stopped"' && break
    sleep 0.1
  done
  NVIDIA_CTK_CONFIG_FILE_PATH=$work/config-$mode.toml "$bin/nvidia-container-runtime" \
    "${global[@]}" delete "$id" || fail "$name: delete"
  out=$(cat "$work/$name.out")
  expect_line "$out" "^done$" "$name: the container ran to the end"
}
# gpu1_only NAME: /dev/nvidia1 and /dev/nvidiactl as char devices, no
# /dev/nvidia0, and the device cgroup lets an open through to the (absent)
# driver: ENXIO, not EPERM.
gpu1_only() {
  expect_line "$out" "^node /dev/nvidia1 character special file c3:1$" "$1: /dev/nvidia1 is c 195:1"
  expect_line "$out" "^node /dev/nvidia0 absent$" "$1: no /dev/nvidia0"
  expect_line "$out" "^node /dev/nvidiactl character special file c3:ff$" \
    "$1: /dev/nvidiactl is c 195:255"
  expect_line "$out" "^cat: can't open '/dev/nvidia1': No such device or address$" \
    "$1: the device cgroup allows /dev/nvidia1"
}
no_nodes() {
  expect_line "$out" "^node /dev/nvidia0 absent$" "$1: no /dev/nvidia0"
  expect_line "$out" "^node /dev/nvidia1 absent$" "$1: no /dev/nvidia1"
  expect_line "$out" "^node /dev/nvidiactl absent$" "$1: no /dev/nvidiactl"
}
only_void() {
  expect_line "$out" "^NVIDIA_VISIBLE_DEVICES=void$" "$1: NVIDIA_VISIBLE_DEVICES=void"
  [[ $(grep -c '^NVIDIA_VISIBLE_DEVICES=' <<<"$out") -eq 1 ]] ||
    fail "$1: more than one NVIDIA_VISIBLE_DEVICES in the container: $out"
}
json_has() { # NAME PYTHON-EXPRESSION-ON-spec WHAT
  python3 -c 'import json, sys
spec = json.load(open(sys.argv[1]))
sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' "$work/$1.json" "$2" ||
    fail "$1: config.json after create: $3: $(cat "$work/$1.json")"
}

run_case legacy legacy 1
gpu1_only legacy
expect_line "$out" "^NVIDIA_VISIBLE_DEVICES=1$" "legacy: NVIDIA_VISIBLE_DEVICES unchanged"
json_has legacy "spec['hooks']['prestart'] == [{'path': '$bin/nvidia-container-runtime-hook',
  'args': ['nvidia-container-runtime-hook', 'prestart']}]" "the prestart hook, args [basename, prestart]"
json_has legacy "not any('nvidia' in d['path'] for d in spec['linux'].get('devices') or [])" \
  "no device nodes in the spec in legacy mode"

run_case legacy-void legacy void
no_nodes legacy-void
json_has legacy-void "len(spec['hooks']['prestart']) == 1" "the hook is added without GPUs too"

run_case jit jit-cdi 1
gpu1_only jit
only_void jit
json_has jit "spec['process']['env'][-2:] ==
  ['NVIDIA_VISIBLE_DEVICES=1', 'NVIDIA_VISIBLE_DEVICES=void']" "void appended after the user's entry"
json_has jit "{'path': '/dev/nvidia1', 'type': 'c', 'major': 195, 'minor': 1, 'fileMode': 0o666}
  in spec['linux']['devices']" "linux.devices has /dev/nvidia1"
json_has jit "{'allow': True, 'type': 'c', 'major': 195, 'minor': 1, 'access': 'rwm'}
  in spec['linux']['resources']['devices']" "an allow rule for 195:1"
json_has jit "not any(d['path'] == '/dev/nvidia0' for d in spec['linux']['devices'])" \
  "no /dev/nvidia0 in linux.devices"
json_has jit "'hooks' not in spec or not spec['hooks'].get('prestart')" "no prestart hook"

run_case jit-uuid jit-cdi GPU-11111111-2222-3333-4444-555555555555
gpu1_only jit-uuid
only_void jit-uuid

run_case jit-void jit-cdi void
no_nodes jit-void
expect_line "$out" "^NVIDIA_VISIBLE_DEVICES=void$" "jit-void: the user's void"
json_has jit-void "not any('nvidia' in d['path'] for d in spec['linux'].get('devices') or [])" \
  "no device nodes without GPUs"

run_case cdi cdi nvidia.com/gpu=1
gpu1_only cdi
only_void cdi

run_case auto auto 1
gpu1_only auto
only_void auto
grep -q "Auto-detected mode as 'jit-cdi'" "$work/auto.log" ||
  fail "auto: not resolved to jit-cdi: $(cat "$work/auto.log")"

# 3. podman with the generated spec in /var/run/cdi (its CDI directories are
# /etc/cdi and /var/run/cdi; containers.conf's cdi_spec_dirs is not read by
# podman 4.3).
podman=$(command -v podman || true)
if [[ -z $podman ]]; then
  note "podman is not installed: its part is skipped"
else
  no_rlimits_hook "$work/hooks.d"
  ensure_run_cdi
  run_podman() { # NAME ARGS...
    local name=$1
    shift
    with_cdi_spec "$spec_dir/nvidia.json" "$podman" --runtime "$runc" --hooks-dir "$work/hooks.d" \
      run --rm --name "standin-$name-$$" "$@" >"$work/$name.out" 2>"$work/$name.err"
  }
  if ! run_podman podman-probe --rootfs "$rootfs" /bin/true; then
    note "podman cannot start a container here, its part is skipped:" \
      "$(cat "$work/podman-probe.err")"
  else
    run_podman podman --device nvidia.com/gpu=1 --rootfs "$rootfs" /bin/sh -c "$probe" ||
      fail "podman --device nvidia.com/gpu=1: $(cat "$work/podman.err")"
    out=$(cat "$work/podman.out")
    gpu1_only podman
    only_void podman
  fi
fi
echo "standin-runtime: ok"
