#!/usr/bin/env bash
# Lint of what runs outside C++: the shell the boot runs (the SysV script,
# the initramfs hook, the /etc/default file they source) under dash and
# busybox sh and checkbashisms, and the rendered man pages under groff's
# warnings and mandoc's errors.
#
#   check-boot-lint.sh SOURCE_DIR MAN_DIR
#
# Exits 77 (skipped, loudly) when a linter is missing; CI installs them.
set -euo pipefail
src=$1 man_dir=$2
missing=()
for tool in dash busybox checkbashisms mandoc man; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]} > 0)); then
  echo "SKIPPED LOUDLY: lint needs ${missing[*]}; run scripts/install-test-deps" >&2
  exit 77
fi
status=0
bad() { echo "lint: FAIL: $*" >&2; status=1; }

shell_files=("$src/initscripts/gpu-restriction" "$src/initscripts/initramfs-tools/gpu-restriction"
  "$src/initscripts/gpu-restriction.default")
for file in "${shell_files[@]}"; do
  dash -n "$file" || bad "$file: dash -n"
  busybox sh -n "$file" || bad "$file: busybox sh -n"
  # --posix: also what Debian's policy tolerates but POSIX sh lacks.
  checkbashisms --posix --force "$file" || bad "$file: checkbashisms"
done
head -1 "$src/initscripts/gpu-restriction" | grep -qx '#!/bin/sh' || bad "the SysV script is not #!/bin/sh"

pages=("$man_dir"/*.[1-8])
((${#pages[@]} > 0)) && [[ -f ${pages[0]} ]] || bad "no rendered man pages in $man_dir"
for page in "${pages[@]}"; do
  # man prints groff's warnings on stderr and still exits 0.
  warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null) ||
    bad "$page: man failed"
  [[ -z $warnings ]] || bad "$page: groff warnings: $warnings"
  # scdoc's .PP after .SH is only mandoc's style warning; errors are not.
  mandoc -Tlint -W error "$page" || bad "$page: mandoc errors"
done
[[ $status -eq 0 ]] && echo "lint: ${#shell_files[@]} shell files and ${#pages[@]} man pages clean"
exit $status
