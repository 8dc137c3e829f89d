# Installed as /scenario-common.sh and sourced by every scenario (POSIX sh
# under set -e: busybox's, or dash in the Debian flavours).
release=$(uname -r)
# shellcheck disable=SC2034 # used by the scenarios
extra=/lib/modules/$release/extra
fail() { echo "FAIL: $*"; exit 1; }
