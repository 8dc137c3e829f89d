#!/usr/bin/env bash
# gpu-limit in real containers: a busybox-static rootfs run by a real OCI
# runtime, through `gpu-limit runtime` (runc, crun: a bundle; docker: a
# dockerd of the test's own with the shim registered in its daemon.json)
# or podman with `gpu-limit oci-hook` in a hooks directory of the test's own.
#   containers.sh RUNTIME GPU_LIMIT LIBGPULIMIT STANDIN_DIR CUDART_PROBE
# RUNTIME: runc, crun, podman or docker. Without AMP_VGPU_ENABLE=1
# config.json is byte for byte what it was; with it the container has
# /etc/ld.so.preload naming the library, the library read-only, its group's
# state directory writable and the variables set, and a CUDA program in it
# runs through the interposer over the stand-in driver with the memory cap
# enforced. The group's directory is gone after delete.
#
# runc and crun get global options before the command, as containerd gives
# them (--root, --log, --log-format; crun also --cgroup-manager): the shim
# must pass them through. crun 1.8 refuses hybrid cgroup hosts whose cgroup
# v2 hierarchy has controllers ("cgroups in hybrid mode not supported");
# there it runs in a mount namespace of its own without the v2 mount, so it
# sees a cgroup v1 host (the shim's work is the same either way).
#
# Exit 77 (ctest: skipped) when this host cannot run the test at all: not
# root, no busybox-static, or a runtime that cannot start even a trivial
# container here (said on stderr, with the runtime's own error).
set -euo pipefail
# shellcheck source=tests/limiter/containers/common.sh
. "$(dirname "$0")/common.sh"
runtime=$1 tool=$2 library=$3 standin=$4 probe=$5

test_name="containers[$runtime]"
need_root_and_busybox "OCI runtimes create namespaces and mounts"
busybox=/bin/busybox
case $runtime in
  runc | crun | podman | docker) runtime_path=$(command -v "${runtime/docker/dockerd}" || true) ;;
  *) fail "unknown runtime $runtime" ;;
esac
[[ -n $runtime_path ]] || skip "$runtime is not installed (scripts/install-test-deps)"
if [[ $runtime == docker ]]; then
  # The client of the package (Debian: dockerd in /usr/sbin, docker in
  # /usr/bin), not whichever docker is first on $PATH.
  docker_client=
  for candidate in "$(dirname "$runtime_path")/docker" /usr/bin/docker; do
    [[ -x $candidate ]] && docker_client=$candidate && break
  done
  [[ -n $docker_client ]] || skip "no docker client next to $runtime_path or in /usr/bin"
fi

work=$(mktemp -d /tmp/gpu-limit-containers.XXXXXX)
chmod 755 "$work"
state=$work/state # the state root: the same path inside the containers
ids=()
dockerd_pid=
docker() { DOCKER_HOST=unix://$work/docker.sock "$docker_client" "$@"; }
cleanup() {
  for id in "${ids[@]}"; do
    case $runtime in
      podman) podman rm -f "$id" >/dev/null 2>&1 || true ;;
      docker) docker rm -f "$id" >/dev/null 2>&1 || true ;;
      *) real_runtime delete -f "$id" >/dev/null 2>&1 || true ;;
    esac
  done
  [[ -z $dockerd_pid ]] || stop_dockerd "$work"
  unmount_below "$work"
  rm -rf --one-file-system "$work"
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
copy_libraries "$rootfs" "$probe" "$library" "$standin"/libcuda.so.1 "$standin"/libnvidia-ml.so.1

# The runtime's global options, before its command, as containerd gives
# them; the shim's own options come first (daemon.json's runtimeArgs).
global=(--root "$work/runtime-root" --log "$work/runtime.log" --log-format json)
[[ $runtime != crun ]] || global+=(--cgroup-manager cgroupfs)
in_namespace=()
if [[ $runtime == crun && $(stat -f -c %T /sys/fs/cgroup) == tmpfs &&
  $(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null) == cgroup2fs &&
  -n $(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null) ]]; then
  note "hybrid cgroups with controllers on v2 ($(cat /sys/fs/cgroup/unified/cgroup.controllers))," \
    "which crun $(crun --version | sed -n 's/^crun version //p') refuses: crun runs in a mount" \
    "namespace without /sys/fs/cgroup/unified (a cgroup v1 host to it)"
  in_namespace=(unshare --mount --propagation private -- sh -c
    'umount /sys/fs/cgroup/unified && exec "$@"' v1-only)
fi
real_runtime() { "${in_namespace[@]}" "$runtime_path" "${global[@]}" "$@"; }
shim() {
  "${in_namespace[@]}" "$tool" runtime --runtime-path "$runtime_path" --library "$library" \
    --state-root "$state" "${global[@]}" "$@"
}
wait_stopped() { # ID
  for _ in $(seq 100); do
    real_runtime state "$1" 2>/dev/null | grep -q '"status": *"stopped"' && return 0
    sleep 0.1
  done
}

# bundle NAME ENV... -- ARGS...: a bundle whose config.json runs ARGS.
bundle() {
  local name=$1
  shift
  local env=() args=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  args=("$@")
  mkdir -p "$work/$name"
  (cd "$work/$name" && "$runtime_path" spec)
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
  shim create --bundle "$work/$name" "$id" >"$work/$name.out" 2>"$work/$name.err" || return 1
  shim start "$id" 2>>"$work/$name.err" || return 1
  wait_stopped "$id"
  shim delete "$id" 2>>"$work/$name.err" || return 1
}

# run_podman NAME ID ENV... -- ARGS...: podman with our hooks (and one that
# drops rlimits, which some sandboxes refuse to set even to their own values).
run_podman() {
  local name=$1
  shift
  local env=()
  while [[ $1 != -- ]]; do env+=(-e "$1"); shift; done
  shift
  podman --runtime runc --hooks-dir "$work/hooks.d" run --rm --name "gl-$name-$$" "${env[@]}" \
    --rootfs "$rootfs" "$@" >"$work/$name.out" 2>"$work/$name.err"
}
if [[ $runtime == podman ]]; then
  hooks=$work/hooks.d
  no_rlimits_hook "$hooks"
  cat >"$hooks/10-gpu-limit.json" <<JSON
{"version":"1.0.0","hook":{"path":"$tool","args":["gpu-limit","oci-hook","--library","$library","--state-root","$state","precreate"]},"when":{"always":true},"stages":["precreate"]}
JSON
  cat >"$hooks/10-gpu-limit-poststop.json" <<JSON
{"version":"1.0.0","hook":{"path":"$tool","args":["gpu-limit","oci-hook","--state-root","$state","poststop"]},"when":{"always":true},"stages":["poststop"]}
JSON
fi

# docker: a dockerd of our own (start_dockerd), its containerd started by
# it, the rootfs imported as an image (no registry here), and the shim
# registered as in oci/docker-daemon.json, through a logger that records the
# shim's argv and, on create, config.json before and after.
if [[ $runtime == docker ]]; then
  cat >"$work/logger" <<SH
#!/bin/sh
log=$work/argv.log
printf '%s\n' "argv: \$*" >>"\$log"
bundle= command= previous=
for word in "\$@"; do
  case \$previous in --bundle | -b) bundle=\$word ;; esac
  case \$word in create | start | delete) [ -n "\$command" ] || command=\$word ;; esac
  previous=\$word
done
[ "\$command" = create ] && [ -n "\$bundle" ] || exec "$tool" "\$@"
id=\$(basename "\$bundle")
cp "\$bundle/config.json" "$work/configs/\$id.before"
"$tool" "\$@"
code=\$?
cp "\$bundle/config.json" "$work/configs/\$id.after"
exit \$code
SH
  chmod 755 "$work/logger"
  mkdir -p "$work/configs"
  # Docker runs runtimeArgs through `sh -c "PATH ARGS $@"`: no spaces in them.
  cat >"$work/daemon.json" <<JSON
{"runtimes": {"gpu-limit": {"path": "$work/logger", "runtimeArgs": ["runtime",
 "--runtime-path", "$(command -v runc)", "--library", "$library", "--state-root", "$state"]}}}
JSON
  start_dockerd "$work" "$runtime_path" "$docker_client" ||
    skip "dockerd cannot start here: $(tail -5 "$work/dockerd.log")"
  tar -C "$rootfs" -c . | docker import - gpu-limit-test:busybox >/dev/null ||
    fail "docker import of the rootfs"
fi
# run_docker NAME ENV... -- ARGS...
run_docker() {
  local name=$1
  shift
  local env=()
  while [[ $1 != -- ]]; do env+=(-e "$1"); shift; done
  shift
  ids+=("gl-$name-$$")
  docker run --rm --runtime=gpu-limit --network none --name "gl-$name-$$" "${env[@]}" \
    gpu-limit-test:busybox "$@" >"$work/$name.out" 2>"$work/$name.err"
}

# The probe: can this runtime start any container here?
case $runtime in
  podman)
    run_podman probe -- /bin/true || skip "podman cannot start a container here: $(cat "$work/probe.err")"
    ;;
  docker)
    run_docker probe -- /bin/true ||
      skip "docker cannot start a container here: $(cat "$work/probe.err")"
    ;;
  *)
    bundle probe -- /bin/true
    run_shim probe "gl-probe-$$" ||
      skip "$runtime cannot start a container here: $(cat "$work/probe.err")"
    ;;
esac

# 1. Without the switch: config.json as it was, byte for byte, and nothing on the host.
case $runtime in
  runc | crun)
    bundle off AMP_VGPU_ENABLE=0 -- /bin/sh -c 'cat /etc/ld.so.preload 2>&1; echo done'
    cp "$work/off/config.json" "$work/off.before"
    run_shim off "gl-off-$$" || fail "a container without the switch: $(cat "$work/off.err")"
    cmp "$work/off.before" "$work/off/config.json" || fail "config.json changed without the switch"
    [[ ! -e $state/gl-off-$$ ]] || fail "a state directory for a container without the switch"
    ;;
  docker)
    run_docker off AMP_VGPU_ENABLE=0 -- /bin/sh -c 'cat /etc/ld.so.preload 2>&1; echo done' ||
      fail "a container without the switch: $(cat "$work/off.err")"
    # docker's container id is the bundle's name.
    before=$(grep -l AMP_VGPU_ENABLE=0 "$work"/configs/*.before) ||
      fail "the shim saw no create for the container without the switch"
    cmp "$before" "${before%.before}.after" || fail "config.json changed without the switch"
    [[ -z $(ls -A "$state" 2>/dev/null) ]] ||
      fail "a state directory for a container without the switch: $(ls -A "$state")"
    ;;
esac
if [[ $runtime != podman ]]; then
  out=$(cat "$work/off.out")
  expect_line "$out" "^cat: can't open '/etc/ld.so.preload': No such file or directory$" \
    "no /etc/ld.so.preload without the switch"
  expect_line "$out" "^done$" "the container without the switch ran"
fi

# 2. With it.
script='cat /etc/ld.so.preload
md5sum /usr/lib/gpuinit/libgpulimit.so
touch /usr/lib/gpuinit/libgpulimit.so 2>/dev/null && echo library-writable
echo x >/etc/ld.so.preload 2>/dev/null && echo preload-writable
env | grep "^GPU_"
touch "$GPU_LIMIT_STATE_DIR/$GPU_LIMIT_GROUP/from-inside" && echo state-writable
ls -ld "$GPU_LIMIT_STATE_DIR/$GPU_LIMIT_GROUP"
LD_LIBRARY_PATH=/standin /bin/cudart_probe meminfo malloc 2147483648 malloc 536870912 meminfo
echo done'
on_env=(AMP_VGPU_ENABLE=1 GPU_MEM_PER_DEVICE=1073741824 GPU_LIMIT_GROUP=not-mine)
[[ $runtime != docker ]] || on_env+=(GPU_UTIL_PER_DEVICE=50)
case $runtime in
  podman | docker)
    "run_$runtime" on "${on_env[@]}" -- /bin/sh -c "$script" ||
      fail "$runtime with the switch: $(cat "$work/on.err")"
    group=$(grep -oE '^GPU_LIMIT_GROUP=.*' "$work/on.out" | cut -d= -f2)
    [[ $group =~ ^[0-9a-f]{64}$ ]] || fail "the group is not $runtime's container id: '$group'"
    ;;
  *)
    group=gl-on-$$
    bundle on "${on_env[@]}" -- /bin/sh -c "$script"
    ids+=("$group")
    shim create --bundle "$work/on" "$group" >"$work/on.out" 2>"$work/on.err" ||
      fail "create with the switch: $(cat "$work/on.err")"
    [[ -d $state/$group ]] || fail "no state directory $state/$group after create"
    [[ $(stat -c %a "$state/$group") == 700 ]] || fail "the state directory is not 0700"
    real_runtime start "$group"
    wait_stopped "$group"
    [[ -e $state/$group/from-inside ]] || fail "the container's file is not in $state/$group"
    ;;
esac
out=$(cat "$work/on.out")
expect_line "$out" "^/usr/lib/gpuinit/libgpulimit.so$" "/etc/ld.so.preload names the library"
expect_line "$out" "^$(md5sum <"$library" | cut -d' ' -f1)  /usr/lib/gpuinit/libgpulimit.so$" \
  "the library in the container is the host's"
! grep -q library-writable <<<"$out" || fail "the library is writable in the container"
! grep -q preload-writable <<<"$out" || fail "/etc/ld.so.preload is writable in the container"
expect_line "$out" "^GPU_LIMIT_STATE_DIR=$state$" "GPU_LIMIT_STATE_DIR"
expect_line "$out" "^GPU_LIMIT_GROUP=$group$" "GPU_LIMIT_GROUP is the container, not the user's"
expect_line "$out" "^GPU_MEM_PER_DEVICE=1073741824$" "the user's cap is kept"
expect_line "$out" "^state-writable$" "the group's state directory is writable"
cap=$((1024 * 1024 * 1024 - 10 * 1024 * 1024))
expect_line "$out" "^step=meminfo err=0 .*free=$cap total=$cap$" \
  "cudaMemGetInfo in the container shows the cap"
expect_line "$out" "^step=malloc err=2 .*bytes=2147483648" \
  "an allocation over the cap fails in the container"
expect_line "$out" "^step=malloc err=0 .*bytes=536870912" "an allocation under the cap succeeds"
expect_line "$out" "^done$" "the container ran to the end"

# docker: the shim got daemon.json's runtimeArgs first, then containerd's
# global options, then the command; and config.json was edited on create.
if [[ $runtime == docker ]]; then
  argv=$(cat "$work/argv.log")
  expect_line "$argv" "^argv: runtime --runtime-path [^ ]+ --library [^ ]+ --state-root $state --root [^ ]+ --log [^ ]+ --log-format json create --bundle [^ ]+/$group( --[a-z-]+ [^ ]+)* $group$" \
    "docker's argv: runtimeArgs, runc's global options, create"
  expect_line "$argv" "^argv: runtime --runtime-path [^ ]+ --library [^ ]+ --state-root $state --root [^ ]+ --log [^ ]+ --log-format json (--[a-z-]+ )*delete( --[a-z-]+)* $group$" \
    "docker's argv: delete"
  cmp -s "$work/configs/$group.before" "$work/configs/$group.after" &&
    fail "config.json with the switch is unchanged"
  grep -q '"/usr/lib/gpuinit/libgpulimit.so"' "$work/configs/$group.after" ||
    fail "the edited config.json does not bind the library"
  note "the shim's argv from docker:"$'\n'"$argv"
fi

# 2b. A group whose directory exists (a leftover, or another container's) is
# refused with one line: neither re-owned nor mounted, config.json as it was.
case $runtime in
  runc | crun)
    taken=gl-taken-$$
    mkdir -m 0700 "$state/$taken"
    chown 1234:1234 "$state/$taken"
    bundle taken AMP_VGPU_ENABLE=1 -- /bin/true
    cp "$work/taken/config.json" "$work/taken.before"
    ids+=("$taken")
    if shim create --bundle "$work/taken" "$taken" >"$work/taken.out" 2>"$work/taken.err"; then
      fail "a container was created in the existing group $state/$taken"
    fi
    [[ $(wc -l <"$work/taken.err") -eq 1 ]] ||
      fail "the refusal is not one line: $(cat "$work/taken.err")"
    expect_line "$(cat "$work/taken.err")" "$state/$taken.*exists" "the refusal names the group"
    [[ $(stat -c %u:%g:%a "$state/$taken") == 1234:1234:700 ]] ||
      fail "the existing group was changed: $(stat -c %u:%g:%a "$state/$taken")"
    cmp "$work/taken.before" "$work/taken/config.json" ||
      fail "config.json was edited for a refused group"
    rmdir "$state/$taken"
    ;;
esac

# 3. Cleanup: the group's directory goes with the container.
case $runtime in
  runc | crun) shim delete "$group" || fail "delete" ;;
esac
[[ ! -e $state/$group ]] || fail "$state/$group is still there after the container is gone"
[[ -f $state/ld.so.preload ]] || fail "the shared preload file went too"
echo "containers[$runtime]: ok"
