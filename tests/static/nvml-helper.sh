#!/usr/bin/env bash
# The static tools hand the command lines that use NVML (gpu-limit daemon,
# gpu-mig apply and sync) to the NVML helper, the dynamic gpuinit the Debian
# package installs as gpuinit-nvml, and only when root alone can change it.
#   nvml-helper.sh GPUINIT (the static multi-call binary)
set -euo pipefail
gpuinit=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "SKIPPED LOUDLY: needs root (root-owned helper files)" >&2; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir -m 755 "$work/bin"
for tool in gpu-limit gpu-mig; do ln -s "$gpuinit" "$work/bin/$tool"; done
# The helper prints the command line it was given, argv[0] first.
helper=$work/libexec/gpuinit-nvml
mkdir -m 755 "$work/libexec"
cat >"$work/helper.c" <<'C'
#include <stdio.h>
int main(int argc, char** argv) {
    for (int i = 0; i < argc; ++i) printf("%s%s", i ? " " : "helper: ", argv[i]);
    printf("\n");
    return 42;
}
C
cc -O0 -o "$helper" "$work/helper.c" || { echo "SKIPPED LOUDLY: no C compiler" >&2; exit 77; }
chmod 755 "$helper"

run() { # run EXPECTED-STATUS TOOL ARGS...; output in $out
  local expected=$1 status=0
  shift
  out=$(env -i GPUINIT_NVML_HELPER="$helper" "$@" 2>&1) || status=$?
  [[ $status == "$expected" ]] || fail "$* exited $status, not $expected: $out"
}

run 42 "$work/bin/gpu-limit" daemon --once
[[ $out == "helper: gpu-limit daemon --once" ]] || fail "gpu-limit daemon: $out"
run 42 "$work/bin/gpu-mig" sync -v
[[ $out == "helper: gpu-mig sync -v" ]] || fail "gpu-mig sync: $out"
run 42 "$work/bin/gpu-mig" --root / apply --dry-run
[[ $out == "helper: gpu-mig --root / apply --dry-run" ]] || fail "gpu-mig apply: $out"
run 42 "$gpuinit" mig apply --check
[[ $out == "helper: gpu-mig apply --check" ]] || fail "gpuinit mig apply: $out"

# The per-job commands stay in the static binary.
run 0 "$work/bin/gpu-mig" --help
[[ $out != *helper:* ]] || fail "gpu-mig --help went to the helper"
run 0 "$work/bin/gpu-limit" --help
[[ $out != *helper:* ]] || fail "gpu-limit --help went to the helper"
# An option's value that reads like a command is not one: these are pick
# and gres, which stay here (and fail on the missing root).
for line in "pick -p sync" "pick --profile apply" "pick --prof sync" "-psync pick" \
  "gres --node apply" "--type-map sync gres" "pick -vp apply" "env --gres-conf sync"; do
  # shellcheck disable=SC2086 # the words of $line are arguments
  run 3 "$work/bin/gpu-mig" --root "$work/none" $line
  [[ $out != *helper:* ]] || fail "gpu-mig $line went to the helper: $out"
done
run 42 "$work/bin/gpu-mig" --root "$work/none" -p x sync
[[ $out == "helper: gpu-mig --root $work/none -p x sync" ]] || fail "gpu-mig -p x sync: $out"

# Turned off, or absent: the static tool runs the command itself.
status=0
out=$(env -i GPUINIT_NVML_HELPER=none "$work/bin/gpu-mig" sync --root "$work/none" 2>&1) || status=$?
[[ $out != *helper:* ]] || fail "GPUINIT_NVML_HELPER=none still ran the helper"
status=0
out=$(env -i GPUINIT_NVML_HELPER="$work/libexec/absent" "$work/bin/gpu-mig" sync --root "$work/none" 2>&1) ||
  status=$?
[[ $out != *helper:* && $out != *"NVML helper"* ]] || fail "an absent helper was mentioned: $out"

# Not root's alone: a warning, and the command runs here.
untrusted() { # untrusted WHAT: the helper not run, one warning
  status=0
  out=$(env -i GPUINIT_NVML_HELPER="$1" "$work/bin/gpu-mig" sync --root "$work/none" 2>&1) || status=$?
  [[ $out != *helper:* ]] || fail "$2: the helper ran"
  grep -q "gpu-mig: warning: NVML helper not used" <<<"$out" || fail "$2: no warning: $out"
}
chmod 775 "$helper"
untrusted "$helper" "a group-writable helper"
chmod 755 "$helper"
chown 1:1 "$helper"
untrusted "$helper" "a helper owned by another user"
chown 0:0 "$helper"
chmod 777 "$work/libexec"
untrusted "$helper" "a helper in a world-writable directory"
chmod 755 "$work/libexec"
ln -s "$helper" "$work/libexec/link"
untrusted "$work/libexec/link" "a symbolic link"
run 42 "$work/bin/gpu-mig" sync

# A helper the kernel cannot start from its descriptor (a script: its
# interpreter would get /dev/fd/N, closed by then) is not taken for "no
# helper": it is said.
printf '#!/bin/sh\necho "helper: $0 $*"\nexit 42\n' >"$work/libexec/script"
chmod 755 "$work/libexec/script"
untrusted "$work/libexec/script" "a script helper"
grep -q "interpreter" <<<"$out" || fail "a script helper: the warning does not say why: $out"

# A helper that is a static build itself (a copy of this one) runs the
# command once, instead of handing it on to a helper again, forever.
static_helper=$work/libexec/static-gpuinit
cp "$gpuinit" "$static_helper"
chmod 755 "$static_helper"
status=0
out=$(timeout 20 env -i GPUINIT_NVML_HELPER="$static_helper" "$work/bin/gpu-mig" sync \
  --root "$work/none" 2>&1) || status=$?
[[ $status != 124 ]] || fail "a static helper exec'd itself in a loop"
[[ $status == 3 && $out == "gpu-mig: error: root $work/none:"* ]] ||
  fail "a static helper: exit $status: $out"

# The helper runs under the tool's name (/proc/PID/comm), which the SysV
# script's pid check, ps and pidof read, not under the name the kernel gives
# an exec through a descriptor (the descriptor's number, or gpuinit-nvml).
# comm-of runs a command and prints the comm of its zombie.
cat >"$work/comm-of.c" <<'C'
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char** argv) {
    (void)argc;
    pid_t pid = fork();
    if (pid == 0) {
        execv(argv[1], argv + 1);
        _exit(127);
    }
    siginfo_t info;
    if (pid < 0 || waitid(P_PID, pid, &info, WEXITED | WNOWAIT) != 0) return 1;
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    FILE* file = fopen(path, "r");
    if (file == NULL || fgets(comm, sizeof comm, file) == NULL) return 1;
    printf("%s", comm);
    return 0;
}
C
cc -O0 -o "$work/comm-of" "$work/comm-of.c" || fail "comm-of.c does not build"
comm=$(env -i GPUINIT_NVML_HELPER="$static_helper" "$work/comm-of" "$work/bin/gpu-mig" sync \
  --root "$work/none" 2>/dev/null) || fail "comm-of failed"
[[ $comm == gpu-mig ]] || fail "the helper runs as '$comm', not gpu-mig"
echo "PASS: nvml-helper"
