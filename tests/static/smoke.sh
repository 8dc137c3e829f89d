#!/usr/bin/env bash
# Smoke test of one static tool: it runs with no shared library at all,
# answers --help, plans a --dry-run on a fixture root, and (gpu-mknod) makes
# real nodes in a temporary copy of it (gpu-persist: runs its daemon there;
# gpu-mig: syncs its leases there; gpu-limit: a dry run and status). Exit 77 (skipped) without root.
#
#   smoke.sh TOOL SAMPLE_ROOT FAKE_MODULES_DIR
set -euo pipefail

tool=$1 sample=$2 modules=$3
name=$(basename "$tool")
fail() { echo "FAIL: $name: $*" >&2; exit 1; }

file -L -b "$tool" | grep -q "statically linked" || fail "not statically linked: $(file -L -b "$tool")"
# No loader, no libraries: it must run from an empty environment and root.
env -i "$tool" --help >/dev/null || fail "--help"
# Read whole: gpu-limit-runtime prints the real runtime's version after its
# own line, and grep -q would close the pipe under it.
version=$(env -i "$tool" --version) || fail "--version exited $?"
grep -q "^$name " <<<"$version" || fail "--version: $version"

work=$(mktemp -d)
daemon=
# A daemon left running would hold ctest's output pipe open: the test would
# hang instead of failing.
trap '[[ -z $daemon ]] || kill -KILL "$daemon" 2>/dev/null; rm -rf "$work"' EXIT
cp -a "$sample/." "$work/root"

case $name in
gpuinit)
  # The multi-call binary: every tool by its first argument, and its links.
  env -i "$tool" --help | grep -q "mknod .*gpu-mknod" || fail "--help does not list mknod"
  env -i "$tool" mknod --root "$work/root" --dry-run | grep -q "would create" || fail "gpuinit mknod"
  env -i "$tool" modload --version | grep -q "^gpu-modload " || fail "gpuinit modload --version"
  if env -i "$tool" bogus 2>/dev/null; then fail "an unknown command exited 0"; fi
  for link in "$(dirname "$tool")"/gpu-*; do
    [[ -L $link && $(readlink "$link") == gpuinit ]] || fail "$link is not a link to gpuinit"
  done
  ;;
gpu-mknod)
  env -i "$tool" --root "$work/root" --dry-run | grep -q "would create" || fail "--dry-run"
  [[ ! -e $work/root/dev/nvidia0 ]] || fail "--dry-run changed the tree"
  if [[ $(id -u) -ne 0 ]]; then
    echo "SKIPPED LOUDLY: the real gpu-mknod run needs root (mknod, chown)" >&2
    exit 77
  fi
  env -i "$tool" --root "$work/root" -q || fail "real run exited $?"
  gid=$(awk -F: '$1 == "nvidia1" {print $3}' "$work/root/etc/group")
  [[ $(stat -c '%F %t:%T %u:%g %a' "$work/root/dev/nvidia1") == "character special file c3:1 0:$gid 660" ]] ||
    fail "wrong /dev/nvidia1: $(stat -c '%F %t:%T %u:%g %a' "$work/root/dev/nvidia1")"
  env -i "$tool" --root "$work/root" | grep -q "nothing to do" || fail "second run changed something"
  ;;
gpu-modload)
  env -i "$tool" --root "$work/root" --check | grep -q "cannot undo or widen" || fail "--check"
  release=6.1.0-smoke
  kernel_dir=$work/root/lib/modules/$release/kernel/drivers/video
  mkdir -p "$kernel_dir"
  cp "$modules"/*.ko "$kernel_dir/"
  : >"$work/root/lib/modules/$release/modules.order"
  : >"$work/root/lib/modules/$release/modules.builtin"
  depmod -b "$work/root" "$release"
  mkdir -p "$work/root/etc/modprobe.d"
  echo "options nvidia NVreg_ModifyDeviceFiles=0" >"$work/root/etc/modprobe.d/nvidia.conf"
  plan=$(env -i "$tool" --root "$work/root" --dry-run)
  [[ $(echo "$plan" | awk '{print $2}' | tr '\n' ' ') == "nvidia nvidia_uvm " ]] ||
    fail "--dry-run plan: $plan"
  echo "$plan" | grep -q "NVreg_ModifyDeviceFiles=0" || fail "--dry-run options: $plan"
  ;;
gpu-persist)
  # The daemon on the sample root (no driver: its GPUs wait for nodes), its
  # client, and a clean stop.
  rc=0; env -i "$tool" --bogus 2>/dev/null || rc=$?
  [[ $rc == 1 ]] || fail "an unknown option exited $rc, not 1"
  env -i "$tool" --root "$work/root" --no-hotplug 2>"$work/daemon.log" &
  daemon=$!
  for _ in $(seq 100); do [[ -e $work/root/run/gpu-persist/status ]] && break; sleep 0.05; done
  # Its GPUs wait for their nodes: none is held, and status says so with 2.
  rc=0; status=$(env -i "$tool" --root "$work/root" status) || rc=$?
  [[ $rc == 2 ]] || fail "status of GPUs not held exited $rc, not 2"
  grep -q "waiting-for-node" <<<"$status" || fail "status: $status; $(cat "$work/daemon.log")"
  rc=0; status=$(env -i "$tool" --root "$work/root" status --json) || rc=$?
  [[ $rc == 2 ]] || fail "status --json of GPUs not held exited $rc, not 2"
  grep -q '"state":"waiting-for-node"' <<<"$status" || fail "status --json: $status"
  rc=0; env -i "$tool" --root "$work/root" disable 7 2>/dev/null || rc=$?
  [[ $rc == 3 ]] || fail "disable of an unknown GPU exited $rc, not 3"
  kill -TERM "$daemon"
  rc=0; wait "$daemon" || rc=$?
  daemon=
  [[ $rc == 0 ]] || fail "stopped with $rc: $(cat "$work/daemon.log")"
  [[ ! -e $work/root/run/gpu-persist/socket ]] || fail "socket left behind"
  ;;
gpu-mig)
  # The sample has no MIG instances: sync makes the lease directory, list
  # says there is nothing, pick exits 3 (cannot pick), not 6 (none free).
  env -i "$tool" --root "$work/root" sync | grep -q "0 created, 0 repaired, 0 removed, 0 kept" ||
    fail "sync"
  [[ $(stat -c '%F %a' "$work/root/run/gpu-mig") == "directory 755" ]] || fail "sync's directory"
  env -i "$tool" --root "$work/root" list | grep -q "no MIG instance" || fail "list"
  env -i "$tool" --root "$work/root" list --json | grep -q '"instances":\[\]' || fail "list --json"
  rc=0; env -i "$tool" --root "$work/root" pick --format key 2>/dev/null || rc=$?
  [[ $rc == 3 ]] || fail "pick without instances exited $rc, not 3"
  ;;
gpu-limit)
  # A dry run needs a library file to name and a trusted state directory;
  # status of an empty one lists nothing; an untrusted one is refused (3).
  : >"$work/libgpulimit.so"
  mkdir -m 700 "$work/state"
  env -i "$tool" run --mem 1G --state-dir "$work/state" --library "$work/libgpulimit.so" \
    --group smoke --dry-run -- true | grep -qx "export GPU_MEM_PER_DEVICE=1073741824" ||
    fail "run --dry-run"
  env -i "$tool" status --state-dir "$work/state" | grep -q "no group in" || fail "status"
  env -i "$tool" status --state-dir "$work/state" --json | grep -q '"groups":\[\]' ||
    fail "status --json"
  chmod 777 "$work/state"
  rc=0; env -i "$tool" status --state-dir "$work/state" 2>/dev/null || rc=$?
  [[ $rc == 3 ]] || fail "status of a world-writable state directory exited $rc, not 3"
  rc=0; env -i "$tool" run --mem 0 --library "$work/libgpulimit.so" -- true 2>/dev/null || rc=$?
  [[ $rc == 3 ]] || fail "run --mem 0 exited $rc, not 3"
  ;;
gpu-limit-runtime)
  # By its own name it is `gpu-limit runtime`: runc's command line goes to
  # the real runtime unchanged (containerd's BinaryName gives no words of ours).
  printf '#!/bin/sh\necho "args: $*"\n' >"$work/runc"
  chmod 755 "$work/runc"
  env -i GPU_LIMIT_RUNTIME="$work/runc" "$tool" --root "$work/r" --log-format json state id |
    grep -qx "args: --root $work/r --log-format json state id" || fail "runc's words forwarded"
  env -i GPU_LIMIT_RUNTIME="$work/runc" "$tool" --version | grep -qx "args: --version" ||
    fail "--version also asks the real runtime"
  ;;
*)
  fail "no smoke test for this tool"
  ;;
esac
echo "PASS: $name"
