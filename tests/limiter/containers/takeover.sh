#!/usr/bin/env bash
# One container must not take over another's limit group (the review's F1),
# through real podman with gpu-limit's hooks, as the attack was run:
#
#   podman run --cgroups=disabled --annotation io.kubernetes.cri-o.ContainerID=<victim id> \
#     --user 1000:1000 -e AMP_VGPU_ENABLE=1 ...
#
# gives a spec with no id in linux.cgroupsPath and the victim's id in an
# annotation the attacker wrote. The group directory must be named only by
# what the runtime says (the cgroup path podman makes, the id of the OCI
# state), so:
#   - the attacker's GPU_LIMIT_GROUP is not the victim's, and the victim's
#     directory keeps its owner and gets nothing of the attacker's;
#   - the same with our own annotation (org.gpuinit.gpu-limit.group) naming
#     the made-up group of a victim started with --cgroups=disabled;
#   - the attacker's poststop does not remove that victim's directory (podman
#     hands poststop hooks the annotations the attacker wrote).
#   takeover.sh GPU_LIMIT LIBGPULIMIT
# Exit 77 (ctest: skipped) when podman cannot start a container here.
set -euo pipefail
# shellcheck source=tests/limiter/containers/common.sh
. "$(dirname "$0")/common.sh"
tool=$1 library=$2
test_name="takeover[podman]"
need_root_and_busybox "podman runs rootful containers"
command -v podman >/dev/null || skip "podman is not installed (scripts/install-test-deps)"

work=$(mktemp -d /tmp/gpu-limit-takeover.XXXXXX)
chmod 755 "$work"
state=$work/state
names=()
cleanup() {
  for name in "${names[@]}"; do pod rm -f -t 0 "$name" >/dev/null 2>&1 || true; done
  unmount_below "$work"
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

rootfs=$work/rootfs
mkdir -p "$rootfs"/{bin,tmp,proc,sys,dev,etc}
cp /bin/busybox "$rootfs/bin/busybox"
for applet in sh cat ls touch echo true sleep stat; do ln -s busybox "$rootfs/bin/$applet"; done

hooks=$work/hooks.d
no_rlimits_hook "$hooks"
cat >"$hooks/10-gpu-limit.json" <<JSON
{"version":"1.0.0","hook":{"path":"$tool","args":["gpu-limit","oci-hook","--library","$library","--state-root","$state","precreate"]},"when":{"always":true},"stages":["precreate"]}
JSON
cat >"$hooks/10-gpu-limit-poststop.json" <<JSON
{"version":"1.0.0","hook":{"path":"$tool","args":["gpu-limit","oci-hook","--state-root","$state","poststop"]},"when":{"always":true},"stages":["poststop"]}
JSON
# runc cannot run podman's --cgroups=disabled ("not compatible with
# NoCgroups"): crun runs every container here. crun 1.8 refuses hybrid
# cgroup hosts whose v2 hierarchy has controllers; there podman runs in a
# mount namespace of its own without the v2 mount (as containers.sh does).
in_namespace=()
if [[ $(stat -f -c %T /sys/fs/cgroup) == tmpfs &&
  $(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null) == cgroup2fs &&
  -n $(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null) ]]; then
  in_namespace=(unshare --mount --propagation private -- sh -c
    'umount /sys/fs/cgroup/unified && exec "$@"' v1-only)
fi
command -v crun >/dev/null || skip "crun is not installed (scripts/install-test-deps)"
pod() { "${in_namespace[@]}" podman --runtime crun --hooks-dir "$hooks" "$@"; }

pod run --rm --name "gl-probe-$$" --network none --cgroups=disabled --rootfs "$rootfs" /bin/true \
  >"$work/probe.out" 2>&1 ||
  skip "podman with crun cannot start a container here: $(cat "$work/probe.out")"

# victim NAME [PODMAN OPTIONS...]: a container with the limit that sleeps;
# prints its group once its directory is there. (Run in $(...): the caller
# adds NAME to names.)
victim() {
  local name=$1
  shift
  mkdir -p "$work/$name.d"
  pod run -d --name "$name" --network none -e AMP_VGPU_ENABLE=1 "$@" -v "$work/$name.d:/out" \
    --rootfs "$rootfs" /bin/sh -c \
    'touch "$GPU_LIMIT_STATE_DIR/$GPU_LIMIT_GROUP/victim"; echo "$GPU_LIMIT_GROUP" >/out/group; sleep 300' \
    >/dev/null 2>"$work/$name.err" || fail "the victim $name: $(cat "$work/$name.err")"
  local group=
  for _ in $(seq 100); do
    group=$(cat "$work/$name.d/group" 2>/dev/null || true)
    [[ -n $group && -e $state/$group/victim ]] && break
    sleep 0.1
  done
  [[ -n $group && -e $state/$group/victim ]] || fail "the victim $name has no group directory"
  echo "$group"
}

# attack NAME ANNOTATION: a container of uid 1000 without a cgroup path,
# naming the victim's group in ANNOTATION; its output in $work/NAME.out.
attack() {
  local name=$1 annotation=$2
  names+=("$name")
  pod run --rm --name "$name" --network none --cgroups=disabled --user 1000:1000 --annotation "$annotation" \
    -e AMP_VGPU_ENABLE=1 --rootfs "$rootfs" /bin/sh -c \
    'echo "group=$GPU_LIMIT_GROUP"; touch "$GPU_LIMIT_STATE_DIR/$GPU_LIMIT_GROUP/attacker"; true' \
    >"$work/$name.out" 2>"$work/$name.err" || true
}

# victim_intact GROUP ATTACKER: the victim's directory as it was.
victim_intact() {
  local group=$1 attacker=$2
  [[ -d $state/$group ]] || fail "$attacker: the victim's $state/$group is gone"
  [[ $(stat -c %u:%g "$state/$group") == 0:0 ]] ||
    fail "$attacker: the victim's directory was given to $(stat -c %u:%g "$state/$group")"
  [[ ! -e $state/$group/attacker ]] || fail "$attacker: wrote into the victim's directory"
  [[ -e $state/$group/victim ]] || fail "$attacker: the victim's file is gone"
  ! grep -q "^group=$group\$" "$work/$attacker.out" ||
    fail "$attacker: was given the victim's group $group"
}

# 1. A victim with a cgroup path (its group is podman's id), and CRI-O's
# annotation naming it.
names+=("gl-victim-$$")
first=$(victim "gl-victim-$$")
id=$(pod inspect -f '{{.Id}}' "gl-victim-$$")
[[ $first == "$id" ]] || fail "the victim's group $first is not its id $id"
attack "gl-attack-crio-$$" "io.kubernetes.cri-o.ContainerID=$id"
victim_intact "$first" "gl-attack-crio-$$"

# 2. A victim without one (a group the hook made up), and our annotation.
names+=("gl-victim2-$$")
second=$(victim "gl-victim2-$$" --cgroups=disabled)
[[ $second != "$first" ]] || fail "two containers share the group $second"
attack "gl-attack-ours-$$" "org.gpuinit.gpu-limit.group=$second"
victim_intact "$second" "gl-attack-ours-$$"

note "attackers' output: $(cat "$work/gl-attack-crio-$$.out" "$work/gl-attack-ours-$$.out" \
  "$work/gl-attack-crio-$$.err" "$work/gl-attack-ours-$$.err" | tr '\n' ' ')"
echo "takeover[podman]: ok"
