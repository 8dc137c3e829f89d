#!/usr/bin/env bash
# gpu-limit daemon's figures, two builds side by side in one run (issue 25):
# - registration cost: one request from a peer holding 16,000 fds, for the
#   live slot of a group it does not own (what the reviewer timed at
#   0.229 s), median and worst of 9;
# - idle: RssAnon, VmRSS and wakeups (context switches) per minute of a
#   daemon with no group, and with one capped group;
# - the worst gap between compute steps under a flood of 64 peers with
#   16,000 fds each: the end-to-end test
#   limiter.daemon.DaemonEndToEnd.AFloodOfPeersDoesNotStallTheComputeSteps,
#   run against each daemon.
# Each daemon runs over the stand-in NVML of BUILD, with the job and
# libgpulimit.so of BUILD (a daemon of protocol 1 refuses their
# registration; its compute steps run anyway).
#   bench/daemons/limit-daemon.sh OLD_GPU_LIMIT [BUILD_DIR] [IDLE_SECONDS]
#   e.g. bench/daemons/limit-daemon.sh /work/main/build/tools/gpu-limit build 30
set -euo pipefail
old=$(realpath "$1")
build=$(realpath "${2:-build}")
idle=${3:-30}
new=$build/tools/gpu-limit
standin=$build/tests/limiter/standin/lib
job=$build/tests/limiter/daemon/gpulimit_daemon_job
library=$build/gpulimit/libgpulimit.so
tests=$build/tests/limiter/daemon/gpulimit_daemon_tests
for file in "$old" "$new" "$standin/libnvidia-ml.so.1" "$job" "$library" "$tests"; do
  [[ -e $file ]] || { echo "limit-daemon: no $file (build gpu-limit, gpulimit, gpulimit_daemon_tests)" >&2; exit 1; }
done

status_of() { # PID FIELD
  awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"
}
switches() { # PID
  echo $(( $(status_of "$1" voluntary_ctxt_switches) + $(status_of "$1" nonvoluntary_ctxt_switches) ))
}

# One daemon: prints its figures, one line each.
measure() { # LABEL GPU_LIMIT PROTOCOL
  local label=$1 tool=$2 protocol=$3 work
  work=$(mktemp -d /tmp/limit-daemon-bench.XXXXXX)
  mkdir -m 0755 "$work/state" "$work/standin"
  LD_LIBRARY_PATH=$standin GPULIMIT_STANDIN_DIR=$work/standin \
    "$tool" daemon --foreground --state-dir "$work/state" --socket "$work/state/daemon.sock" \
    2>"$work/daemon.log" &
  local daemon=$!
  for _ in $(seq 100); do [[ -S $work/state/daemon.sock ]] && break; sleep 0.05; done
  sleep 1
  local before
  before=$(switches "$daemon")
  sleep "$idle"
  local after
  after=$(switches "$daemon")
  echo "$label idle, no group: RssAnon $(status_of "$daemon" RssAnon) kB, VmRSS $(status_of "$daemon" VmRSS) kB, $(( (after - before) * 60 / idle )) wakeups/min"

  LD_LIBRARY_PATH=$standin LD_PRELOAD=$library GPULIMIT_STANDIN_DIR=$work/standin \
    AMP_VGPU_ENABLE=1 AMP_USE_HOST_DAEMON=1 GPU_LIMIT_DAEMON_SOCKET=$work/state/daemon.sock \
    GPU_LIMIT_STATE_DIR=$work/state GPU_LIMIT_GROUP=bench GPU_MEM_PER_DEVICE=2147483648 \
    GPU_UTIL_PER_DEVICE=40 "$job" alloc_mb=16 hold=1 >"$work/job.out" 2>"$work/job.log" &
  local jobpid=$!
  local slot=""
  for _ in $(seq 100); do
    slot=$("$new" status --json --state-dir "$work/state" --group bench 2>/dev/null |
      python3 -c 'import json,sys
d=json.load(sys.stdin)
def walk(x):
    if isinstance(x,dict):
        if "slot" in x and x.get("pid")=='"$jobpid"': print(x["slot"]); sys.exit()
        for v in x.values(): walk(v)
    elif isinstance(x,list):
        for v in x: walk(v)
walk(d)' 2>/dev/null || true)
    [[ -n $slot ]] && break
    sleep 0.05
  done
  [[ -n $slot ]] || { echo "limit-daemon: no slot for the job; $(cat "$work/job.log")" >&2; exit 1; }
  sleep 2
  before=$(switches "$daemon")
  sleep "$idle"
  after=$(switches "$daemon")
  echo "$label one capped group: RssAnon $(status_of "$daemon" RssAnon) kB, VmRSS $(status_of "$daemon" VmRSS) kB, $(( (after - before) * 60 / idle )) wakeups/min"

  python3 - "$work/state/daemon.sock" bench "$slot" "$protocol" "$label" <<'PY'
import os, resource, socket, sys, time
path, group, slot, protocol, label = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 16100), hard))
null = os.open("/dev/null", os.O_RDONLY)
held = [os.dup(null) for _ in range(16000 - 4)]
times, replies = [], set()
for _ in range(9):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(30)
    s.connect(path)
    request = f"GPULIMIT{protocol} REGISTER {group} {slot}\n".encode()
    start = time.monotonic()
    if protocol == "2":
        s.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, null.to_bytes(4, "little"))])
    else:
        s.send(request)
    replies.add(s.recv(256).decode().strip())
    times.append(time.monotonic() - start)
    s.close()
    time.sleep(0.05)
times.sort()
print(f"{label} registration, peer with {len(held) + 4} fds: median {times[4]*1e3:.3f} ms, "
      f"worst {times[-1]*1e3:.3f} ms ({', '.join(sorted(replies))})")
PY
  kill "$jobpid" "$daemon" 2>/dev/null || true
  wait "$jobpid" "$daemon" 2>/dev/null || true
  rm -rf "$work"
}

measure before "$old" 1
measure after "$new" 2

flood() { # LABEL GPU_LIMIT PROTOCOL (the test fails for a daemon that stalls: its figure counts)
  { GPULIMIT_DAEMON_UNDER_TEST=$2 GPULIMIT_FLOOD_PROTOCOL=$3 "$tests" \
    --gtest_filter='DaemonEndToEnd.AFloodOfPeersDoesNotStallTheComputeSteps' 2>&1 || true; } |
    sed -n "s/^flood: /$1 flood: /p"
}
flood before "$old" 1
flood after "$new" 2
