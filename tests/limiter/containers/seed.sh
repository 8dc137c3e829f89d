#!/usr/bin/env bash
# The eGPU seed's own command, as its users type it, over a stand-in of
# NVIDIA's container runtime (standin-nvidia-container-runtime, built from
# NVIDIA's source) and the stand-in driver, with gpu-limit-runtime in front:
#
#   docker run --runtime=nvidia -e NVIDIA_DRIVER_CAPABILITIES=all -e AMP_VGPU_ENABLE=1 \
#     -e GPU_MEM_PER_DEVICE=2000000000 -e GPU_UTIL_PER_DEVICE=50 -e NVIDIA_VISIBLE_DEVICES=1 \
#     -e AMP_USE_HOST_DAEMON=1 image_name
#
#   seed.sh CASE RUNTIME_LINK LIBGPULIMIT STANDIN_DIR CUDART_PROBE COMPUTE_LOAD STANDIN_RUNTIME
# CASE:
#   docker-legacy, docker-jit-cdi: dockerd of our own whose daemon.json
#     registers gpu-limit-runtime as "nvidia" in front of the stand-in
#     runtime in that mode; the command verbatim.
#   podman-cdi: podman --device nvidia.com/gpu=1 with a CDI spec the stand-in
#     `nvidia-ctk cdi generate` wrote, and gpu-limit's precreate hook.
#   containerd: a containerd of our own, `ctr run --runc-binary
#     gpu-limit-runtime` (containerd's BinaryName: no words of ours; the
#     settings come from containerd's environment), the stand-in runtime in
#     jit-cdi mode behind it.
# The host has the stand-in's two GPUs (a fixture /proc/driver/nvidia/gpus
# and /dev/nvidia{0,1} under $work/host); host GPU 1 (PCI order) is the
# 16 GiB one, CUDA ordinal 0 of the stand-in's list. In the container:
#   - the process sees that GPU alone, and its cuMemGetInfo total is
#     2000000000 - 10 MiB; 1.5 GB can be allocated, 2 GB cannot;
#   - the compute share of a kernel loop is 0.50 +- 0.05;
#   - GPU_LIMIT_DEVICES is the host GPU's UUID (and in jit-cdi and CDI
#     modes NVIDIA_VISIBLE_DEVICES is void).
# Without the switch the config our runtime hands on is byte for byte what
# it got (docker cases).
#
# Exit 77 (ctest: skipped) when this host cannot run containers at all.
set -euo pipefail
# shellcheck source=tests/limiter/containers/common.sh
. "$(dirname "$0")/common.sh"
case_name=$1
# Absolute, and not through symlinks (gpu-limit-runtime is one: its name is
# what matters): the runtimes run in the bundle's directory.
absolute() { realpath -s "$1"; }
runtime_link=$(absolute "$2") library=$(absolute "$3") standin=$(absolute "$4")
probe=$(absolute "$5") load=$(absolute "$6") standin_runtime=$(absolute "$7")

test_name="seed[$case_name]"
need_root_and_busybox "OCI runtimes create namespaces and device nodes"
busybox=/bin/busybox
runc=$(command -v runc || true)
[[ -n $runc ]] || skip "runc is not installed (scripts/install-test-deps)"
case $case_name in
  docker-*) for p in dockerd docker; do command -v $p >/dev/null || skip "$p is not installed"; done ;;
  podman-cdi) command -v podman >/dev/null || skip "podman is not installed" ;;
  containerd) for p in containerd ctr; do command -v $p >/dev/null || skip "$p is not installed"; done ;;
  *) fail "unknown case $case_name" ;;
esac

work=$(mktemp -d /tmp/gpu-limit-seed.XXXXXX)
chmod 755 "$work"
state=$work/state
host=$work/host
dockerd_pid='' containerd_pid='' created_run_cdi=''
containers=()
docker() { DOCKER_HOST=unix://$work/docker.sock command docker "$@"; }
ctr() { command ctr --address "$work/containerd.sock" --namespace gpu-limit-test "$@"; }
cleanup() {
  for id in "${containers[@]}"; do
    case $case_name in
      docker-*) docker rm -f "$id" >/dev/null 2>&1 || true ;;
      containerd) ctr task kill -s KILL "$id" >/dev/null 2>&1 || true
        ctr task delete "$id" >/dev/null 2>&1 || true
        ctr container delete "$id" >/dev/null 2>&1 || true ;;
    esac
  done
  [[ -z $dockerd_pid ]] || stop_dockerd "$work"
  [[ -z $containerd_pid ]] || stop_pid "$containerd_pid" 20
  unmount_below "$work"
  rm -rf --one-file-system "$work"
  [[ -z $created_run_cdi ]] || rmdir /run/cdi 2>/dev/null || true
}
trap cleanup EXIT

# The host: the stand-in's GPUs as the driver lists them, and their nodes.
devices="GPU-11111111-2222-3333-4444-555555555555:17179869184:0000:3b:00.0,GPU-66666666-7777-8888-9999-aaaaaaaaaaaa:8589934592:0000:1a:00.0"
host_gpu1=GPU-11111111-2222-3333-4444-555555555555 # PCI order: 1a is 0, 3b is 1
GPULIMIT_STANDIN_DEVICES=$devices "$standin_runtime" fixture "$host" ||
  fail "the stand-in runtime could not write the host fixture"

# The stand-in runtime's configuration (its mode) and the host it serves.
mode=jit-cdi
[[ $case_name != docker-legacy ]] || mode=legacy
mkdir -p "$work/bin" "$work/ctk"
ln -s "$standin_runtime" "$work/bin/nvidia-container-runtime"
ln -s "$standin_runtime" "$work/bin/nvidia-container-runtime-hook"
ln -s "$standin_runtime" "$work/bin/nvidia-ctk"
cat >"$work/ctk/config.toml" <<TOML
[nvidia-container-cli]
path = "$work/bin/nvidia-container-cli"

[nvidia-container-runtime]
mode = "$mode"
runtimes = ["$runc"]

[nvidia-container-runtime-hook]
path = "$work/bin/nvidia-container-runtime-hook"
TOML
export NVIDIA_CTK_CONFIG_FILE_PATH=$work/ctk/config.toml
export GPULIMIT_STANDIN_HOST_ROOT=$host

# The image: busybox, the stand-in driver (which shows the container only
# the GPUs whose nodes it was given), the CUDA programs and the check.
rootfs=$work/rootfs
mkdir -p "$rootfs"/{bin,standin,standin-state,tmp,proc,sys,dev,etc}
chmod 1777 "$rootfs/standin-state" "$rootfs/tmp"
cp "$busybox" "$rootfs/bin/busybox"
for applet in sh cat ls env grep echo true sed awk; do
  ln -s busybox "$rootfs/bin/$applet"
done
cp "$probe" "$rootfs/bin/cudart_probe"
cp "$load" "$rootfs/bin/compute_load"
cp "$standin"/libcuda.so.1 "$standin"/libnvidia-ml.so.1 "$rootfs/standin/"
copy_libraries "$rootfs" "$probe" "$load" "$library" "$standin"/libcuda.so.1 \
  "$standin"/libnvidia-ml.so.1
cat >"$rootfs/bin/check" <<'SH'
#!/bin/sh
echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"
echo "GPU_LIMIT_DEVICES=$GPU_LIMIT_DEVICES"
echo "GPU_LIMIT_GROUP=$GPU_LIMIT_GROUP"
for node in /dev/nvidia0 /dev/nvidia1; do
  [ -c "$node" ] && echo "node $node"
done
cat /etc/ld.so.preload
/bin/cudart_probe meminfo malloc 1500000000
/bin/cudart_probe malloc 2000000000
/bin/compute_load device=0 warmup=2.5 seconds=4
echo done
SH
chmod 755 "$rootfs/bin/check"
image_env=(PATH=/bin LD_LIBRARY_PATH=/standin GPULIMIT_STANDIN_DEVICE_NODES=1
  GPULIMIT_STANDIN_DIR=/standin-state "GPULIMIT_STANDIN_DEVICES=$devices")
seed_env=(NVIDIA_DRIVER_CAPABILITIES=all AMP_VGPU_ENABLE=1 GPU_MEM_PER_DEVICE=2000000000
  GPU_UTIL_PER_DEVICE=50 NVIDIA_VISIBLE_DEVICES=1 AMP_USE_HOST_DAEMON=1)

# The checks on what the container printed.
check_output() { # FILE
  local out
  out=$(cat "$1")
  expect_line "$out" "^GPU_LIMIT_DEVICES=$host_gpu1$" "the host's GPU 1 by UUID"
  [[ $mode == legacy ]] || expect_line "$out" "^NVIDIA_VISIBLE_DEVICES=void$" \
    "NVIDIA_VISIBLE_DEVICES=void from the CDI edit"
  expect_line "$out" "^node /dev/nvidia1$" "host GPU 1's node in the container"
  ! grep -q "^node /dev/nvidia0$" <<<"$out" || fail "host GPU 0's node is in the container"
  expect_line "$out" "^/usr/lib/gpuinit/libgpulimit.so$" "/etc/ld.so.preload names the library"
  local cap=$((2000000000 - 10 * 1024 * 1024))
  expect_line "$out" "^step=meminfo err=0 .*total=$cap$" "cudaMemGetInfo's total is the cap"
  expect_line "$out" "^step=malloc err=0 .*bytes=1500000000" "1.5 GB is allocated"
  expect_line "$out" "^step=malloc err=2 .*bytes=2000000000" "2 GB is refused"
  local share
  share=$(sed -n 's/^share=\([0-9.]*\) .*/\1/p' <<<"$out")
  [[ -n $share ]] || fail "no compute share in:"$'\n'"$out"
  awk -v s="$share" 'BEGIN { exit !(s >= 0.45 && s <= 0.55) }' ||
    fail "the compute share is $share, not 0.50 +- 0.05"
  expect_line "$out" "^done$" "the container ran to the end"
  note "host GPU 1 capped in the container: total $cap, compute share $share"
}

case $case_name in
docker-*)
  # Our runtime under NVIDIA's name, through a logger that keeps config.json
  # as docker wrote it and as our runtime handed it on.
  cat >"$work/bin/logger" <<SH
#!/bin/sh
bundle= command= previous=
for word in "\$@"; do
  case \$previous in --bundle | -b) bundle=\$word ;; esac
  case \$word in create | start | delete) [ -n "\$command" ] || command=\$word ;; esac
  previous=\$word
done
export GPU_LIMIT_RUNTIME=$work/bin/recorder
[ "\$command" = create ] && [ -n "\$bundle" ] || exec "$runtime_link" "\$@"
cp "\$bundle/config.json" "$work/configs/\$(basename "\$bundle").before"
exec "$runtime_link" "\$@"
SH
  cat >"$work/bin/recorder" <<SH
#!/bin/sh
bundle= previous=
for word in "\$@"; do
  case \$previous in --bundle | -b) bundle=\$word ;; esac
  previous=\$word
done
[ -z "\$bundle" ] || cp "\$bundle/config.json" "$work/configs/\$(basename "\$bundle").handed"
exec "$work/bin/nvidia-container-runtime" "\$@"
SH
  chmod 755 "$work/bin/logger" "$work/bin/recorder"
  mkdir -p "$work/configs"
  cat >"$work/daemon.json" <<JSON
{"runtimes": {"nvidia": {"path": "$work/bin/logger", "runtimeArgs": [
  "--host-root", "$host", "--library", "$library", "--state-root", "$state"]}}}
JSON
  start_dockerd "$work" || skip "dockerd cannot start here: $(tail -5 "$work/dockerd.log")"
  changes=(--change 'CMD ["/bin/check"]')
  for variable in "${image_env[@]}"; do changes+=(--change "ENV $variable"); done
  tar -C "$rootfs" -c . | docker import "${changes[@]}" - image_name >/dev/null ||
    fail "docker import of the image"

  # Without the switch: handed on byte for byte.
  containers+=(gl-off-$$)
  docker run --name gl-off-$$ --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=1 image_name /bin/true \
    >"$work/off.out" 2>&1 || fail "a container without the switch: $(cat "$work/off.out")"
  off=$(docker inspect -f '{{.Id}}' gl-off-$$)
  cmp "$work/configs/$off.before" "$work/configs/$off.handed" ||
    fail "config.json changed without the switch"

  # The seed's command, verbatim, as the README's container recipe gives it
  # (<!-- recipe: containers -->): what the checks below expect is what it
  # says, so a README that changes it fails here.
  top=$(cd "$(dirname "$0")/../../.." && pwd)
  "$top/tests/readme/check-readme.sh" extract "$top/README.md" containers >"$work/seed-command" ||
    fail "the README's container recipe"
  # shellcheck source=/dev/null
  . "$work/seed-command" >"$work/seed.out" 2>"$work/seed.err" ||
    fail "the seed's command: $(cat "$work/seed.err" "$work/seed.out")"
  containers+=("$(docker ps -lq)")
  check_output "$work/seed.out"

  # AMP_USE_HOST_DAEMON=1 with the host daemon running: its socket is bound
  # into the container, and the daemon verifies the container's process (by
  # its host pid, from SO_PEERCRED) as a member of the container's group.
  gpu_limit=$(dirname "$runtime_link")/gpu-limit
  mkdir -p "$work/standin-host"
  LD_LIBRARY_PATH=$standin GPULIMIT_STANDIN_DIR=$work/standin-host \
    "$gpu_limit" daemon --foreground --state-dir "$state" >"$work/daemon.log" 2>&1 &
  gpu_daemon=$!
  for _ in $(seq 50); do [[ -S $state/daemon.sock ]] && break; sleep 0.1; done
  [[ -S $state/daemon.sock ]] || fail "gpu-limit daemon did not start: $(cat "$work/daemon.log")"
  held=$(docker run -d --runtime=nvidia -e AMP_VGPU_ENABLE=1 -e GPU_MEM_PER_DEVICE=2000000000 \
    -e NVIDIA_VISIBLE_DEVICES=1 -e AMP_USE_HOST_DAEMON=1 image_name \
    /bin/cudart_probe --hold malloc 1048576) || fail "a container for the daemon"
  containers+=("$held")
  host_pid=$(docker inspect -f '{{.State.Pid}}' "$held")
  registered=
  for _ in $(seq 50); do
    status=$("$gpu_limit" status --json --state-dir "$state" 2>&1 || true)
    if python3 - "$status" "$held" "$host_pid" <<'PY'; then
import json, sys
report = json.loads(sys.argv[1])
groups = {g["name"]: g for g in report["groups"]}
group = groups.get(sys.argv[2])
sys.exit(0 if group and any(p["host_pid"] == int(sys.argv[3]) for p in group["processes"]) else 1)
PY
      registered=yes
      break
    fi
    sleep 0.1
  done
  kill "$gpu_daemon" 2>/dev/null
  wait "$gpu_daemon" 2>/dev/null || true
  [[ -n $registered ]] || fail "the daemon did not register the container's process (host pid" \
    "$host_pid) in group $held: $status"$'\n'"daemon: $(cat "$work/daemon.log")"$'\n'"container:" \
    "$(docker logs "$held" 2>&1 | tail -5)"
  note "the host daemon registered the container's process (host pid $host_pid) in its own group"
  ;;
podman-cdi)
  # The spec goes into a tmpfs on /var/run/cdi of podman's own (with_cdi_spec).
  "$work/bin/nvidia-ctk" cdi generate --dev-root "$host" --output "$work/nvidia.json" ||
    fail "the stand-in nvidia-ctk cdi generate"
  ensure_run_cdi
  no_rlimits_hook "$work/hooks.d"
  # The hook is gpu-limit oci-hook: the same binary as the runtime link.
  gpu_limit=$(dirname "$runtime_link")/gpu-limit
  cat >"$work/hooks.d/10-gpu-limit.json" <<JSON
{"version":"1.0.0","hook":{"path":"$gpu_limit","args":["gpu-limit","oci-hook","--root","$host","--library","$library","--state-root","$state","precreate"]},"when":{"always":true},"stages":["precreate"]}
JSON
  env_args=()
  for variable in "${image_env[@]}" NVIDIA_DRIVER_CAPABILITIES=all AMP_VGPU_ENABLE=1 \
    GPU_MEM_PER_DEVICE=2000000000 GPU_UTIL_PER_DEVICE=50; do env_args+=(-e "$variable"); done
  with_cdi_spec "$work/nvidia.json" podman --runtime runc --hooks-dir "$work/hooks.d" run --rm --device nvidia.com/gpu=1 \
    "${env_args[@]}" --rootfs "$rootfs" /bin/check >"$work/seed.out" 2>"$work/seed.err" ||
    fail "podman --device nvidia.com/gpu=1: $(cat "$work/seed.err" "$work/seed.out")"
  check_output "$work/seed.out"
  ;;
containerd)
  mkdir -p "$work/containerd"
  cat >"$work/containerd.toml" <<TOML
version = 2
root = "$work/containerd/root"
state = "$work/containerd/state"
[grpc]
  address = "$work/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  disable_apparmor = true
TOML
  GPU_LIMIT_RUNTIME=$work/bin/nvidia-container-runtime GPU_LIMIT_HOST_ROOT=$host \
    GPU_LIMIT_LIBRARY=$library GPU_LIMIT_STATE_ROOT=$state \
    containerd --config "$work/containerd.toml" >"$work/containerd.log" 2>&1 </dev/null &
  containerd_pid=$!
  wait_ready "$containerd_pid" ctr version || skip "containerd cannot start here: $(tail -5 "$work/containerd.log")"
  env_args=()
  for variable in "${image_env[@]}" "${seed_env[@]}"; do env_args+=(--env "$variable"); done
  id=gl-seed-$$
  containers+=("$id")
  # --rootfs is a switch: the rootfs path is the first word after the options.
  ctr run --rm --runc-binary "$runtime_link" "${env_args[@]}" --rootfs "$rootfs" "$id" \
    /bin/check >"$work/seed.out" 2>"$work/seed.err" ||
    fail "ctr run with the runtime link: $(cat "$work/seed.err" "$work/seed.out")"
  check_output "$work/seed.out"
  ;;
esac
echo "seed[$case_name]: ok"
