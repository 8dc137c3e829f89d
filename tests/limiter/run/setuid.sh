#!/usr/bin/env bash
# libgpulimit.so in a setuid program: /etc/ld.so.preload (how gpu-limit's
# hook and runtime put the library into containers) loads it into setuid
# programs too, whose environment is their caller's. The library must read
# none of it there: a caller's ALIYUN_COM_GPU_OOM_SCRIPT would run as root.
#   setuid.sh LIBGPULIMIT SECURE_PROBE
# In a private mount namespace, /etc is a directory of the test's own with
# ld.so.preload naming the library (and the host's ld.so.cache). The probe
# runs as nobody, once setuid root (not limited, no script run, no state
# made), once with a file capability (AT_SECURE without set-user-ID: the
# same), and once plain (limited, as the control that the preload works
# here).
# Exit 77 (skipped) without root, or where the work directory is nosuid.
set -euo pipefail
library=$(realpath "$1") probe=$(realpath "$2")
fail() { echo "setuid: FAIL: $*" >&2; exit 1; }
skip() { echo "setuid: SKIPPED: $*" >&2; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root (a setuid-root copy of the probe, a mount namespace)"
command -v setpriv >/dev/null || skip "no setpriv (util-linux)"
work=$(mktemp -d "$(dirname "$probe")/setuid-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
findmnt -no OPTIONS -T "$work" | grep -qw nosuid && skip "$work is on a nosuid file system"

cp "$probe" "$work/probe-suid"
cp "$probe" "$work/probe"
cp "$probe" "$work/probe-cap"
chown root:root "$work/probe-suid"
chmod 4755 "$work/probe-suid"
mkdir -m 1777 "$work/out"
printf '#!/bin/sh\nid -u >%s/out/script-ran\n' "$work" >"$work/oom.sh"
chmod 755 "$work/oom.sh"
mkdir -p "$work/etc" "$work/state"
chown 65534:65534 "$work/state"
chmod 700 "$work/state"
echo "$library" >"$work/etc/ld.so.preload"
[[ ! -e /etc/ld.so.cache ]] || cp /etc/ld.so.cache "$work/etc/"

run_as_nobody() { # PROGRAM
  unshare --mount --propagation private -- sh -c 'mount --bind "$1/etc" /etc && shift && exec "$@"' \
    ns "$work" setpriv --reuid=65534 --regid=65534 --clear-groups \
    env -i AMP_VGPU_ENABLE=1 GPU_MEM_PER_DEVICE=1073741824 GPU_LIMIT_OOM_POLICY=kill \
    ALIYUN_COM_GPU_OOM_SCRIPT="$work/oom.sh" GPU_LIMIT_STATE_DIR="$work/state" \
    GPU_LIMIT_GROUP=setuid-test "$1" 2>&1
}

cap=$((1024 * 1024 * 1024 - 10 * 1024 * 1024))
# The control: limited, the 2 GiB allocation refused, the script run as
# nobody, the process ended (GPU_LIMIT_OOM_POLICY=kill).
out=$(run_as_nobody "$work/probe") || true
grep -q "^init=0 total=$cap$" <<<"$out" ||
  fail "the control (not setuid) is not limited, so the preload does not work here: $out"
[[ $(cat "$work/out/script-ran" 2>/dev/null) == 65534 ]] ||
  fail "the control's OOM script did not run as nobody: $out"
rm -f "$work/out/script-ran"
rm -rf "${work:?}/state/"*

out=$(run_as_nobody "$work/probe-suid") || true
[[ ! -e $work/out/script-ran ]] ||
  fail "the caller's OOM script ran in the setuid program as uid $(cat "$work/out/script-ran")"
grep -q "^init=0 total=17179869184$" <<<"$out" && grep -q "^alloc=0$" <<<"$out" ||
  fail "the setuid program read the caller's settings: $out"
[[ -z $(ls -A "$work/state") ]] || fail "the setuid program made group state: $(ls -A "$work/state")"

# A file capability makes the kernel set AT_SECURE for a program that is
# neither set-user-ID nor set-group-ID.
if command -v setcap >/dev/null && setcap cap_net_bind_service+ep "$work/probe-cap" 2>/dev/null; then
  out=$(run_as_nobody "$work/probe-cap") || true
  [[ ! -e $work/out/script-ran ]] ||
    fail "the caller's OOM script ran in a program with file capabilities as uid $(cat "$work/out/script-ran")"
  grep -q "^init=0 total=17179869184$" <<<"$out" && grep -q "^alloc=0$" <<<"$out" ||
    fail "the program with file capabilities read the caller's settings: $out"
  [[ -z $(ls -A "$work/state") ]] ||
    fail "the program with file capabilities made group state: $(ls -A "$work/state")"
else
  echo "setuid: SKIPPED the file-capability case: no setcap, or the file system keeps no capabilities" >&2
fi
echo "setuid: the library reads no setting in a setuid program; the control is limited"
