# shellcheck shell=bash
# Shell functions the container tests share (sourced by containers.sh,
# seed.sh and standin-runtime.sh; bash). Messages start with $test_name,
# which the sourcing test sets after sourcing.
: "${test_name:=container test}"

fail() { echo "$test_name: FAIL: $*" >&2; exit 1; }
# ctest counts exit 77 as skipped (SKIP_RETURN_CODE).
skip() { echo "$test_name: SKIPPED: $*" >&2; exit 77; }
note() { echo "$test_name: $*" >&2; }
expect_line() { # OUTPUT PATTERN WHAT
  grep -Eq -- "$2" <<<"$1" || fail "$3: no line matching '$2' in:"$'\n'"$1"
}

# Root (WHY says what for) and a static busybox for the rootfs, or skip.
need_root_and_busybox() { # WHY
  [[ $(id -u) -eq 0 ]] || skip "needs root ($1)"
  file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' ||
    skip "/bin/busybox is not busybox-static (apt-get install busybox-static)"
}

# Stops a process of ours: TERM, then KILL after SECONDS.
stop_pid() { # PID SECONDS
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq $(($2 * 10))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# Unmounts whatever a daemon or a runtime left mounted below DIR (overlays,
# shm, network namespaces), innermost first, so that rm never reaches through
# a bind into the host.
unmount_below() { # DIR
  grep -F " $1/" /proc/self/mountinfo | awk '{print $5}' | sort -r |
    while read -r mount; do umount -l "$mount" 2>/dev/null || true; done || true
}

# Copies the shared libraries FILE... need into ROOTFS at the same paths.
copy_libraries() { # ROOTFS FILE...
  local rootfs=$1
  shift
  local object lib
  for object in "$@"; do
    ldd "$object" | grep -oE '/[^ ]+' | while read -r lib; do
      [[ -e $lib ]] || continue
      mkdir -p "$rootfs$(dirname "$lib")"
      cp -L "$lib" "$rootfs$lib"
    done
  done
}

# Waits up to 30 s until CHECK... succeeds, while PID lives.
wait_ready() { # PID CHECK...
  local pid=$1
  shift
  for _ in $(seq 300); do
    "$@" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  "$@" >/dev/null 2>&1
}

# A dockerd of the test's own in WORK (its data, exec root, socket; no bridge,
# no iptables: the host's network is left alone) with WORK/daemon.json; sets
# dockerd_pid. (dockerd 20.10 still writes its trust key /etc/docker/key.json,
# no option moves it, and makes /run/docker/plugins: the package's own daemon
# does too.) DOCKERD and DOCKER: the daemon and its client (default: on
# $PATH). False when it does not answer.
start_dockerd() { # WORK [DOCKERD [DOCKER]]
  local work=$1 dockerd=${2:-dockerd} client=${3:-docker}
  mkdir -p "$work/data" "$work/exec"
  "$dockerd" --config-file "$work/daemon.json" --data-root "$work/data" \
    --exec-root "$work/exec" --pidfile "$work/dockerd.pid" -H "unix://$work/docker.sock" \
    --bridge=none --iptables=false --ip6tables=false --ip-masq=false --ip-forward=false \
    --userland-proxy=false >"$work/dockerd.log" 2>&1 </dev/null &
  dockerd_pid=$!
  wait_ready "$dockerd_pid" env DOCKER_HOST="unix://$work/docker.sock" "$client" version
}

# Stops a dockerd of start_dockerd and the containerd it started (after a
# KILL it could not).
stop_dockerd() { # WORK
  local containerd_pid
  containerd_pid=$(cat "$1/exec/containerd/containerd.pid" 2>/dev/null || true)
  stop_pid "$dockerd_pid" 20
  [[ -z $containerd_pid ]] || stop_pid "$containerd_pid" 10
}

# A precreate hook in HOOKS_DIR that drops rlimits: some sandboxes refuse to
# set them even to their own values.
no_rlimits_hook() { # HOOKS_DIR
  mkdir -p "$1"
  cat >"$1/no-rlimits.sh" <<'SH'
#!/bin/sh
exec python3 -c 'import json,sys; d=json.load(sys.stdin); d["process"].pop("rlimits",None); print(json.dumps(d))'
SH
  chmod 755 "$1/no-rlimits.sh"
  cat >"$1/00-no-rlimits.json" <<JSON
{"version":"1.0.0","hook":{"path":"$1/no-rlimits.sh"},"when":{"always":true},"stages":["precreate"]}
JSON
}

# podman 4.3 reads CDI specs from /etc/cdi and /var/run/cdi only (its
# containers.conf has no cdi_spec_dirs): runs COMMAND with SPEC as the only
# file of a tmpfs on /var/run/cdi, in a mount namespace of its own, so the
# host's directory is neither read nor written. /run/cdi must exist
# (ensure_run_cdi).
with_cdi_spec() { # SPEC COMMAND...
  unshare --mount --propagation private -- sh -c \
    'mount -t tmpfs tmpfs /var/run/cdi && cp "$1" /var/run/cdi/nvidia.json && shift && exec "$@"' \
    cdi "$@"
}
# Makes /run/cdi when the host has none; sets created_run_cdi so that the
# test's cleanup removes it again.
ensure_run_cdi() {
  if [[ ! -d /run/cdi ]]; then
    mkdir /run/cdi
    # shellcheck disable=SC2034 # the sourcing test's cleanup reads it
    created_run_cdi=yes
  fi
}
