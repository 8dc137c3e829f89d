# Installed as /scenario-common.sh and sourced by every scenario (POSIX sh
# under set -e: busybox's, or dash in the Debian flavours).
release=$(uname -r)
# shellcheck disable=SC2034 # used by the scenarios
extra=/lib/modules/$release/extra
fail() { echo "FAIL: $*"; exit 1; }
# Centiseconds since boot.
now() { awk '{ printf "%d\n", $1 * 100 }' /proc/uptime; }
# wait_for CONDITION TENTHS: waits up to TENTHS tenths of a second for the
# shell condition, then fails the scenario.
wait_for() {
  n=0
  until eval "$1"; do
    n=$((n + 1))
    [ $n -le "$2" ] || fail "timed out waiting for: $1"
    sleep 0.1
  done
}
