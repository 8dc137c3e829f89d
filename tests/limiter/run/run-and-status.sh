#!/usr/bin/env bash
# gpu-limit run and status end to end: the command, the real interposer,
# Debian's real libcudart 11.8 and the stand-in driver (LD_LIBRARY_PATH).
#   run-and-status.sh GPU_LIMIT LIBGPULIMIT CUDART_PROBE
# Two processes of one group share its cap; status shows the cap, the usage
# and the processes; a SIGKILLed process's memory is free within 1 s.
set -euo pipefail
tool=$1 library=$2 probe=$3

fail() { echo "run-and-status: FAIL: $*" >&2; exit 1; }
expect_line() { # OUTPUT PATTERN WHAT
  grep -Eq -- "$2" <<<"$1" || fail "$3: no line matching '$2' in:"$'\n'"$1"
}

state=$(mktemp -d)
holder=
cleanup() {
  [[ -z $holder ]] || kill -9 "$holder" 2>/dev/null || true
  rm -rf "$state"
}
trap cleanup EXIT
chmod 700 "$state"

# 1 GiB per GPU, minus the default 10 MiB reserve.
cap=$((1024 * 1024 * 1024 - 10 * 1024 * 1024))
limited() {
  "$tool" run --mem 1G --group e2e --state-dir "$state" --library "$library" -- "$probe" "$@"
}

out=$(limited meminfo malloc 2147483648 malloc 536870912 meminfo free-all meminfo)
expect_line "$out" "^step=meminfo err=0 .*free=$cap total=$cap$" "cudaMemGetInfo shows the cap"
expect_line "$out" "^step=malloc err=2 error=cudaErrorMemoryAllocation bytes=2147483648" \
  "an allocation over the cap fails with out of memory"
expect_line "$out" "^step=malloc err=0 .*bytes=536870912" "an allocation under the cap succeeds"
expect_line "$out" "^step=meminfo err=0 .*free=$((cap - 536870912)) total=$cap$" \
  "cudaMemGetInfo shows the usage"

# A holder keeps 512 MiB; a second process of the group gets only the rest.
# exec: the probe itself is $holder (gpu-limit run execs it too).
(exec "$tool" run --mem 1G --group e2e --state-dir "$state" --library "$library" -- \
  "$probe" malloc 536870912 hold >"$state/holder.out" 2>&1) &
holder=$!
for _ in $(seq 100); do
  grep -q '^step=hold' "$state/holder.out" && break
  sleep 0.05
done
grep -q '^step=hold' "$state/holder.out" || fail "the holder did not start: $(cat "$state/holder.out")"

out=$("$tool" status --state-dir "$state" --group e2e --json)
expect_line "$out" "\"cap_bytes\":$cap,\"used_bytes\":536870912," "status shows the holder's usage"
expect_line "$out" "\"pid\":$holder,[^}]*\"alive\":true,\"used_bytes\":\[536870912,0\]" \
  "status shows the holder"

out=$(limited malloc $((cap - 536870912 + 2 * 1024 * 1024)) malloc $((cap - 536870912)))
expect_line "$out" "^step=malloc err=2 .*bytes=$((cap - 536870912 + 2 * 1024 * 1024)) " \
  "the group's second process cannot take what the first holds"
expect_line "$out" "^step=malloc err=0 .*bytes=$((cap - 536870912)) " \
  "the group's second process gets the rest"

# SIGKILL: the holder's memory is back within a second.
kill -9 "$holder"
wait "$holder" 2>/dev/null || true
holder=
start=$(date +%s%N)
while :; do
  out=$("$tool" status --state-dir "$state" --group e2e --json)
  grep -q "\"used_bytes\":0,.*\"used_bytes\":0," <<<"$out" && break
  (($(date +%s%N) - start < 1000000000)) || fail "the killed holder's memory is not back after 1 s: $out"
  sleep 0.05
done
echo "run-and-status: passed"
