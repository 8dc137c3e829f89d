#!/usr/bin/env bash
# A daemon at rest: its wakeups over a window, and its memory. Starts the
# daemon's command (in the foreground: no --daemon), waits SETTLE seconds
# for it to finish starting, then counts, over SECONDS seconds, the context
# switches of every thread of it (voluntary and not, /proc/PID/task/*/status)
# and its timeslices (/proc/PID/task/*/schedstat, third field: how often the
# scheduler ran it), and reads VmRSS, RssAnon and RssFile at the end
# (/proc/PID/status). RSS counts the binary's page cache too (whole folios
# on kernels with large folios); RssAnon is the daemon's own memory.
#   bench/daemons/idle.sh [-s SECONDS] [-w SETTLE] [-n NAME] -- COMMAND [ARG...]
#   bench/daemons/idle.sh [-s SECONDS] [-n NAME] -p PID        (one that runs)
# Prints one line: NAME seconds=... wakeups=... wakeups_per_min=...
#   timeslices=... rss_kb=... rss_anon_kb=... rss_file_kb=... threads=...
set -euo pipefail
seconds=60
settle=3
name=daemon
pid=
while getopts "s:w:n:p:" opt; do
  case $opt in
  s) seconds=$OPTARG ;;
  w) settle=$OPTARG ;;
  n) name=$OPTARG ;;
  p) pid=$OPTARG ;;
  *) echo "usage: $0 [-s SECONDS] [-w SETTLE] [-n NAME] (-p PID | -- COMMAND...)" >&2; exit 1 ;;
  esac
done
shift $((OPTIND - 1))
started=
if [ -z "$pid" ]; then
  [ $# -gt 0 ] || { echo "$0: give -p PID or -- COMMAND" >&2; exit 1; }
  "$@" >/dev/null 2>&1 &
  pid=$!
  started=1
  trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true' EXIT
  sleep "$settle"
fi
[ -d "/proc/$pid" ] || { echo "$0: process $pid is not running" >&2; exit 1; }

# Sums over the threads alive now: switches, timeslices.
counts() {
  local switches=0 slices=0 task v n s
  for task in /proc/"$pid"/task/*; do
    v=$(awk '/^voluntary_ctxt_switches/ {print $2}' "$task/status" 2>/dev/null || echo 0)
    n=$(awk '/^nonvoluntary_ctxt_switches/ {print $2}' "$task/status" 2>/dev/null || echo 0)
    s=$(awk '{print $3}' "$task/schedstat" 2>/dev/null || echo 0)
    switches=$((switches + ${v:-0} + ${n:-0}))
    slices=$((slices + ${s:-0}))
  done
  echo "$switches $slices"
}
read -r switches0 slices0 < <(counts)
sleep "$seconds"
[ -d "/proc/$pid" ] || { echo "$0: process $pid exited during the window" >&2; exit 1; }
read -r switches1 slices1 < <(counts)
field() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$pid/status"; }
wakeups=$((switches1 - switches0))
echo "$name seconds=$seconds wakeups=$wakeups" \
  "wakeups_per_min=$(awk -v w="$wakeups" -v s="$seconds" 'BEGIN {printf "%.1f", w * 60 / s}')" \
  "timeslices=$((slices1 - slices0)) rss_kb=$(field VmRSS) rss_anon_kb=$(field RssAnon)" \
  "rss_file_kb=$(field RssFile) threads=$(ls /proc/"$pid"/task | wc -l)"
[ -z "$started" ] || true
