# Sourced by every scenario (busybox sh, set -e).
release=$(uname -r)
extra=/lib/modules/$release/extra
fail() { echo "FAIL: $*"; exit 1; }
