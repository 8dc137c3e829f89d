#!/usr/bin/env bash
# gpu-persist's figures, from the real-kernel VM scenarios (tests/vm): start
# to all-held for 8 GPUs (init_ms=500) with non-blocking opens against the
# blocking fallback in the same boot, and for 16 GPUs under systemd (start
# job done = READY=1) against the serial sum; idle wakeups over 60 s; RSS of
# the daemon and its helper holding 8 GPUs; stop time. The control-socket
# round trip is the unit test PersistDaemonTest.ControlRoundTripMedian.
#   bench/persist-vm.sh [BUILD_DIR] [RUNS]   (default build, 3)
set -euo pipefail
build=${1:-build}
runs=${2:-3}
for run in $(seq "$runs"); do
  ctest --test-dir "$build" -R 'vm\.persist(-systemd)?$' >/dev/null ||
    { echo "persist-vm: the scenarios failed; see $build/vm-logs" >&2; exit 1; }
  grep -h '^BENCH' "$build/vm-logs/persist.log" "$build/vm-logs/persist-systemd.log" |
    tr -d '\r' | sed "s/^BENCH /run $run: /"
  parallel=$(sed -n 's/^BENCH start-to-held-8-gpus cs=\([0-9]*\).*/\1/p' "$build/vm-logs/persist.log")
  blocking=$(sed -n 's/^BENCH start-to-held-8-gpus-blocking-open cs=\([0-9]*\).*/\1/p' \
    "$build/vm-logs/persist.log" | tr -d '\r')
  ready16=$(sed -n 's/^BENCH start-to-ready-16-gpus cs=\([0-9]*\).*/\1/p' \
    "$build/vm-logs/persist-systemd.log" | tr -d '\r')
  awk -v p="${parallel//[^0-9]/}" -v b="$blocking" -v r="$ready16" -v n="$run" 'BEGIN {
    printf "run %d: 8 GPUs: blocking/non-blocking = %.2fx; 16 GPUs: serial 800 cs / %d cs = %.2fx\n",
      n, b / p, r, 800 / r }'
done
